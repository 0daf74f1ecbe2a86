"""spark-submit entry point of `ltr curriculum` (options: `ltr curriculum --help`).

spark-submit jobs/curriculum.py [options]
"""

import sys

from pipelines.app.cli import main

if __name__ == "__main__":
    sys.exit(main(["curriculum", *sys.argv[1:]]))
