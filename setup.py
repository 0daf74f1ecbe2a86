"""One installable distribution: the `pipelines` and `udfs` packages and the `ltr` command.

Dependencies are declared as the ranges the code supports; the exact set CI tests lives
in constraints.txt (a lock of every package, direct and transitive), which README's two
commands pass to pip with ``-c constraints.txt``.
"""

from glob import glob

from setuptools import find_packages, setup

INSTALL_REQUIRES = [
    "pyspark[connect]>=4.0,<5",  # Spark 4: Java 17+, Python 3.10+; [connect]: the Spark Connect client (--remote)
    "xgboost>=3.0,<4",  # the JSON model layout and QuantileDMatrix(ref=) the trainer relies on; GPU: docs/how-to/gpu.md
    "numpy>=2.0,<3",
    "pandas>=2.2,<3",  # PySpark 4 supports pandas < 3
    "pyarrow>=15",
    "numba>=0.60",
    "pyyaml>=6",
    "mlflow>=3.0,<4",  # mlflow.xgboost.log_model(name=...), experiment kinds
    "scipy>=1.11",  # stats.permutation_test(paired), ttest_rel
    "matplotlib>=3.8",
    "markdown-it-py>=3",  # the report's HTML from its Markdown (CommonMark with tables)
    "tqdm>=4.66",  # the progress bar on a terminal
    "venv-pack2>=0.9,<1",  # `ltr pack`: a maintained fork of venv-pack (same `venv_pack` module)
]

TEST_REQUIRES = [
    "pytest>=8",
    "pytest-timeout>=2.3",
    "pytest-xdist>=3.5",  # README's test command runs the suite in 2 processes, each with its own Spark session
    # the guard rails README's test command runs before the tests (docs/contributing.md)
    "ruff>=0.15",  # lint and format (ruff.toml)
    "import-linter>=2.1",  # import contracts: layers and no cycles (.importlinter)
    "mypy>=1.15",  # types of pipelines/, udfs/, jobs/ and benchmarks/ (mypy.ini), no baseline
    "uv>=0.9",  # .ci/run: the project on the other supported Pythons, installed in seconds
    "pytrec-eval-terrier>=0.5",  # trec_eval (C) on the report's TREC run files: the cross-check of its NDCG
    "hypothesis>=6.100",  # property-based tests of the parsers (tests/core/test_fuzz.py, benchmarks/bench_fuzz.py)
]

# Airflow 3 and its providers. The Spark provider stays below 6: 6.x depends on pyspark-client,
# which installs over pyspark's own files (a 4.2 client against 4.3 jars).
AIRFLOW_REQUIRES = [
    "apache-airflow>=3.3,<4",
    "apache-airflow-providers-apache-spark>=5.3,<6",
    "apache-airflow-providers-standard>=1.0",
]

# The production layout (docs/tutorials/airflow.md): PostgreSQL as Airflow's database and as the
# `mlflow server`'s backend store. Airflow 3 opens it with psycopg2 (`postgresql+psycopg2://`) and asyncpg
# (its async engine: `airflow db migrate` fails without it); MLflow's `postgresql://` is SQLAlchemy 2.1's
# default driver, psycopg 3.
DEPLOY_REQUIRES = [
    "psycopg2-binary>=2.9",
    "asyncpg>=0.29",
    "psycopg[binary]>=3.1",
    "Flask-WTF>=1.2,<2",  # mlflow server --app-name basic-auth (MLflow's `auth` extra): the layout's login
]

# benchmarks/bench_scale.py: LightGBM's lambdarank side by side with ours (pip install -e ".[bench]")
BENCH_REQUIRES = ["lightgbm>=4.5,<5", "catboost>=1.2,<2"]  # benchmarks only (side-by-side references)

# The documentation site (docs/, docs/README.md says why Sphinx): built offline, strictly, by
# tests/docs/test_site.py and `sphinx-build -W -n docs docs/_build/html`.
DOCS_REQUIRES = [
    "sphinx>=8,<10",
    "myst-parser>=4",  # the pages are Markdown (CommonMark, as README and the report are)
    "furo>=2024.8",  # a maintained theme whose pages and search work from files, offline
]

setup(
    name="ltr-curriculum",
    version="0.1.0",
    description="Curriculum and continuation learning-to-rank on Spark (MSLR-WEB30K scale)",
    python_requires=">=3.10",  # PySpark 4's floor; CI runs 3.11 (docs/contributing.md)
    packages=find_packages(include=["pipelines", "pipelines.*", "udfs", "udfs.*"]),  # pipelines.report too
    package_data={"pipelines.core": ["log4j2.properties"]},
    data_files=[
        ("share/ltr/conf", glob("conf/*.yaml")),
        ("share/ltr/conf/datasets", glob("conf/datasets/*.yaml")),
        ("share/ltr/jobs", glob("jobs/*.py")),  # spark-submit's scripts, found by pipelines.core.config.jobs_dir
    ],
    install_requires=INSTALL_REQUIRES,
    extras_require={
        "test": TEST_REQUIRES,
        "airflow": AIRFLOW_REQUIRES,
        "deploy": DEPLOY_REQUIRES,
        "bench": BENCH_REQUIRES,
        "docs": DOCS_REQUIRES,
    },
    entry_points={"console_scripts": ["ltr = pipelines.app.cli:main"]},
)
