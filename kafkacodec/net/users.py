"""The credentials file of ``kafkacodec serve`` (``kafkacodec.users.file``): salted hashes only,
never a password.  ``kafkacodec users add|remove|list`` edits it.

Format (text, UTF-8, one entry a line; ``#`` starts a comment line; blank lines ignored)::

    kafkacodec-users 1
    # NAME MECHANISM FIELDS...
    alice SCRAM-SHA-256 iterations=4096 salt=<base64> stored_key=<base64> server_key=<base64>
    alice SCRAM-SHA-512 iterations=4096 salt=<base64> stored_key=<base64> server_key=<base64>
    bob PLAIN algorithm=PBKDF2-HMAC-SHA512 iterations=4096 salt=<base64> hash=<base64>

- The first line names the format and its version.
- NAME is the user name (the principal is ``User:NAME``), with ``%``, ``#``, blanks, control
  and non-ASCII characters percent-encoded as UTF-8 (``%20``); a user has at most one entry per
  mechanism.
- SCRAM entries hold what Kafka's ScramCredential holds (RFC 5802: the salt, the iteration
  count, StoredKey, ServerKey); iterations 4096 (Kafka's minimum, and its tools' default) to
  16384 (the most a Kafka broker stores).  The server runs SCRAM from them without the password.
- PLAIN entries hold PBKDF2-HMAC-SHA-512 of the password with a random 32-byte salt: PBKDF2
  because it is what SCRAM's SaltedPassword already is (one primitive, in Python's hashlib
  through OpenSSL, FIPS-approved, no new dependency), SHA-512 as SCRAM-SHA-512; the default
  count 4096 matches the SCRAM entries beside it (a file is as strong as its weakest entry) and
  costs the server about 4 ms of CPU per PLAIN authentication; up to 1,000,000 may be asked
  (``--iterations``), each PLAIN login then costing that much more.
- Salts and keys are standard base64.

The file is written through `kafkacodec._atomic.atomic_output` (complete or as it was) with
mode 0600, under an advisory lock on its directory (two ``users add`` at once do not lose an
entry; a writer waits for it at most `LOCK_TIMEOUT_S`).  Reading names the file and line of any problem.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import logging
import os
import re
import stat
import time
import urllib.parse
from collections.abc import Iterator
from typing import Union

from kafkacodec._atomic import atomic_output
from kafkacodec.net._secret import Secret
from kafkacodec.net._text import read_utf8
from kafkacodec.net.sasl import (PLAIN_ALGORITHM, SCRAM_MAX_ITERATIONS, SCRAM_MECHANISMS, SCRAM_MIN_ITERATIONS,
                                 PlainCredential, ScramCredential)

__all__ = ["UsersFile", "USERS_MECHANISMS", "add_user", "remove_user"]

log = logging.getLogger(__name__)

HEADER = "kafkacodec-users 1"
USERS_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN")
Credential = Union[ScramCredential, PlainCredential]
PathLike = Union[str, "os.PathLike[str]"]

_PLAIN_NAME = re.compile(r"[\x21-\x7e]")


def _encode_name(name: str) -> str:
    return "".join(c if _PLAIN_NAME.fullmatch(c) and c not in "%#" else urllib.parse.quote(c, safe="")
                   for c in name)


def _check_name(name: str) -> None:
    if not name:
        raise ValueError("a user name cannot be empty")
    if any(ord(c) < 0x20 or ord(c) == 0x7f for c in name):
        raise ValueError("a user name cannot hold control characters")


class UsersFile:
    """The entries of a credentials file: name -> mechanism -> credential.  A
    `kafkacodec.net.sasl.CredentialStore` for the SASL servers."""

    def __init__(self, entries: dict[str, dict[str, Credential]] | None = None) -> None:
        self._entries: dict[str, dict[str, Credential]] = entries or {}

    # the CredentialStore interface
    def scram_credential(self, name: str, mechanism: str) -> ScramCredential | None:
        credential = self._entries.get(name, {}).get(mechanism)
        return credential if isinstance(credential, ScramCredential) else None

    def plain_credential(self, name: str) -> PlainCredential | None:
        credential = self._entries.get(name, {}).get("PLAIN")
        return credential if isinstance(credential, PlainCredential) else None

    def names(self) -> list[str]:
        return sorted(self._entries)

    def mechanisms(self, name: str) -> tuple[str, ...]:
        return tuple(m for m in USERS_MECHANISMS if m in self._entries.get(name, {}))

    def set_password(self, name: str, mechanism: str, password: Secret | str, *,
                     iterations: int = SCRAM_MIN_ITERATIONS) -> None:
        """Add or replace `name`'s entry for `mechanism`, hashed from `password`."""
        _check_name(name)
        if mechanism not in USERS_MECHANISMS:
            raise ValueError(f"mechanism {mechanism!r} is not one of {', '.join(USERS_MECHANISMS)}")
        credential: Credential
        if mechanism == "PLAIN":
            credential = PlainCredential.from_password(password, iterations=iterations)
        else:
            credential = ScramCredential.from_password(mechanism, password, iterations=iterations)
        self._entries.setdefault(name, {})[mechanism] = credential

    def remove(self, name: str, mechanism: str | None = None) -> list[str]:
        """Remove `name` (or only its `mechanism` entry); the mechanisms removed."""
        held = self._entries.get(name, {})
        removed = [m for m in self.mechanisms(name) if mechanism in (None, m)]
        for m in removed:
            del held[m]
        if not held:
            self._entries.pop(name, None)
        return removed

    def dumps(self) -> str:
        lines = [HEADER]
        for name in self.names():
            for mechanism in self.mechanisms(name):
                lines.append(f"{_encode_name(name)} {mechanism} {_fields(self._entries[name][mechanism])}")
        return "\n".join(lines) + "\n"

    def save(self, path: PathLike) -> None:
        """Write the file atomically, mode 0600."""
        data = self.dumps().encode("utf-8")
        with atomic_output(path, mode=0o600) as out:
            out.write(data)

    @classmethod
    def load(cls, path: PathLike) -> UsersFile:
        """Read a credentials file (errors name the file and line).  A file others can read is
        loaded with a warning: its hashes let them guess passwords offline."""
        text, mode = read_utf8(path)
        if stat.S_IMODE(mode) & 0o077:
            log.warning("%s: the credentials file is readable by others (mode %o); chmod 600 it",
                        os.fspath(path), stat.S_IMODE(mode))
        return cls.parse(text, source=os.fspath(path))

    @classmethod
    def parse(cls, text: str, *, source: str = "<users>") -> UsersFile:
        entries: dict[str, dict[str, Credential]] = {}
        where_defined: dict[tuple[str, str], int] = {}
        header_seen = False
        for number, line in enumerate(text.splitlines(), 1):
            content = line.strip()
            if not content or content.startswith("#"):
                continue
            where = f"{source}:{number}"
            if not header_seen:
                if content != HEADER:
                    raise ValueError(f"{where}: not a kafkacodec users file (the first line must be "
                                     f"{HEADER!r}; `kafkacodec users add` writes one)")
                header_seen = True
                continue
            name, mechanism, credential = _parse_entry(content, where)
            if (name, mechanism) in where_defined:
                raise ValueError(f"{where}: {name!r} has a second {mechanism} entry (the first is on line "
                                 f"{where_defined[(name, mechanism)]})")
            where_defined[(name, mechanism)] = number
            entries.setdefault(name, {})[mechanism] = credential
        if not header_seen:
            raise ValueError(f"{source}: empty; not a kafkacodec users file (`kafkacodec users add` writes one)")
        return cls(entries)

    def __repr__(self) -> str:
        return f"UsersFile({len(self._entries)} users)"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _fields(credential: Credential) -> str:
    if isinstance(credential, ScramCredential):
        return (f"iterations={credential.iterations} salt={_b64(credential.salt)} "
                f"stored_key={_b64(credential.stored_key)} server_key={_b64(credential.server_key)}")
    return (f"algorithm={credential.algorithm} iterations={credential.iterations} salt={_b64(credential.salt)} "
            f"hash={_b64(credential.hash)}")


_SCRAM_FIELDS = ("iterations", "salt", "stored_key", "server_key")
_PLAIN_FIELDS = ("algorithm", "iterations", "salt", "hash")


def _parse_entry(content: str, where: str) -> tuple[str, str, Credential]:
    parts = content.split()
    if len(parts) < 2:
        raise ValueError(f"{where}: expected NAME MECHANISM FIELDS...")
    encoded, mechanism, *rest = parts
    try:
        name = urllib.parse.unquote(encoded, errors="strict")
    except UnicodeDecodeError:
        raise ValueError(f"{where}: the name's %-escapes are not UTF-8") from None
    try:
        _check_name(name)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None
    if mechanism not in USERS_MECHANISMS:
        raise ValueError(f"{where}: mechanism {mechanism!r} is not one of {', '.join(USERS_MECHANISMS)}")
    expected = _PLAIN_FIELDS if mechanism == "PLAIN" else _SCRAM_FIELDS
    fields: dict[str, str] = {}
    for item in rest:
        key, sep, value = item.partition("=")
        if not sep or key not in expected:
            raise ValueError(f"{where}: unexpected field {key!r} for {mechanism} (fields: {', '.join(expected)})")
        if key in fields:
            raise ValueError(f"{where}: the field {key} is given twice")
        fields[key] = value
    missing = [k for k in expected if k not in fields]
    if missing:
        raise ValueError(f"{where}: {mechanism} entry without {', '.join(missing)}")
    if not fields["iterations"].isdigit():
        raise ValueError(f"{where}: iterations is not a whole number")
    iterations = int(fields["iterations"])
    binary = {}
    for key in expected:
        if key in ("iterations", "algorithm"):
            continue
        try:
            binary[key] = base64.b64decode(fields[key], validate=True)
        except (binascii.Error, ValueError):
            raise ValueError(f"{where}: {key} is not base64") from None
        if not binary[key]:
            raise ValueError(f"{where}: {key} is empty")
    if mechanism == "PLAIN":
        if fields["algorithm"] != PLAIN_ALGORITHM:
            raise ValueError(f"{where}: algorithm {fields['algorithm']!r} is not {PLAIN_ALGORITHM}")
        if not SCRAM_MIN_ITERATIONS <= iterations <= 1_000_000:
            raise ValueError(f"{where}: iterations {iterations} is not {SCRAM_MIN_ITERATIONS}..1000000")
        if len(binary["hash"]) != 64:
            raise ValueError(f"{where}: hash has {len(binary['hash'])} bytes, not 64 (SHA-512)")
        return name, mechanism, PlainCredential(binary["salt"], iterations, binary["hash"])
    if not SCRAM_MIN_ITERATIONS <= iterations <= SCRAM_MAX_ITERATIONS:
        raise ValueError(f"{where}: iterations {iterations} is not {SCRAM_MIN_ITERATIONS}..{SCRAM_MAX_ITERATIONS} "
                         "(Kafka's bounds)")
    size = 32 if SCRAM_MECHANISMS[mechanism] == "sha256" else 64
    for key in ("stored_key", "server_key"):
        if len(binary[key]) != size:
            raise ValueError(f"{where}: {key} has {len(binary[key])} bytes, not {size} ({mechanism})")
    return name, mechanism, ScramCredential(mechanism, binary["salt"], iterations, binary["stored_key"],
                                            binary["server_key"])


LOCK_TIMEOUT_S = 10.0


@contextlib.contextmanager
def _locked(path: PathLike, timeout: float = LOCK_TIMEOUT_S) -> Iterator[None]:
    """An exclusive advisory lock on the file's directory while it is read and rewritten (the
    file itself is replaced by a rename, so its own lock would not hold), waited for at most
    `timeout` seconds (TimeoutError); none where fcntl is missing (Windows)."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    directory = os.path.dirname(os.path.abspath(path))
    fd = os.open(directory, os.O_RDONLY)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise TimeoutError(f"{os.fspath(path)}: another process has been changing the users "
                                       f"file for {timeout:g} s; try again") from None
                time.sleep(0.02)
        yield
    finally:
        os.close(fd)                   # closing releases the lock


def add_user(path: PathLike, name: str, mechanisms: tuple[str, ...] | list[str], password: Secret | str, *,
             iterations: int = SCRAM_MIN_ITERATIONS) -> UsersFile:
    """Set `name`'s password for each of `mechanisms` in the file at `path` (created if missing)."""
    if isinstance(password, str):
        password = Secret(password)
    if not password.reveal():
        raise ValueError("the password is empty")
    with _locked(path):
        users = UsersFile.load(path) if os.path.exists(path) else UsersFile()
        for mechanism in dict.fromkeys(mechanisms):
            users.set_password(name, mechanism, password, iterations=iterations)
        users.save(path)
    return users


def remove_user(path: PathLike, name: str, mechanism: str | None = None) -> list[str]:
    """Remove `name` (or its `mechanism` entry) from the file; the mechanisms removed (none:
    the file is left as it was)."""
    with _locked(path):
        users = UsersFile.load(path)
        removed = users.remove(name, mechanism)
        if removed:
            users.save(path)
    return removed
