"""Where logs live: local paths, `file://` URIs and the file systems of `pyarrow.fs` (`s3://`,
`s3a://` read as `s3://`, `gs://`, `hdfs://`); Hadoop-style globs (`*`, `?`, `[ab]`, `{a,b}`) and
lists of paths; ranged reads.

A `Storage` is picklable: it holds the scheme and options, and builds its pyarrow file system
where it is used (on each executor).  S3 is configured by the environment (AWS_ACCESS_KEY_ID,
AWS_ENDPOINT_URL, ~/.aws, the instance role) or by options with Hadoop's S3A names, as a Spark
user already sets them and as the writer takes them: `fs.s3a.endpoint` (a URL or host:port),
`fs.s3a.endpoint.region`, `fs.s3a.access.key`, `fs.s3a.secret.key`, `fs.s3a.session.token`,
`fs.s3a.connection.ssl.enabled`, `fs.s3a.path.style.access`.

Local entries are typed with `lstat`/`stat` before anything opens them: a FIFO, a socket, a
device, a directory or a dangling link named like a segment is reported, never opened (opening a
FIFO blocks until a writer appears).

Names that are not UTF-8 (a local file system holds bytes; Python hands the ones that do not
decode over surrogate-escaped, PEP 383) are no Kafka topic, partition or segment: `Storage.list`
leaves them out of every listing and hands them to the caller to report (`undecodable`), and
messages show them with `\\xNN` escapes (`printable`), as `ls -b` does.
"""

from __future__ import annotations

import fnmatch
import os
import re
import stat
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlparse

from kafkacodec._paths import printable, undecodable

__all__ = ["Storage", "Entry", "Source", "mapped", "resolve", "S3_OPTIONS", "has_glob", "undecodable", "printable"]

S3_OPTIONS = ("fs.s3a.endpoint", "fs.s3a.endpoint.region", "fs.s3a.access.key", "fs.s3a.secret.key",
              "fs.s3a.session.token", "fs.s3a.connection.ssl.enabled", "fs.s3a.path.style.access")
_S3A_ARGUMENTS = {"fs.s3a.access.key": "access_key", "fs.s3a.secret.key": "secret_key",
                  "fs.s3a.session.token": "session_token", "fs.s3a.endpoint.region": "region"}
SCHEME_ALIASES = {"s3a": "s3", "s3n": "s3", "gcs": "gs"}
REMOTE_SCHEMES = ("s3", "gs", "hdfs", "viewfs")
GLOB_RE = re.compile(r"[*?\[{]")


def has_glob(path: str) -> bool:
    return GLOB_RE.search(path) is not None


@dataclass(frozen=True)
class Entry:
    path: str            # as the storage names it: an OS path, or "bucket/key"
    name: str
    kind: str            # "file", "dir", "missing" or "other"
    size: int = 0
    note: str = ""       # what an unreadable entry is: "a FIFO", "a dangling symbolic link"...


def mapped(path: str) -> Any:
    """A local segment mapped read-only (b"" when empty), guarded against truncation by another
    process (kafkacodec._mapguard): a read past the cut reads zeros instead of killing the
    process with SIGBUS, and close() then raises FileTruncatedError.  Opened without blocking:
    a FIFO or a device raises NotRegularFileError (an OSError) at once."""
    from kafkacodec._mapguard import map_file

    mapping = map_file(path)
    return b"" if mapping is None else mapping


class Source:
    """One file opened for reading: `view(start, end)` returns (buffer, file position of the
    buffer's first byte) holding at least bytes [start, end).  Local files are mapped once (the
    buffer is the whole mapping, valid until close()); remote files are read by range."""

    def __init__(self, storage: Storage, path: str):
        self.path = path
        self._map: Any = None
        self._file: Any = None
        if storage.scheme:
            self._file = storage.fs.open_input_file(path)
            self.size = int(self._file.size())
        else:
            self._map = mapped(path)
            self.size = len(self._map)

    def view(self, start: int, end: int) -> tuple[Any, int]:
        end = min(end, self.size)
        if self._map is not None:
            return self._map, 0
        return self._file.read_at(max(0, end - start), start), start

    def check(self, end: int, position: int | None = None, offset: int | None = None,
              cause: BaseException | None = None) -> None:
        """FileTruncatedError (chained to `cause`) when another process cut the mapped file
        before byte `end` of what was read (kafkacodec._mapguard.check_read: the bytes past the
        cut read as zeros).  Remote files are read by range into owned buffers: not checked."""
        if self._map is not None:
            from kafkacodec._mapguard import check_read

            check_read(self._map, end, position, offset, cause)

    def close(self) -> None:
        if self._map is not None and hasattr(self._map, "close"):
            self._map.close()
        if self._file is not None:
            self._file.close()

    def __enter__(self) -> Source:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass
class Storage:
    """The local file system (scheme "") or a pyarrow.fs file system."""
    scheme: str = ""
    root: str = ""                                   # "s3://bucket", "hdfs://namenode:8020"
    options: dict[str, str] = field(default_factory=dict)
    _fs: Any = field(default=None, repr=False, compare=False)

    def __getstate__(self) -> dict[str, Any]:
        return {"scheme": self.scheme, "root": self.root, "options": self.options, "_fs": None}

    @property
    def fs(self) -> Any:
        if self._fs is None:
            self._fs = _filesystem(self.scheme, self.root, self.options)
        return self._fs

    def uri(self, path: str) -> str:
        """The path as a user would write it (for messages: printable)."""
        return f"{self.scheme}://{path}" if self.scheme else printable(path)

    def join(self, directory: str, name: str) -> str:
        return f"{directory.rstrip('/')}/{name}" if self.scheme else os.path.join(directory, name)

    def parent(self, path: str) -> str:
        return path.rstrip("/").rsplit("/", 1)[0] if self.scheme else os.path.dirname(path.rstrip(os.sep))

    def info(self, path: str) -> Entry:
        name = os.path.basename(path.rstrip("/"))
        if self.scheme:
            from pyarrow import fs as pafs

            info = self.fs.get_file_info(path)
            kind = {pafs.FileType.File: "file", pafs.FileType.Directory: "dir",
                    pafs.FileType.NotFound: "missing"}.get(info.type, "other")
            return Entry(path, name, kind, int(info.size or 0) if kind == "file" else 0)
        return _local_entry(path, name)

    def list(self, directory: str, skipped: list[str] | None = None) -> list[Entry]:
        """The entries of a directory, sorted by name; those whose name is not UTF-8 are left
        out, their paths added to `skipped` (for the caller to report)."""
        if self.scheme:
            from pyarrow import fs as pafs

            infos = self.fs.get_file_info(pafs.FileSelector(directory, recursive=False))
            entries = []
            for info in infos:
                kind = {pafs.FileType.File: "file", pafs.FileType.Directory: "dir"}.get(info.type, "other")
                entries.append(Entry(info.path, info.base_name, kind, int(info.size or 0) if kind == "file" else 0))
            return sorted(entries, key=lambda e: e.name)
        with os.scandir(directory) as it:
            names = sorted(e.name for e in it)
        if skipped is not None:
            skipped += [os.path.join(directory, n) for n in names if undecodable(n)]
        return [_local_entry(os.path.join(directory, n), n) for n in names if not undecodable(n)]

    def read_bytes(self, path: str, limit: int = 64 << 20) -> bytes:
        """A small regular file whole (index and checkpoint files); ValueError past `limit`."""
        if self.scheme:
            with self.fs.open_input_file(path) as f:
                if f.size() > limit:
                    raise ValueError(f"{self.uri(path)}: {f.size()} bytes, more than {limit}")
                return bytes(f.read())
        entry = _local_entry(path, os.path.basename(path))
        if entry.kind != "file":
            raise ValueError(f"{path}: {entry.note or 'not a regular file'}")
        if entry.size > limit:
            raise ValueError(f"{path}: {entry.size} bytes, more than {limit}")
        with open(path, "rb") as f:
            return f.read(limit + 1)

    def open(self, path: str) -> Source:
        return Source(self, path)


def _local_entry(path: str, name: str) -> Entry:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return Entry(path, name, "missing")
    except OSError as exc:
        return Entry(path, name, "other", note=f"not readable ({exc.strerror})")
    if stat.S_ISLNK(st.st_mode):
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return Entry(path, name, "other", note="a dangling symbolic link")
        except OSError as exc:
            return Entry(path, name, "other", note=f"a symbolic link that cannot be followed ({exc.strerror})")
    if stat.S_ISREG(st.st_mode):
        if not os.access(path, os.R_OK):
            return Entry(path, name, "other", st.st_size, note="not readable (permission denied)")
        return Entry(path, name, "file", st.st_size)
    if stat.S_ISDIR(st.st_mode):
        return Entry(path, name, "dir")
    kind = ("a FIFO" if stat.S_ISFIFO(st.st_mode) else "a socket" if stat.S_ISSOCK(st.st_mode)
            else "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else "not a regular file")
    return Entry(path, name, "other", note=kind)


def s3_filesystem_arguments(options: Mapping[str, Any]) -> dict[str, Any]:
    """pyarrow.fs.S3FileSystem's arguments for Hadoop's fs.s3a.* options (None = not set)."""
    kwargs: dict[str, Any] = {arg: str(options[name]) for name, arg in _S3A_ARGUMENTS.items()
                              if options.get(name) is not None}
    endpoint = options.get("fs.s3a.endpoint")
    if endpoint:
        parsed = urlparse(endpoint if "://" in endpoint else f"//{endpoint}")
        kwargs["endpoint_override"] = parsed.netloc
        ssl = options.get("fs.s3a.connection.ssl.enabled")
        if ssl is None:                 # not set: the endpoint's scheme says, https without one
            ssl = parsed.scheme != "http"
        kwargs["scheme"] = "https" if str(ssl).lower() == "true" else "http"
    if options.get("fs.s3a.path.style.access") is not None:
        kwargs["force_virtual_addressing"] = str(options["fs.s3a.path.style.access"]).lower() != "true"
    return kwargs


def _filesystem(scheme: str, root: str, options: Mapping[str, str]) -> Any:
    from pyarrow import fs as pafs

    if scheme == "s3" and any(options.get(k) is not None for k in S3_OPTIONS):
        return pafs.S3FileSystem(**s3_filesystem_arguments(options))
    filesystem, _ = pafs.FileSystem.from_uri(root)
    return filesystem


def _split_uri(spec: str) -> tuple[str, str, str]:
    """(scheme, root, path) with s3a/s3n read as s3; local paths and file:// URIs get ("", "", path)."""
    if "://" not in spec:
        return "", "", spec
    parsed = urlparse(spec)
    scheme = SCHEME_ALIASES.get(parsed.scheme.lower(), parsed.scheme.lower())
    if scheme == "file":
        if parsed.netloc not in ("", "localhost"):
            raise ValueError(f"{spec}: a file:// URI names a local path (file:///path), not host {parsed.netloc!r}")
        return "", "", unquote(parsed.path)
    if scheme not in REMOTE_SCHEMES:
        raise ValueError(f"{spec}: unsupported scheme {parsed.scheme!r}; use a local path, file://, "
                         "s3:// (or s3a://), gs:// or hdfs://")
    if scheme in ("s3", "gs"):
        return scheme, f"{scheme}://{parsed.netloc}", f"{parsed.netloc}{unquote(parsed.path)}".rstrip("/")
    return scheme, f"{scheme}://{parsed.netloc}", unquote(parsed.path).rstrip("/") or "/"


def _braces(pattern: str) -> list[str]:
    """Hadoop glob alternatives: a{b,c}d -> abd, acd (nested braces included)."""
    depth, start = 0, -1
    for i, ch in enumerate(pattern):
        if ch == "{":
            if depth == 0:
                start = i
            depth += 1
        elif ch == "}" and depth:
            depth -= 1
            if depth == 0:
                inner, parts, level, last = pattern[start + 1:i], [], 0, 0
                for j, c in enumerate(inner):
                    level += c == "{"
                    level -= c == "}"
                    if c == "," and level == 0:
                        parts.append(inner[last:j])
                        last = j + 1
                parts.append(inner[last:])
                return [x for p in parts for x in _braces(pattern[:start] + p + pattern[i + 1:])]
    return [pattern]


def _glob(storage: Storage, pattern: str, skipped: list[str] | None = None) -> Iterator[str]:
    sep = "/" if storage.scheme else os.sep
    absolute = pattern.startswith(sep)
    parts = [p for p in pattern.split(sep) if p]
    fixed = [p for p in (parts[:next((i for i, p in enumerate(parts) if has_glob(p)), len(parts))])]
    base = (sep if absolute else "") + sep.join(fixed)
    if not base:
        base = "."
    current = [base]
    for part in parts[len(fixed):]:
        following = []
        for directory in current:
            if not has_glob(part):
                following.append(storage.join(directory, part))
                continue
            try:
                entries = storage.list(directory, skipped)
            except (FileNotFoundError, NotADirectoryError):
                continue
            following += [e.path for e in entries if fnmatch.fnmatchcase(e.name, part)]
        current = following
    yield from current


def resolve(specs: list[str], options: Mapping[str, str] | None = None,
            skipped: list[str] | None = None) -> list[tuple[Storage, str]]:
    """Each path or URI (globs expanded, in order) as (storage, path); FileNotFoundError for a
    glob that matches nothing (as Spark's file sources do).  Names a glob passes over because
    they are not UTF-8 go to `skipped`."""
    options = {k.lower(): str(v) for k, v in (options or {}).items() if k.lower().startswith("fs.")}
    stores: dict[tuple[str, str], Storage] = {}
    out: list[tuple[Storage, str]] = []
    for spec in specs:
        scheme, root, path = _split_uri(str(spec))
        if not scheme:
            path = os.path.abspath(path)       # executors may run elsewhere (another directory)
        storage = stores.setdefault((scheme, root), Storage(scheme, root, options if scheme else {}))
        if not has_glob(path):
            out.append((storage, path))
            continue
        matched = sorted({m for alternative in _braces(path) for m in _glob(storage, alternative, skipped)})
        if not matched:
            raise FileNotFoundError(f"{spec}: the pattern matches no file or directory")
        out += [(storage, m) for m in matched]
    return out
