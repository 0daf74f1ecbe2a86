"""The library: typed config, schemas, Spark session, ingest, difficulty, curricula,
training, tracking, reports and the CLI."""
