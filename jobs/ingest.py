"""spark-submit entry point of `ltr ingest` (options: `ltr ingest --help`).

spark-submit jobs/ingest.py [options]
"""

import sys

from pipelines.app.cli import main

if __name__ == "__main__":
    sys.exit(main(["ingest", *sys.argv[1:]]))
