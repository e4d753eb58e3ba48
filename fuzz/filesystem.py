"""File-system harness: segments that change or are not what they seem while they are read.

- `truncate`: a segment (the input record set, sometimes several pages of it) truncated at a
  random size while an operation reads it: before the operation (after FileRecords mapped
  it), from another thread after a random delay, or from a callback of the operation itself.
  Operations: FileRecords records/batches/validate/index/valid_bytes/slice, down_convert,
  LazyDownConvertRecords (over the FileRecords and over an open file), ArrowDecoder over the
  mapping, logdir plan/read_split/describe, `kafkacodec verify/dump/convert`. The operation
  gives what it gives on the intact file, or what it gives on the truncated one (it opened
  the file after the cut), or ends with FileTruncatedError after a prefix of its results (the
  CLI: exit 1 naming the truncation); never SIGBUS, never another error, never other data.
- `special`: the segment is a FIFO, a directory, a dangling symlink, a file without read
  permission (the DAC capabilities dropped when run as root), a sparse file of several GiB
  whose first entry claims 2 GiB, or a file renamed over the path while it is open: every
  operation gives a clear error (an OSError: NotRegularFileError, IsADirectoryError,
  FileNotFoundError, PermissionError; or a KafkaCodecError) or reads what it opened; the CLI
  exits 1 or 3 with one `kafkacodec: error:` line; never a hang (the engine's timeout), never
  memory in proportion to a size field (the engine's memory limit), never a traceback.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import io
import os
import random
import shutil
import stat
import struct
import sys
import tempfile
import threading
import time
from typing import Any, Callable

from _harness import Target, api, arrow_rows, entry_spans, hostile, rng_of
from kafkacodec.errors import FileTruncatedError, KafkaCodecError

SEGMENT = "00000000000000000000.log"
_ROOT = tempfile.mkdtemp(prefix="kc-fuzz-fs-")


def _fresh_dir() -> str:
    path = os.path.join(_ROOT, "log")
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(os.path.join(path, "topic-0"))
    return path


# --- operations: each returns a comparable summary; an error propagates ---------------------

def _fr(path: str) -> Any:
    return api("kafkacodec.FileRecords").open(path)


class Partial(Exception):
    """An operation that ended with an error after some results: (results so far, error)."""

    def __init__(self, done: list[Any], error: BaseException):
        super().__init__(repr(error))
        self.done = done
        self.error = error


def _collect(items: Any, summary: Callable[[Any], Any], hook: Callable[[int], None]) -> list:
    done: list[Any] = []
    try:
        for i, item in enumerate(items):
            hook(i)
            done.append(summary(item))
    except KafkaCodecError as exc:
        raise Partial(done, exc) from exc
    return done


def op_records(path: str, hook: Callable[[int], None], opened: Any) -> Any:
    return _collect(opened.records(), lambda r: (r.offset, r.key, r.value, r.headers), hook)


def op_batches(path: str, hook: Callable[[int], None], opened: Any) -> Any:
    # As docs/reading.md tells holders of views into a mapped file: read `raw`, then trust it
    # only if is_valid() says so afterwards (a view read after a cut shows zeros, and only the
    # checks that follow the read can tell; is_valid() then raises FileTruncatedError).
    def summary(batch: Any) -> tuple:
        digest = hashlib.sha1(batch.raw).digest()
        return batch.position, batch.base_offset, digest, batch.is_valid()

    return _collect(opened.batches(), summary, hook)


def op_validate(path: str, hook: Callable[[int], None], opened: Any) -> Any:
    hook(0)
    return opened.validate(), opened.valid_bytes, opened.index().tolist()


def op_slice(path: str, hook: Callable[[int], None], opened: Any) -> Any:
    size = opened.size_in_bytes
    part = opened.slice(size // 3, size)
    return _collect(part.records(), lambda r: (r.offset, r.value), hook)


def op_down_convert(path: str, hook: Callable[[int], None], opened: Any) -> Any:
    hook(0)
    out = api("kafkacodec.down_convert")(opened, 1)
    return bytes(out.records.buffer)


def op_lazy(path: str, hook: Callable[[int], None], opened: Any) -> Any:
    Lazy = api("kafkacodec.LazyDownConvertRecords")
    sink = io.BytesIO()
    lazy = Lazy(opened, 0, chunk_size=200)
    i = 0
    while lazy.write_to(sink):
        hook(i)
        i += 1
    return sink.getvalue()


def op_lazy_file(path: str, hook: Callable[[int], None], opened: Any) -> Any:
    Lazy = api("kafkacodec.LazyDownConvertRecords")
    sink = io.BytesIO()
    # O_NONBLOCK: a FIFO named like a segment must not block the open itself (as map_file)
    with os.fdopen(os.open(path, os.O_RDONLY | os.O_NONBLOCK), "rb") as f:
        lazy = Lazy(f, 0, chunk_size=200)
        i = 0
        while lazy.write_to(sink):
            hook(i)
            i += 1
    return sink.getvalue()


def op_arrow(path: str, hook: Callable[[int], None], opened: Any) -> Any:
    Decoder = api("kafkacodec._arrow.ArrowDecoder")
    decoder = Decoder("t", 0, max_rows=7)
    view = opened.buffer
    rows: list[Any] = []
    pos, i = 0, 0
    try:
        while pos < len(view):
            hook(i)
            i += 1
            rb, new = decoder.decode(view, pos)
            rows += arrow_rows(rb)
            if new == pos or decoder.trailing_bytes:
                break
            pos = new
    except KafkaCodecError as exc:
        raise Partial(rows, exc) from exc
    return rows


def op_logdir(path: str, hook: Callable[[int], None], opened: Any) -> Any:
    import kafkacodec.logdir as logdir
    root = os.path.dirname(os.path.dirname(path))
    splits, corrupt = logdir.plan(root)
    rows: list[Any] = []
    try:
        for i, split in enumerate(splits):
            for rb in logdir.read_split(split):
                hook(i)
                rows += arrow_rows(rb)
    except KafkaCodecError as exc:
        raise Partial(rows, exc) from exc
    return [(s.path, s.start, s.end) for s in splits], corrupt, rows


def op_describe(path: str, hook: Callable[[int], None], opened: Any) -> Any:
    hook(0)
    return api("kafkacodec.logdir.describe")(os.path.dirname(os.path.dirname(path)))


def _cli(*argv: str) -> tuple[int, str, str]:
    """kafkacodec's main() in this process: (exit code, stdout, stderr). An exception out of
    main() (a traceback for the user) is a finding."""
    import kafkacodec.cli as cli
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(list(argv))
        except SystemExit as exc:             # argparse
            code = int(exc.code or 0)
    return code, out.getvalue(), err.getvalue()


def op_verify(path: str, hook: Callable[[int], None], opened: Any) -> Any:
    hook(0)
    return _cli("verify", "--json", "--no-progress", os.path.dirname(os.path.dirname(path)))


def op_dump(path: str, hook: Callable[[int], None], opened: Any) -> Any:
    hook(0)
    return _cli("dump", "--deep", "--print-data", path)


def op_convert(path: str, hook: Callable[[int], None], opened: Any) -> Any:
    hook(0)
    out = os.path.join(_ROOT, "converted.log")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(out)
    code, stdout, stderr = _cli("convert", "--to-magic", "1", "--no-progress",
                                "--allow-partial-tail", path, out)
    content = open(out, "rb").read() if os.path.exists(out) else None
    return code, stdout, stderr, content


# name -> (operation, whether it reads through a FileRecords the harness opens first)
OPERATIONS: dict[str, tuple[Callable[[str, Callable[[int], None], Any], Any], bool]] = {
    "records": (op_records, True),
    "batches": (op_batches, True),
    "validate": (op_validate, True),
    "slice": (op_slice, True),
    "down_convert": (op_down_convert, True),
    "lazy": (op_lazy, True),
    "lazy_file": (op_lazy_file, False),
    "arrow": (op_arrow, True),
    "logdir": (op_logdir, False),
    "describe": (op_describe, False),
    "verify": (op_verify, False),
    "dump": (op_dump, False),
    "convert": (op_convert, False),
}


def run_op(name: str, path: str, hook: Callable[[int], None] = lambda i: None) -> tuple:
    """('ok', summary) | ('partial', done, error class) | ('error', error class)."""
    fn, mapped = OPERATIONS[name]
    opened = _fr(path) if mapped else None
    try:
        return ("ok", fn(path, hook, opened))
    except Partial as p:
        return ("partial", p.done, type(p.error))
    except (KafkaCodecError, OSError) as exc:
        return ("error", type(exc))
    finally:
        if opened is not None:
            with contextlib.suppress(KafkaCodecError):
                opened.close()


# --- truncation ------------------------------------------------------------------------------

def _cli_truncated(result: tuple) -> bool:
    code, stdout, stderr = result[:3]
    text = (stdout + stderr).lower()
    return code in (1, 3) and ("truncat" in text or "shrank" in text or "cut" in text)


def allowed(name: str, got: tuple, before: tuple, after: tuple, torn: bool) -> bool:
    """Whether `got` (the operation during the truncation) is one of its allowed ends. `torn`:
    the cut fell inside an entry while the operation was reading (Kafka cuts at batch
    boundaries): the records of that entry read after the cut may show the zeros past it
    before the operation ends with FileTruncatedError (docs/reliability.md)."""
    if got in (before, after):
        return True
    if name in ("verify", "dump", "convert"):
        # convert's size line may show the size seen before the cut: its exit code and
        # output file are what must match one of the ends
        same = name == "convert" and any(
            got[0] == ref[0] == "ok" and (got[1][0], got[1][3]) == (ref[1][0], ref[1][3])
            for ref in (before, after))
        return same or (got[0] == "ok" and _cli_truncated(got[1]))
    truncated = got[-1] is FileTruncatedError if got[0] in ("partial", "error") else False
    if not truncated:
        return False
    if got[0] == "error" or torn:
        return True
    done = got[1]
    for reference in (before, after):
        if reference[0] == "ok":
            # logdir: (plan, corrupt, rows); the other readers: their list of results
            full = reference[1][2] if name == "logdir" else reference[1]
            if not isinstance(full, list):
                continue
        elif reference[0] == "partial":
            full = reference[1]
        else:
            continue
        if done == full[:len(done)]:
            return True
    return False


def truncate(data: bytes) -> None:
    rng = rng_of(data, "truncate")
    if rng.random() < 0.5:
        data = hostile(data, rng)
    if rng.random() < 0.5 and data:            # several pages: a cut can land past a page
        data = data * (1 + 16384 // len(data))
    root = _fresh_dir()
    path = os.path.join(root, "topic-0", SEGMENT)
    name = rng.choice(list(OPERATIONS))
    with open(path, "wb") as f:
        f.write(data)
    before = run_op(name, path)
    when = rng.choice(["mapped", "thread", "callback"])
    boundaries = [0] + [end for _, end in entry_spans(data)]
    if rng.random() < 0.5:
        cut, torn = rng.choice(boundaries), False          # as Kafka truncates: a batch boundary
    else:
        cut = rng.randrange(len(data) + 1)
        torn = when != "mapped" and cut not in boundaries
    fn, mapped = OPERATIONS[name]

    def cut_now() -> None:
        os.truncate(path, cut)

    hook: Callable[[int], None] = lambda i: None
    opened = _fr(path) if mapped else None
    timer = None
    if when == "mapped" and opened is not None:
        cut_now()
    elif when == "callback":
        at = rng.randint(0, 3)
        fired = []

        def hook(i: int) -> None:       # noqa: F811
            if i == at and not fired:
                fired.append(True)
                cut_now()
    else:
        timer = threading.Timer(rng.random() * 0.002, cut_now)
        timer.start()
    try:
        try:
            got = ("ok", fn(path, hook, opened))
        except Partial as p:
            got = ("partial", p.done, type(p.error))
        except (KafkaCodecError, OSError) as exc:
            got = ("error", type(exc))
    finally:
        if timer is not None:
            timer.join()
        if opened is not None:
            with contextlib.suppress(KafkaCodecError):
                opened.close()
    os.truncate(path, cut)                      # (the timer may have fired after the end)
    after = run_op(name, path)
    if not allowed(name, got, before, after, torn):
        raise AssertionError(f"{name}, truncated to {cut} of {len(data)} bytes ({when}): got "
                             f"{_short(got)}; intact {_short(before)}; truncated {_short(after)}")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) < 600 else text[:600] + "..."


# --- special files ---------------------------------------------------------------------------

@contextlib.contextmanager
def without_dac_override() -> Any:
    """Run the block without CAP_DAC_OVERRIDE/CAP_DAC_READ_SEARCH in this thread's effective
    set (root reads any file otherwise); restored after. No-op when not root or not Linux."""
    if not sys.platform.startswith("linux") or os.geteuid() != 0:
        yield
        return
    libc = ctypes.CDLL(None, use_errno=True)

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                    ("inheritable", ctypes.c_uint32)]

    capget, capset = {"x86_64": (125, 126), "aarch64": (90, 91)}.get(os.uname().machine,
                                                                      (None, None))
    if capget is None:
        yield
        return
    header, caps = Header(0x20080522, 0), (Data * 2)()
    libc.syscall(capget, ctypes.byref(header), caps)
    saved = caps[0].effective
    caps[0].effective &= ~((1 << 1) | (1 << 2))      # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
    libc.syscall(capset, ctypes.byref(header), caps)
    try:
        yield
    finally:
        caps[0].effective = saved
        libc.syscall(capset, ctypes.byref(header), caps)


CLEAR_OS = (OSError,)


def special(data: bytes) -> None:
    rng = rng_of(data, "special")
    root = _fresh_dir()
    path = os.path.join(root, "topic-0", SEGMENT)
    kind = rng.choice(["fifo", "directory", "dangling", "no_permission", "sparse", "replaced"])
    name = rng.choice(list(OPERATIONS))
    if kind == "sparse" and name == "down_convert":
        name = "lazy"       # eager conversion copies a 2 GiB entry it keeps: data, not a claim
    other = os.path.join(root, "topic-0", "00000000000000000100.log")
    if rng.random() < 0.5:                     # a readable segment beside the odd one
        with open(other, "wb") as f:
            f.write(data)
    guard: Any = contextlib.nullcontext()
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        os.mkdir(path)
    elif kind == "dangling":
        os.symlink(os.path.join(root, "nowhere.log"), path)
    elif kind == "no_permission":
        with open(path, "wb") as f:
            f.write(data)
        os.chmod(path, 0)
        guard = without_dac_override()
    elif kind == "sparse":
        with open(path, "wb") as f:
            claim = rng.choice([2**31 - 1, 2**31 - 13, 2**30])
            f.write(struct.pack(">qi", 0, claim) + bytes(4) + bytes([rng.randint(0, 2)]))
            f.truncate(rng.choice([2**32, 2**33 + 5, 2**31 + 12]))
    else:
        with open(path, "wb") as f:
            f.write(data)
    if kind == "replaced":
        replaced_then_read(path, data, name, rng)
        return
    fn, mapped = OPERATIONS[name]
    if kind == "fifo" and name in ("dump", "convert"):
        guard = fed_fifo(path, data)     # a FIFO named on the command line is read as a stream
    with guard:
        try:
            opened = _fr(path) if mapped else None
        except (OSError, KafkaCodecError):
            return
        try:
            got = ("ok", fn(path, lambda i: None, opened))
        except Partial as p:
            got = ("partial", p.done, type(p.error))
        except (KafkaCodecError, OSError) as exc:
            got = ("error", type(exc))
        finally:
            if opened is not None:
                with contextlib.suppress(KafkaCodecError):
                    opened.close()
    if name in ("verify", "dump", "convert"):
        code, stdout, stderr = got[1][:3]
        # bad data is reported on stdout with exit 1: dump as Kafka's tool does ("isvalid:
        # false", "| error: ...", "Found N invalid bytes at the end"), verify --json in its "problems"; anything else on stderr
        reported = "kafkacodec: error:" in stderr or (
            name == "dump" and ("isvalid: false" in stdout or "| error:" in stdout
                                or "invalid bytes at the end" in stdout)) or (
            name == "verify" and '"problems": [{' in stdout)
        if "Traceback" in stderr or (code not in (0, 1, 3)) or (code and not reported):
            raise AssertionError(f"kafkacodec {name} on a {kind} segment: exit {code}, "
                                 f"stderr {stderr[-500:]!r}")
        streamed = kind == "fifo" and name != "verify"
        if kind != "sparse" and code == 0 and name != "verify" and not streamed:
            raise AssertionError(f"kafkacodec {name} read a {kind} segment and exited 0")


@contextlib.contextmanager
def fed_fifo(path: str, data: bytes) -> Any:
    """A writer thread feeding `data` into the FIFO at `path` (the CLI reads a FIFO it is named
    as `cat` does: it waits for the writer). After the block, a writer the CLI never met is
    released by a reader of our own, so the thread always ends."""
    def feed() -> None:
        with contextlib.suppress(BrokenPipeError), open(path, "wb") as f:
            f.write(data)
    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    try:
        yield
    finally:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        try:
            while writer.is_alive():
                with contextlib.suppress(BlockingIOError):
                    os.read(fd, 1 << 16)
                writer.join(0.01)
        finally:
            os.close(fd)


def replaced_then_read(path: str, data: bytes, name: str, rng: random.Random) -> None:
    """Another file renamed over the path while it is open: a reader that opened it before
    reads the old bytes (its inode), whole."""
    fn, mapped = OPERATIONS[name]
    if not mapped:
        return
    before = run_op(name, path)
    opened = _fr(path)
    newer = path + ".new"
    with open(newer, "wb") as f:
        f.write(bytes(reversed(data)) + b"\xee" * rng.randrange(4096))
    os.replace(newer, path)
    try:
        try:
            got = ("ok", fn(path, lambda i: None, opened))
        except Partial as p:
            got = ("partial", p.done, type(p.error))
        except (KafkaCodecError, OSError) as exc:
            got = ("error", type(exc))
    finally:
        opened.close()
    if got != before:
        raise AssertionError(f"{name} of a segment replaced while open: {_short(got)}, the "
                             f"file it opened gave {_short(before)}")


TARGETS: dict[str, Target] = {
    "truncate": Target(truncate, "records"),
    "special": Target(special, "records", timeout=60),   # a 2 GiB entry's CRC, read whole
}
