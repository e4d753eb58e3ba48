"""A real S3 API server on loopback for the remote-storage tests: moto's standalone server
(`moto_server`, from PyPI's moto[server]) started as a subprocess on a free port.

Use the `s3` fixture (see conftest.py): it yields an `S3Server` with `endpoint`, credentials and
`filesystem()` (a pyarrow.fs.S3FileSystem pointed at it); each test gets a fresh bucket name."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from dataclasses import dataclass, field
from collections.abc import Iterator
from typing import Any

ACCESS_KEY = "kafkacodec-test"
SECRET_KEY = "kafkacodec-test-secret"
REGION = "us-east-1"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class S3Server:
    host: str
    port: int
    process: subprocess.Popen[bytes] = field(repr=False)

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def env(self) -> dict[str, str]:
        """Environment for processes (Spark executors, the CLI) that reach the server through
        pyarrow.fs / s3:// URIs."""
        return {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
                "AWS_DEFAULT_REGION": REGION, "AWS_ENDPOINT_URL": self.endpoint,
                "AWS_EC2_METADATA_DISABLED": "true"}

    def filesystem(self) -> Any:
        from pyarrow import fs
        return fs.S3FileSystem(access_key=ACCESS_KEY, secret_key=SECRET_KEY, region=REGION,
                               endpoint_override=f"{self.host}:{self.port}", scheme="http",
                               allow_bucket_creation=True, allow_bucket_deletion=True)

    def new_bucket(self) -> str:
        name = f"kc-{uuid.uuid4().hex[:12]}"
        self.filesystem().create_dir(name)
        return name

    @property
    def options(self) -> dict[str, str]:
        """The reader's fs.s3a.* options (Hadoop's S3A names, as Spark users set them)."""
        return {"fs.s3a.endpoint": self.endpoint, "fs.s3a.access.key": ACCESS_KEY,
                "fs.s3a.secret.key": SECRET_KEY, "fs.s3a.endpoint.region": REGION}

    def upload(self, folder: Any, prefix: str) -> str:
        """Every file under `folder` copied to a new bucket under `prefix`; its s3:// URI."""
        from pathlib import Path

        fs = self.filesystem()
        bucket = self.new_bucket()
        for f in sorted(Path(folder).rglob("*")):
            if f.is_file():
                with fs.open_output_stream(f"{bucket}/{prefix}/{f.relative_to(folder).as_posix()}") as out:
                    out.write(f.read_bytes())
        return f"s3://{bucket}/{prefix}"

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def start() -> S3Server:
    """Start moto_server on 127.0.0.1 and wait until it answers (at most 30 s)."""
    exe = shutil.which("moto_server", path=os.path.dirname(sys.executable)) or shutil.which("moto_server")
    if exe is None:
        raise RuntimeError("moto_server not found: pip install 'moto[server]'")
    port = _free_port()
    process = subprocess.Popen([exe, "-H", "127.0.0.1", "-p", str(port)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    server = S3Server("127.0.0.1", port, process)
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(f"{server.endpoint}/moto-api/", timeout=1).close()
            return server
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                server.stop()
                raise RuntimeError(f"moto_server did not start on port {port}") from None
            time.sleep(0.1)


@contextlib.contextmanager
def counted_reads() -> Iterator[list[int]]:
    """The sizes of what kafkacodec's readers fetch from a remote file system while the block
    runs: ranged reads of segments (logdir.storage.Source.view) and whole small files (index
    files, checkpoints: Storage.read_bytes)."""
    from kafkacodec.logdir import storage

    fetched: list[int] = []
    view, read_bytes = storage.Source.view, storage.Storage.read_bytes

    def ranged(self: Any, start: int, end: int) -> Any:
        got = view(self, start, end)
        if self._file is not None:
            fetched.append(len(got[0]))
        return got

    def whole(self: Any, path: str, *args: Any) -> bytes:
        data = read_bytes(self, path, *args)
        if self.scheme:
            fetched.append(len(data))
        return data

    storage.Source.view, storage.Storage.read_bytes = ranged, whole   # type: ignore[method-assign]
    try:
        yield fetched
    finally:
        storage.Source.view, storage.Storage.read_bytes = view, read_bytes   # type: ignore[method-assign]


class StallingProxy:
    """A TCP proxy on loopback in front of `host:port`: a bad network between a reader and its
    store.  `stall()` holds every byte in either direction until `flow()`; `refuse()` resets
    every connection, open or new, until `flow()`.  Use as a context manager."""

    def __init__(self, host: str, port: int):
        import threading

        self.target = (host, port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.listener.getsockname()[1])
        self.flowing = threading.Event()
        self.flowing.set()
        self.refusing = False
        self.connections: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, name="stalling-proxy", daemon=True).start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stall(self) -> None:
        self.flowing.clear()

    def flow(self) -> None:
        self.refusing = False
        self.flowing.set()

    def refuse(self) -> None:
        self.refusing = True
        self.flowing.set()
        with self._lock:
            connections, self.connections = self.connections, []
        for conn in connections:
            _reset(conn)

    def _accept(self) -> None:
        import threading

        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if self.refusing:
                _reset(client)
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=10)
            except OSError:
                _reset(client)
                continue
            upstream.settimeout(None)
            with self._lock:
                self.connections += [client, upstream]
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(src, dst), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                self.flowing.wait()
                if self.refusing:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for conn in (src, dst):
                _reset(conn)

    def close(self) -> None:
        self.listener.close()
        self.refuse()

    def __enter__(self) -> StallingProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _reset(conn: socket.socket) -> None:
    """Close with a reset (SO_LINGER 0), as a dropped network connection ends."""
    import struct

    try:
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    conn.close()
