"""`kafkacodec users`: the credentials file of `serve`'s SASL listeners (kafkacodec.users.file):
add a user's password (read from stdin, never from the command line), remove a user, list the
users and their mechanisms.  The file holds salted hashes only (kafkacodec/net/users.py)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from kafkacodec.cli._exit import EXIT_CODES, EXIT_DATA, EXIT_OK, EXIT_USAGE, CliError
from kafkacodec.cli._output import FORMATTER, count_arg, emit_json

MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN")


def _read_password(name: str) -> str:
    """From a terminal: asked twice without echo (getpass).  From a pipe or file: its first
    line, without the line end."""
    if sys.stdin is not None and sys.stdin.isatty():
        import getpass

        first = getpass.getpass(f"Password for {name}: ")
        if getpass.getpass(f"Again, password for {name}: ") != first:
            raise CliError("the two passwords differ; nothing was changed", EXIT_USAGE)
        return first
    raw = sys.stdin.buffer.readline() if sys.stdin is not None else b""
    if not raw:
        raise CliError("no password on standard input (give it on one line, or run in a terminal)", EXIT_USAGE)
    try:
        return raw.rstrip(b"\n").rstrip(b"\r").decode("utf-8")
    except UnicodeDecodeError:
        raise CliError("the password on standard input is not UTF-8", EXIT_USAGE) from None


def _run_add(args: argparse.Namespace) -> int:
    from kafkacodec.net._secret import Secret
    from kafkacodec.net.users import UsersFile, add_user

    mechanisms = tuple(dict.fromkeys(args.mechanism))
    limit = 1_000_000 if mechanisms == ("PLAIN",) else 16384
    if args.iterations > limit:
        raise CliError(f"--iterations {args.iterations}: SCRAM allows at most 16384 (Kafka's bound), PLAIN "
                       "1000000", EXIT_USAGE)
    password = Secret(_read_password(args.name))
    if not password.reveal():
        raise CliError("the password is empty; nothing was changed", EXIT_USAGE)
    try:
        users: UsersFile = add_user(args.users_file, args.name, mechanisms, password, iterations=args.iterations)
    except ValueError as exc:
        raise CliError(str(exc), EXIT_DATA) from None
    others = [m for m in users.mechanisms(args.name) if m not in mechanisms]
    note = f"; {', '.join(others)} keep{'s' if len(others) == 1 else ''} the earlier password" if others else ""
    print(f"{args.users_file}: {args.name} set for {', '.join(mechanisms)}{note}", file=sys.stderr)
    return EXIT_OK


def _run_remove(args: argparse.Namespace) -> int:
    from kafkacodec.net.users import remove_user

    try:
        removed = remove_user(args.users_file, args.name, args.mechanism)
    except ValueError as exc:
        raise CliError(str(exc), EXIT_DATA) from None
    if not removed:
        what = f"{args.name} with {args.mechanism}" if args.mechanism else args.name
        raise CliError(f"{args.users_file}: no user {what}; nothing was changed", EXIT_USAGE)
    print(f"{args.users_file}: {args.name} removed ({', '.join(removed)})", file=sys.stderr)
    return EXIT_OK


def _run_list(args: argparse.Namespace) -> int:
    from kafkacodec.net.users import UsersFile

    try:
        users = UsersFile.load(args.users_file)
    except ValueError as exc:
        raise CliError(str(exc), EXIT_DATA) from None
    if args.json:
        emit_json([{"name": n, "mechanisms": list(users.mechanisms(n))} for n in users.names()])
    else:
        for name in users.names():
            print(f"{name}\t{','.join(users.mechanisms(name))}")
    return EXIT_OK


def run(args: argparse.Namespace) -> int:
    return int(args.users_run(args))


def add_parser(subparsers: Any) -> None:
    u = subparsers.add_parser(
        "users", formatter_class=FORMATTER,
        help="manage serve's SASL credentials file (salted hashes: SCRAM-SHA-256/512, PLAIN)",
        description="The credentials file of `kafkacodec serve` (kafkacodec.users.file): per user, "
                    "SCRAM-SHA-256 and SCRAM-SHA-512 entries as Kafka keeps them (salt, iterations, "
                    "StoredKey, ServerKey) and PLAIN entries (PBKDF2-HMAC-SHA-512), never a "
                    "password. The file is replaced atomically, mode 0600. See docs/security.md.",
        epilog="examples:\n"
               "  kafkacodec users add users.txt alice --mechanism SCRAM-SHA-512      # asks twice\n"
               "  printf '%s\\n' \"$ALICE_PASSWORD\" | kafkacodec users add users.txt alice \\\n"
               "      --mechanism SCRAM-SHA-256 --mechanism SCRAM-SHA-512 --mechanism PLAIN\n"
               "  kafkacodec users list users.txt\n"
               "  kafkacodec users remove users.txt alice\n\n" + EXIT_CODES)
    sub = u.add_subparsers(dest="users_command", metavar="ACTION", required=True)
    add = sub.add_parser(
        "add", formatter_class=FORMATTER, help="set a user's password for one or more mechanisms",
        description="Set NAME's password for each --mechanism, creating USERS_FILE if needed. The "
                    "password is read from standard input: asked twice without echo on a "
                    "terminal, else the first line of the input. It is never an argument (it "
                    "would show in the process list and the shell history).",
        epilog="examples:\n  kafkacodec users add users.txt alice --mechanism SCRAM-SHA-512\n"
               "  kafkacodec users add users.txt bob --mechanism PLAIN --iterations 100000 < pw.txt\n\n"
               + EXIT_CODES)
    add.add_argument("users_file", metavar="USERS_FILE")
    add.add_argument("name", metavar="NAME", help="the user name (principal User:NAME)")
    add.add_argument("--mechanism", choices=MECHANISMS, action="append", required=True,
                     help="SCRAM-SHA-256, SCRAM-SHA-512 or PLAIN (repeatable); other mechanisms of the "
                          "user keep their password")
    add.add_argument("--iterations", type=count_arg(4096), default=4096, metavar="N",
                     help="PBKDF2 iterations (default 4096, Kafka's minimum; SCRAM at most 16384, PLAIN "
                          "at most 1000000: each PLAIN login hashes this many times)")
    add.set_defaults(users_run=_run_add)
    remove = sub.add_parser("remove", formatter_class=FORMATTER, help="remove a user (or one of its mechanisms)",
                            epilog="examples:\n  kafkacodec users remove users.txt alice\n"
                                   "  kafkacodec users remove users.txt alice --mechanism PLAIN\n\n" + EXIT_CODES)
    remove.add_argument("users_file", metavar="USERS_FILE")
    remove.add_argument("name", metavar="NAME")
    remove.add_argument("--mechanism", choices=MECHANISMS, help="remove only this entry")
    remove.set_defaults(users_run=_run_remove)
    listing = sub.add_parser("list", formatter_class=FORMATTER, help="the users and their mechanisms",
                             epilog="examples:\n  kafkacodec users list users.txt\n"
                                    "  kafkacodec users list --json users.txt | jq -r '.[].name'\n\n" + EXIT_CODES)
    listing.add_argument("users_file", metavar="USERS_FILE")
    listing.add_argument("--json", action="store_true", help="print one JSON document")
    listing.set_defaults(users_run=_run_list)
    u.set_defaults(run=run)
