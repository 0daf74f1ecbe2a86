"""spark-submit entry point of `ltr difficulty` (options: `ltr difficulty --help`).

spark-submit jobs/difficulty.py [options]
"""

import sys

from pipelines.app.cli import main

if __name__ == "__main__":
    sys.exit(main(["difficulty", *sys.argv[1:]]))
