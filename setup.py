"""One installable distribution: the `pipelines` and `udfs` packages and the `ltr` command."""

from glob import glob

from setuptools import setup

# Every direct dependency is pinned (an unpinned install once resolved to an old PySpark).
INSTALL_REQUIRES = [
    "pyspark==4.3.0",
    "xgboost==3.2.0",
    "numpy==2.4.6",
    "pandas==2.3.3",  # PySpark 4 supports pandas < 3
    "pyarrow==25.0.1",
    "numba==0.68.1",
    "pyyaml==6.0.3",
    "mlflow==3.17.2",
    "scipy==1.17.1",
    "matplotlib==3.11.2",
    "tqdm==4.70.1",  # the progress bar on a terminal
]

TEST_REQUIRES = [
    "pytest==9.2.0",
    "pytest-timeout==2.4.0",
]

setup(
    name="ltr-curriculum",
    version="0.1.0",
    description="Curriculum and continuation learning-to-rank on Spark (MSLR-WEB30K scale)",
    python_requires=">=3.11,<3.12",
    packages=["pipelines", "udfs"],
    package_data={"pipelines": ["log4j2.properties"]},
    data_files=[
        ("share/ltr/conf", glob("conf/*.yaml")),
        ("share/ltr/conf/datasets", glob("conf/datasets/*.yaml")),
    ],
    install_requires=INSTALL_REQUIRES,
    extras_require={"test": TEST_REQUIRES},
    entry_points={"console_scripts": ["ltr = pipelines.cli:main"]},
)
