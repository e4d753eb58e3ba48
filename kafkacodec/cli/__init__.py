"""The `kafkacodec` command: dump, read, verify, convert and generate Kafka log segments, run the
segments <-> Parquet job on Spark, serve log directories (or a cluster) to Kafka clients, manage
serve's SASL credentials, and mirror topics between clusters.  `kafkacodec --help` and `kafkacodec COMMAND --help`.

One module per command; each has `add_parser(subparsers)`, which adds its subcommand and sets
`run=` to the function that carries it out (`run(args) -> exit status`).  COMMANDS lists them
in --help order (docs/DEVELOPING.md: adding a command).

Every command that writes a file goes through _atomic.atomic_output (a temporary file beside
the target, fsync, rename): OUT is complete or untouched, never the input, and nothing the
command did not create is ever deleted.  main() turns every error into one line on stderr and
the documented exit code."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from kafkacodec.cli import convert, dump, generate as _generate, mirror, read, serve, spark, users, verify
from kafkacodec.cli._exit import (EXIT_CODES, EXIT_DATA, EXIT_INPUT, EXIT_OK, EXIT_UNAVAILABLE, EXIT_USAGE,
                                  CliError, run_reporting_errors)
from kafkacodec.cli._output import FORMATTER, Parser
from kafkacodec.cli.generate import generate

__all__ = ["main", "build_parser", "generate", "CliError", "COMMANDS", "EXIT_OK", "EXIT_DATA", "EXIT_USAGE",
           "EXIT_INPUT", "EXIT_UNAVAILABLE"]

COMMANDS = (dump, read, verify, convert, _generate, spark, serve, users, mirror)


def _version() -> str:
    """`kafkacodec X.Y.Z (Python ..., compiled core at PATH)`: what a bug report needs."""
    import platform

    import kafkacodec

    where = os.path.dirname(kafkacodec.__file__)
    core = "compiled core" if kafkacodec.__compiled__ else "NO compiled core"
    return f"kafkacodec {kafkacodec.__version__} ({core}, Python {platform.python_version()}, {where})"


def build_parser() -> Parser:
    p = Parser(
        prog="kafkacodec", formatter_class=FORMATTER,
        description="Read, check, convert and serve Kafka log segments (v0/v1 messages, v2 batches); mirror topics between clusters.",
        epilog="examples:\n"
               "  kafkacodec generate /tmp/log                 # a sample log directory\n"
               "  kafkacodec dump --deep /tmp/log/events-0/00000000000000000000.log\n"
               "  kafkacodec read /tmp/log -t orders -o -5 -f '%p %o %k %s\\n'   # kcat-style records\n"
               "  kafkacodec verify /tmp/log                   # CRC check, exit 1 on corruption\n"
               "  kafkacodec convert --to-magic 1 in.log out.log\n"
               "  kafkacodec spark convert /tmp/log /tmp/parquet\n"
               "  kafkacodec spark convert --sample /tmp/log /tmp/parquet\n"
               "  kafkacodec serve /tmp/log --listen 127.0.0.1:9092\n"
               "  kafkacodec users add users.txt alice --mechanism SCRAM-SHA-512\n\n" + EXIT_CODES)
    p.add_argument("--version", action="version", version=_version())
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in COMMANDS:
        command.add_parser(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; every failure becomes one `kafkacodec: error:` line on stderr and the
    exit code of EXIT_CODES (argparse exits 2 itself on bad arguments)."""
    args = build_parser().parse_command_line(argv)
    return run_reporting_errors(args.command, lambda: int(args.run(args)))


if __name__ == "__main__":
    sys.exit(main())
