"""Output helpers shared by the commands: JSON on stdout, argparse types and help text."""

from __future__ import annotations

import argparse
import json
import re
import sys
from typing import Any, Callable

__all__ = ["emit_json", "count_arg", "size_arg", "FORMATTER"]

FORMATTER = argparse.RawDescriptionHelpFormatter


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
