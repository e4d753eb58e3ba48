"""`python -m kafkacodec.cli ARGS`: the `kafkacodec` command."""

import sys

from kafkacodec.cli import main

sys.exit(main())
