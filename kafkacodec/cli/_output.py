"""Output helpers shared by the commands: JSON on stdout, argparse types and help text."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Callable

__all__ = ["emit_json", "count_arg", "FORMATTER"]

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
