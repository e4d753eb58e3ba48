"""`Secret`: a password, key password or bearer token that never shows itself.

Every secret the security settings hold (``ssl.key.password``, ``sasl.password``, a token) is
kept in a Secret: its repr(), str() and format() print ``Secret('******')``, so a settings
object, a log line or an exception message that includes one does not leak it.  `reveal()` is
the one way to the value, called only where the value is used (the SASL exchange, the key
decryption).  A Secret is not pickled: a secret written into a cache or shipped to another
process by accident is refused, not stored.
"""

from __future__ import annotations

import hmac
from typing import NoReturn

__all__ = ["Secret"]


class Secret:
    """A secret string: compared in constant time, never printed."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        if not isinstance(value, str):
            raise TypeError(f"a Secret holds a str, not {type(value).__name__}")
        self._value = value

    def reveal(self) -> str:
        """The secret itself, for the code that uses it (never for messages)."""
        return self._value

    def __repr__(self) -> str:
        return "Secret('******')"

    __str__ = __repr__

    def __format__(self, spec: str) -> str:
        return repr(self)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Secret):
            return NotImplemented
        return hmac.compare_digest(self._value.encode("utf-8", "surrogatepass"),
                                   other._value.encode("utf-8", "surrogatepass"))

    def __hash__(self) -> int:
        return hash(Secret)           # equal secrets hash alike; the hash tells nothing

    def __reduce__(self) -> NoReturn:
        raise TypeError("a Secret is not pickled: pass the settings to the process that uses them")

    def __copy__(self) -> Secret:
        return self

    def __deepcopy__(self, memo: object) -> Secret:
        return self
