"""spark-submit entry point of `ltr report` (options: `ltr report --help`).

spark-submit jobs/report.py [options]
"""

import sys

from pipelines.app.cli import main

if __name__ == "__main__":
    sys.exit(main(["report", *sys.argv[1:]]))
