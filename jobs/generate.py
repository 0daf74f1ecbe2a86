"""spark-submit entry point of `ltr generate` (options: `ltr generate --help`).

spark-submit jobs/generate.py [options]
"""

import sys

from pipelines.app.cli import main

if __name__ == "__main__":
    sys.exit(main(["generate", *sys.argv[1:]]))
