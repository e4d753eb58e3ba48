"""Spark-style options: case-insensitive names, string (or plain) values."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["Options"]


class Options:
    """Spark-style options: case-insensitive names, string (or plain) values."""

    def __init__(self, options: Options | Mapping[str, Any] | None = None):
        if isinstance(options, Options):
            options = options._values
        self._values: dict[str, Any] = {str(k).lower(): v for k, v in (options or {}).items()}

    def names(self) -> list[str]:
        """The option names given (lower case)."""
        return list(self._values)

    def get(self, name: str, default: Any = None) -> Any:
        value = self._values.get(name.lower())
        return default if value is None else value

    def bool(self, name: str, default: bool) -> bool:
        value = self.get(name)
        if value is None:
            return default
        text = str(value).strip().lower()
        if text in ("true", "1", "yes"):
            return True
        if text in ("false", "0", "no"):
            return False
        raise ValueError(f"option {name}={value!r}: use true or false")

    def int(self, name: str, default: int) -> int:
        value = self.get(name)
        try:
            return default if value is None else int(value)
        except ValueError:
            raise ValueError(f"option {name}={value!r}: use a whole number") from None
