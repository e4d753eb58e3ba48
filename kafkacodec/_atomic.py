"""Writing files without losing data: a temporary file beside the target, fsync, rename.

Every command and writer that produces a file goes through `atomic_output` (a directory:
`atomic_directory`): the target either
keeps its old content or gets the complete new content, never a half-written file; a failure
removes only the temporary file the call created; and an output that is the input (same path,
a symlink or a hard link to it) is refused before anything is opened for writing.  A target
that is a symlink is written through (the file it names is replaced, the link stays).
"""

from __future__ import annotations

import contextlib
import os
import stat
import secrets
from collections.abc import Callable, Iterable, Iterator
from typing import BinaryIO, Union

__all__ = ["atomic_output", "atomic_directory", "same_file", "fsync_directory", "SameFileError"]

PathLike = Union[str, "os.PathLike[str]"]


class SameFileError(ValueError):
    """The output names one of the inputs (the same path, a symlink or a hard link)."""


def same_file(a: PathLike, b: PathLike) -> bool:
    """True when both paths exist and are the same file (device and inode)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def fsync_directory(path: PathLike) -> None:
    """Make a rename or a new file in `path` durable (a no-op where directories cannot be
    opened, as on Windows)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _create_beside(directory: str, name: str, mode: int | None = None) -> tuple[int, str]:
    """A new, exclusively created file `.NAME.<random>.tmp` in `directory`, mode 0666 less the
    umask (as open() would give the target itself), or exactly `mode` when given."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    while True:
        tmp = os.path.join(directory, f".{name}.{secrets.token_hex(4)}.tmp")
        try:
            fd = os.open(tmp, flags, 0o600 if mode is not None else 0o666)
            if mode is not None and hasattr(os, "fchmod"):
                try:
                    os.fchmod(fd, mode)      # exactly `mode`, whatever the umask
                except BaseException:
                    os.close(fd)
                    os.unlink(tmp)
                    raise
            return fd, tmp
        except FileExistsError:
            continue
        except OSError as exc:          # no such directory, no permission: name the directory
            exc.filename = directory
            raise


def _link_new(tmp: str, target: str) -> None:
    """Put `tmp` at `target` only if nothing is there (FileExistsError otherwise), then drop
    the temporary name.  Where hard links are unsupported, a last check and a rename."""
    try:
        os.link(tmp, target)
    except OSError as exc:
        if isinstance(exc, FileExistsError) or os.path.lexists(target):
            raise FileExistsError(f"{target} appeared while it was written; not replacing it") from None
        os.replace(tmp, target)
        return
    os.unlink(tmp)


@contextlib.contextmanager
def atomic_output(target: PathLike, *, inputs: Iterable[PathLike] = (),
                  overwrite: bool = True, mode: int | None = None) -> Iterator[BinaryIO]:
    """Open a temporary file beside `target` for binary writing; on a clean exit flush, fsync
    and rename it over `target` (then fsync the directory).  On an exception the temporary
    file is removed and `target` is left as it was.

    Refuses (SameFileError) a target that is one of `inputs`, and (FileExistsError) an existing
    target when `overwrite` is False, also one created by someone else while the temporary
    file was written (the new file is then linked, not renamed, into place).  A target that
    exists but is not a regular file (a directory, a device, a FIFO) is refused with
    IsADirectoryError / FileExistsError rather than replaced.  A symlink is followed: the
    temporary file goes beside the file it names, which is replaced; the link is kept."""
    given = os.fspath(target)
    target = os.path.realpath(given) if os.path.islink(given) else given
    for source in inputs:
        if same_file(source, target):
            raise SameFileError(f"{given}: the output is the input {os.fspath(source)}; "
                                "write to another file")
    try:
        st = os.stat(target)
    except FileNotFoundError:
        st = None
    if st is not None:
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(f"{target} is a directory; give a file name")
        if not stat.S_ISREG(st.st_mode):
            raise FileExistsError(f"{target} exists and is not a regular file; not replacing it")
        if not overwrite:
            raise FileExistsError(f"{target} exists; choose another name or allow overwriting")
    directory = os.path.dirname(os.path.abspath(target))
    fd, tmp = _create_beside(directory, os.path.basename(target), mode)
    written = False
    try:
        with os.fdopen(fd, "wb") as out:
            yield out
            written = True
            out.flush()
            os.fsync(out.fileno())
        if st is not None and mode is None:
            with contextlib.suppress(OSError):
                os.chmod(tmp, stat.S_IMODE(st.st_mode))     # keep the replaced file's mode
        if overwrite:
            os.replace(tmp, target)
        else:
            _link_new(tmp, target)
    except BaseException as exc:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if written and isinstance(exc, OSError) and exc.filename is None:
            exc.filename = given          # a failed flush or fsync (ENOSPC...): name the output
        raise
    fsync_directory(directory)


def _new_dir_beside(directory: str, name: str) -> str:
    while True:
        tmp = os.path.join(directory, f".{name}.{secrets.token_hex(4)}.tmp")
        try:
            os.mkdir(tmp)
            return tmp
        except FileExistsError:
            continue


@contextlib.contextmanager
def atomic_directory(target: PathLike, *, inputs: Iterable[PathLike] = (), overwrite: bool = False,
                     replaceable: Callable[[str], bool] = lambda name: False) -> Iterator[str]:
    """A new temporary directory `.NAME.<random>.tmp` beside `target` for a writer to fill; on a
    clean exit it becomes `target`: renamed to it when `target` does not exist, else its entries
    are moved into `target` (an existing directory keeps its owner and mode) and (only with
    `overwrite`) replace the entries of `target` for which
    `replaceable(name)` is true (what an earlier run of the same writer left), which are moved
    aside first and removed only after every new entry is in place.  Other entries of `target`
    (files the writer did not create) are never touched; a new entry whose name one of them
    holds is refused.  On an exception, or a failed replacement, the temporary directory is
    removed and `target` is left as it was.

    Refuses (SameFileError) a target that is one of `inputs` or inside one of them, and
    (FileExistsError) a non-empty target without `overwrite`."""
    target = os.path.abspath(os.fspath(target))
    for source in inputs:
        src = os.path.abspath(os.fspath(source))
        if same_file(source, target) or target.startswith(src.rstrip(os.sep) + os.sep):
            raise SameFileError(f"{target}: the output is (inside) the input {src}; write elsewhere")
    if os.path.lexists(target) and not os.path.isdir(target):
        raise FileExistsError(f"{target} exists and is not a directory")
    existing = sorted(os.listdir(target)) if os.path.isdir(target) else []
    if existing and not overwrite:
        raise FileExistsError(f"{target} is not empty ({len(existing)} entries); choose another "
                              "output or allow overwriting")
    parent = os.path.dirname(target)
    os.makedirs(parent, exist_ok=True)
    tmp = _new_dir_beside(parent, os.path.basename(target))
    try:
        yield tmp
        _install_directory(tmp, target, replaceable)
    except BaseException:
        import shutil
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _install_directory(tmp: str, target: str, replaceable: Callable[[str], bool]) -> None:
    import shutil

    if not os.path.isdir(target):
        os.rename(tmp, target)
        fsync_directory(os.path.dirname(target))
        return
    current = set(os.listdir(target))
    new = sorted(os.listdir(tmp))
    kept = sorted(n for n in current if not replaceable(n))
    clash = sorted(set(new) & set(kept))
    if clash:
        raise FileExistsError(f"{target}: {', '.join(clash)} exist and were not written by this "
                              "command; not replacing them")
    aside = _new_dir_beside(os.path.dirname(target), os.path.basename(target) + ".replaced")
    moved: list[tuple[str, str]] = []          # (from, to), undone in reverse on failure
    try:
        for name in sorted(current - set(kept)):
            os.rename(os.path.join(target, name), os.path.join(aside, name))
            moved.append((os.path.join(target, name), os.path.join(aside, name)))
        for name in new:
            os.rename(os.path.join(tmp, name), os.path.join(target, name))
            moved.append((os.path.join(tmp, name), os.path.join(target, name)))
    except BaseException:
        for src, dst in reversed(moved):
            with contextlib.suppress(OSError):
                os.rename(dst, src)
        os.rmdir(aside)
        raise
    fsync_directory(target)
    shutil.rmtree(aside, ignore_errors=True)
    os.rmdir(tmp)
