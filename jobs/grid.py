"""spark-submit entry point of `ltr grid` (options: `ltr grid --help`).

spark-submit jobs/grid.py [options]
"""

import sys

from pipelines.app.cli import main

if __name__ == "__main__":
    sys.exit(main(["grid", *sys.argv[1:]]))
