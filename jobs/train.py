"""spark-submit entry point of `ltr train` (options: `ltr train --help`).

spark-submit jobs/train.py [options]
"""

import sys

from pipelines.app.cli import main

if __name__ == "__main__":
    sys.exit(main(["train", *sys.argv[1:]]))
