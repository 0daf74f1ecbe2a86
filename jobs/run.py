"""spark-submit entry point of `ltr run` (options: `ltr run --help`).

spark-submit jobs/run.py [options]
"""

import sys

from pipelines.app.cli import main

if __name__ == "__main__":
    sys.exit(main(["run", *sys.argv[1:]]))
