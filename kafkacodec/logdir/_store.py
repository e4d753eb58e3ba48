"""Where a writer's files go: a local directory (written with fsync, renamed with os.rename) or
a URI through pyarrow.fs (`s3://`, `s3a://` and `s3n://` as `s3://`, `gs://`, `hdfs://`,
`file://`).

Storage options use Hadoop's S3A names, as a Spark user already sets them
(`spark.hadoop.fs.s3a.endpoint` ...): `fs.s3a.endpoint`, `fs.s3a.endpoint.region`,
`fs.s3a.access.key`, `fs.s3a.secret.key`, `fs.s3a.session.token`,
`fs.s3a.connection.ssl.enabled`, `fs.s3a.path.style.access`.  Without them pyarrow's defaults
apply (the AWS_* environment variables, ~/.aws, the instance role).

Renames are atomic on a local file system; on object stores a "move" is a copy and a delete
per object (no store offers more), so a commit there is all-or-nothing through its rollback,
not through the store.

A commit holds the log directory's lock (`Store.lock`): on a local file system an exclusive
flock on `<log dir>/_kafkalog.lock`, so two writers (threads or processes) never rename into
one directory at once, and the second sees what the first committed.  The kernel releases it
when its holder dies; its holder removes the file as it lets go.  Object stores offer no lock:
there the commit's second look narrows the window, no more.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import time
from collections.abc import Iterator, Mapping
from typing import Any, BinaryIO
from urllib.parse import urlsplit

from kafkacodec._atomic import fsync_directory
from kafkacodec.logdir.storage import s3_filesystem_arguments

__all__ = ["Store", "LocalStore", "ArrowStore", "open_store", "is_uri", "LOCK_NAME", "LOCK_TIMEOUT"]

LOCK_NAME = "_kafkalog.lock"             # in the log directory, while a writer commits
LOCK_TIMEOUT = 60.0                      # seconds a commit waits for another writer's


def is_uri(path: str) -> bool:
    """True for `scheme://...` (a Windows drive letter `C:\\` is a path)."""
    scheme = urlsplit(path).scheme
    return len(scheme) > 1 and "://" in path


class Store:
    """The file operations a writer needs, on paths joined with '/'."""

    def join(self, *parts: str) -> str:
        return "/".join(p.rstrip("/") for p in parts if p)

    def exists(self, path: str) -> bool: raise NotImplementedError
    def is_dir(self, path: str) -> bool: raise NotImplementedError
    def listdir(self, path: str) -> list[str]: raise NotImplementedError
    def makedirs(self, path: str) -> None: raise NotImplementedError
    def size(self, path: str) -> int: raise NotImplementedError
    def read_bytes(self, path: str) -> bytes: raise NotImplementedError

    def mapped(self, path: str) -> contextlib.AbstractContextManager[Any]:
        """The file's bytes as a buffer for the duration of the block."""
        return contextlib.nullcontext(self.read_bytes(path))
    def open_write(self, path: str) -> contextlib.AbstractContextManager[BinaryIO]: raise NotImplementedError
    def move(self, src: str, dst: str) -> None: raise NotImplementedError
    def remove_tree(self, path: str) -> None: raise NotImplementedError
    def remove_file(self, path: str) -> None: raise NotImplementedError

    def remove_empty_dir(self, path: str) -> None:
        """Remove the directory if it is empty (and exists); leave it otherwise."""
        raise NotImplementedError

    def sync_dir(self, path: str) -> None:
        """Make renames into `path` durable (local file systems only)."""

    def lock(self, root: str, timeout: float) -> contextlib.AbstractContextManager[None]:
        """The log directory `root` for one committing writer at a time (waits up to `timeout`
        seconds, then TimeoutError).  Object stores have no lock: nothing is held."""
        return contextlib.nullcontext()

    def describe(self, path: str) -> str:
        return path


class LocalStore(Store):
    """A local directory: files fsync'ed on close, directories fsync'ed after renames."""

    def exists(self, path: str) -> bool:
        return os.path.lexists(path)

    def is_dir(self, path: str) -> bool:
        return os.path.isdir(path) and not os.path.islink(path)

    def listdir(self, path: str) -> list[str]:
        return sorted(os.listdir(path)) if os.path.isdir(path) else []

    def makedirs(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)

    def size(self, path: str) -> int:
        return os.path.getsize(path)

    def read_bytes(self, path: str) -> bytes:
        with open(path, "rb") as f:
            return f.read()

    @contextlib.contextmanager
    def mapped(self, path: str) -> Iterator[Any]:
        """A read-only memory map (pages are read as the decoder reaches them)."""
        import mmap

        with open(path, "rb") as f:
            if os.fstat(f.fileno()).st_size == 0:
                yield b""
                return
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
                yield m

    @contextlib.contextmanager
    def open_write(self, path: str) -> Iterator[BinaryIO]:
        with open(path, "xb") as f:               # never replaces a file
            yield f
            f.flush()
            os.fsync(f.fileno())

    def move(self, src: str, dst: str) -> None:
        if os.path.lexists(dst):
            raise FileExistsError(f"{dst} exists; not replacing it")
        os.rename(src, dst)

    def remove_tree(self, path: str) -> None:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        elif os.path.lexists(path):
            os.unlink(path)

    def remove_file(self, path: str) -> None:
        os.unlink(path)

    def remove_empty_dir(self, path: str) -> None:
        try:
            os.rmdir(path)                    # refuses, atomically, a directory another writer filled
        except FileNotFoundError:
            pass
        except OSError as exc:
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR):
                raise

    def sync_dir(self, path: str) -> None:
        fsync_directory(path)

    @contextlib.contextmanager
    def lock(self, root: str, timeout: float) -> Iterator[None]:
        """An exclusive flock on `<root>/_kafkalog.lock` (flock: per open file, so threads of one
        process exclude each other as processes do; the kernel releases it when the process
        dies).  The file is removed while still locked, so a writer that opened it meanwhile
        finds its name gone once it gets the lock, and tries again on a fresh file."""
        path = os.path.join(root, LOCK_NAME)
        fd = _locked(path, timeout)
        try:
            yield
        finally:
            try:
                os.unlink(path)
            finally:
                os.close(fd)                  # releases the lock


def _locked(path: str, timeout: float) -> int:
    """A descriptor of the lock file at `path`, holding its exclusive flock."""
    import fcntl

    deadline = time.monotonic() + timeout
    delay = 0.002
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            if time.monotonic() >= deadline:
                raise TimeoutError(errno.ETIMEDOUT, f"another writer has held {path} for {timeout:g} s "
                                   "(it commits into this log directory); try again when it is done") from None
            time.sleep(delay)                 # flock has no timeout: poll, backing off
            delay = min(2 * delay, 0.05)
            continue
        except BaseException:
            os.close(fd)
            raise
        try:
            held, named = os.fstat(fd), os.stat(path, follow_symlinks=False)
        except FileNotFoundError:             # its holder removed it as it let go
            named = None
        except BaseException:
            os.close(fd)
            raise
        if named is not None and (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino):
            return fd
        os.close(fd)                          # a file no longer named so: lock the current one


class ArrowStore(Store):
    """A pyarrow.fs file system (object stores, HDFS); `prefix` is the URI's scheme part, for
    messages."""

    def __init__(self, fs: Any, prefix: str):
        self.fs = fs
        self.prefix = prefix

    def _info(self, path: str) -> Any:
        return self.fs.get_file_info(path)

    def exists(self, path: str) -> bool:
        from pyarrow.fs import FileType
        return bool(self._info(path).type != FileType.NotFound)

    def is_dir(self, path: str) -> bool:
        from pyarrow.fs import FileType
        return bool(self._info(path).type == FileType.Directory)

    def listdir(self, path: str) -> list[str]:
        from pyarrow.fs import FileSelector
        if not self.is_dir(path):
            return []
        return sorted(i.base_name for i in self.fs.get_file_info(FileSelector(path)))

    def makedirs(self, path: str) -> None:
        self.fs.create_dir(path, recursive=True)

    def size(self, path: str) -> int:
        return int(self._info(path).size)

    def read_bytes(self, path: str) -> bytes:
        with self.fs.open_input_stream(path) as f:
            return bytes(f.read())

    @contextlib.contextmanager
    def open_write(self, path: str) -> Iterator[BinaryIO]:
        if self.exists(path):
            raise FileExistsError(f"{self.describe(path)} exists; not replacing it")
        with self.fs.open_output_stream(path) as f:
            yield f

    def move(self, src: str, dst: str) -> None:
        if self.exists(dst):
            raise FileExistsError(f"{self.describe(dst)} exists; not replacing it")
        if self.is_dir(src):                      # object stores move objects, not folders
            self.makedirs(dst)
            for name in self.listdir(src):
                self.move(self.join(src, name), self.join(dst, name))
            self.fs.delete_dir(src)
        else:
            self.fs.move(src, dst)

    def remove_tree(self, path: str) -> None:
        if self.is_dir(path):
            self.fs.delete_dir(path)
        elif self.exists(path):
            self.fs.delete_file(path)

    def remove_file(self, path: str) -> None:
        self.fs.delete_file(path)

    def remove_empty_dir(self, path: str) -> None:
        if self.is_dir(path) and not self.listdir(path):
            self.fs.delete_dir(path)

    def describe(self, path: str) -> str:
        return f"{self.prefix}{path}"


def open_store(path: str, options: Mapping[str, Any] | None = None) -> tuple[Store, str]:
    """The store holding `path` and the path inside it (absolute for local paths)."""
    if not is_uri(path):
        return LocalStore(), os.path.abspath(path)
    scheme = urlsplit(path).scheme.lower()
    if scheme == "file":
        from urllib.request import url2pathname
        return LocalStore(), os.path.abspath(url2pathname(urlsplit(path).path))
    from pyarrow import fs

    opts = {str(k).lower(): v for k, v in (options or {}).items() if v is not None}
    if scheme in ("s3", "s3a", "s3n"):
        rest = path.split("://", 1)[1]
        kwargs = s3_filesystem_arguments(opts)
        if kwargs:
            return ArrowStore(fs.S3FileSystem(**kwargs), "s3://"), rest.split("?", 1)[0].rstrip("/")
        filesystem, inner = fs.FileSystem.from_uri("s3://" + rest)
        return ArrowStore(filesystem, "s3://"), inner.rstrip("/")
    filesystem, inner = fs.FileSystem.from_uri(path)
    return ArrowStore(filesystem, f"{scheme}://"), inner.rstrip("/")
