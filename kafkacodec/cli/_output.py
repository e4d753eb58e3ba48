"""Output helpers shared by the commands: JSON on stdout, argparse types and help text."""

from __future__ import annotations

import argparse
import difflib
import json
import re
import sys
from collections.abc import Sequence
from typing import Any, Callable

__all__ = ["emit_json", "count_arg", "size_arg", "FORMATTER", "Parser"]

FORMATTER = argparse.RawDescriptionHelpFormatter


class Parser(argparse.ArgumentParser):
    """argparse with the help a typo needs: an unknown subcommand or flag is reported by the
    subcommand it was given to (its usage, its name), with the nearest valid spelling."""

    def error(self, message: str) -> Any:
        wrong = re.match(r"argument \S+: invalid choice: '([^']*)' \(choose from (.*)\)$", message)
        if wrong:
            choices = re.findall(r"'([^']*)'", wrong.group(2))
            message += _did_you_mean(wrong.group(1), choices)
        super().error(message)

    def parse_command_line(self, args: Sequence[str] | None = None) -> argparse.Namespace:
        """parse_args(), with arguments left over reported by the subcommand that got them."""
        parsed, extras = self.parse_known_args(args)
        if extras:
            chosen = self._chosen_subcommand(parsed)
            flags = [o for a in chosen._actions for o in a.option_strings]
            hints = "".join(_did_you_mean(x.split("=", 1)[0], flags) for x in extras if x.startswith("-"))
            chosen.error(f"unrecognized arguments: {' '.join(extras)}{hints}")
        return parsed

    def _chosen_subcommand(self, parsed: argparse.Namespace) -> argparse.ArgumentParser:
        """The innermost (sub)parser the arguments chose: `kafkacodec spark convert` for those."""
        parser: argparse.ArgumentParser = self
        while True:
            sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
            name = getattr(parsed, sub.dest, None) if sub is not None else None
            if sub is None or name not in sub.choices:
                return parser
            parser = sub.choices[name]


def _did_you_mean(wrong: str, valid: list[str]) -> str:
    near = difflib.get_close_matches(wrong, valid, n=1, cutoff=0.6)
    return f" (did you mean {near[0]}?)" if near else ""


def emit_json(obj: Any) -> None:
    """One JSON document and a newline on stdout."""
    json.dump(obj, sys.stdout, default=str)
    sys.stdout.write("\n")


def count_arg(least: int) -> Callable[[str], int]:
    """An argparse type: a whole number of at least `least`."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
        if value < least:
            raise argparse.ArgumentTypeError(f"must be at least {least}, got {value}")
        return value
    return parse


_SIZE_UNITS = {"": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mb": 1 << 20,
               "mib": 1 << 20, "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30}


def size_arg(least: int) -> Callable[[str], int]:
    """An argparse type: BYTES of at least `least`, an integer with an optional binary unit
    (67108864, 64MiB, 64M, 512k, 1g)."""
    def parse(text: str) -> int:
        match = re.fullmatch(r"\s*(\d+)\s*([a-zA-Z]*)\s*", text)
        unit = match.group(2).lower() if match else ""
        if not match or unit not in _SIZE_UNITS:
            raise argparse.ArgumentTypeError(f"{text!r} is not a size (e.g. 67108864, 64MiB, 512k)")
        value = int(match.group(1)) * _SIZE_UNITS[unit]
        if value < least:
            raise argparse.ArgumentTypeError(f"must be at least {least} bytes, got {text!r}")
        return value
    return parse
