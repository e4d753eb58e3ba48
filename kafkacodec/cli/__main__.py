"""`python -m kafkacodec.cli ARGS`: the `kafkacodec` command."""

import sys

from kafkacodec.cli import main

if __name__ == "__main__":
    sys.exit(main())
