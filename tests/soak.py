"""A soak of `kafkacodec serve` (over log directories, or as the gateway in front of a cluster):
the server runs as a child process with a low descriptor limit and small memory pools, and for
`seconds` good clients read every record again and again while hostile connections do what
attackers and bad networks do.  The result says whether every good pass was exact and on time
and how far the server's RSS and descriptors went.

    python tests/soak.py --seconds 600            # the nightly run (a log directory)
    python tests/soak.py --seconds 600 --gateway  # through serve --upstream (librdkafka's mock)

tests/test_soak.py runs both briefly in CI.  The limits (SOAK_LIMITS, and GATEWAY_LIMITS for the
gateway) are the server's flags; the bounds asserted are stated beside them.
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TESTS = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, TESTS)

from blocking_client import BlockingClient  # noqa: E402
from isolated import child_env  # noqa: E402

from kafkacodec import MemoryRecords  # noqa: E402

MiB = 1 << 20
#: The server's settings under soak (flags of `kafkacodec serve`).
SOAK_LIMITS = {
    "--max-request-memory": str(32 * MiB), "--socket-request-max-bytes": str(8 * MiB),
    "--max-conversion-memory": str(8 * MiB), "--request-read-timeout-ms": "1500",
    "--response-write-timeout-ms": "1500", "--connections-max-idle-ms": "4000",
    "--max-connections": "100", "--max-request-entries": "20000",
}
#: The gateway's own memory under soak (flags of `kafkacodec serve --upstream`): its upstream
#: consumer's KIP-81 pool and the fetched data it keeps for clients.
GATEWAY_LIMITS = {"--upstream-buffer-memory": str(16 * MiB), "--upstream-cache-memory": str(16 * MiB)}
DESCRIPTOR_LIMIT = 220        # RLIMIT_NOFILE of the server process (soft and hard)
#: RSS may grow by the two pools (request and conversion memory; the gateway's two as well)
#: plus this much (Python objects, the answers being built).
RSS_SLACK = 96 * MiB
POOLS = int(SOAK_LIMITS["--max-request-memory"]) + int(SOAK_LIMITS["--max-conversion-memory"])
GATEWAY_POOLS = POOLS + sum(int(v) for v in GATEWAY_LIMITS.values())
#: A good client's request must be answered within this, and its pass over every partition end
#: within PASS_DEADLINE_S (unloaded, a pass takes about 0.2 s here).
REQUEST_DEADLINE_S = 3.0
PASS_DEADLINE_S = 10.0
#: Hostile connections the idle holder keeps open (below --max-connections: room for the good).
IDLE_HOLDERS = 60


@dataclass
class SoakResult:
    passes: Counter[str] = field(default_factory=Counter)          # good client -> full passes
    slowest_pass: float = 0.0
    failures: list[str] = field(default_factory=list)
    rss_start: int = 0
    rss_max: int = 0
    fds_start: int = 0
    fds_max: int = 0
    fds_end: int = 0
    hostile: Counter[str] = field(default_factory=Counter)         # hostile attempts made
    closed: dict[str, float] = field(default_factory=dict)         # the server's closed_total
    exit_code: int | None = None
    pools: int = POOLS                   # the memory the server's limits allow (RSS may add RSS_SLACK)

    def problems(self) -> list[str]:
        """What a soak must not show (empty: it passed)."""
        out = list(self.failures)
        if not self.passes or min(self.passes.values()) < 1:
            out.append(f"a good client made no full pass: {dict(self.passes)}")
        if self.rss_max - self.rss_start > self.pools + RSS_SLACK:
            out.append(f"RSS grew by {(self.rss_max - self.rss_start) / MiB:.0f} MiB")
        if self.fds_max > DESCRIPTOR_LIMIT:
            out.append(f"{self.fds_max} descriptors")
        if self.fds_end > self.fds_start + 4:
            out.append(f"descriptors leaked: {self.fds_start} at start, {self.fds_end} at the end")
        if self.exit_code != 0:
            out.append(f"the server exited with {self.exit_code}")
        return out


# --- the server ---------------------------------------------------------------------------------
def _limit_descriptors() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (DESCRIPTOR_LIMIT, DESCRIPTOR_LIMIT))


def start_server(args: list[str]) -> tuple[subprocess.Popen[str], int, int]:
    """`kafkacodec serve ARGS` with the soak limits; (process, port, metrics port)."""
    metrics = socket.socket()
    metrics.bind(("127.0.0.1", 0))
    metrics_port = metrics.getsockname()[1]
    metrics.close()
    flags = [x for pair in SOAK_LIMITS.items() for x in pair]
    proc = subprocess.Popen(
        [sys.executable, "-m", "kafkacodec.cli", "serve", *args, "--listen", "127.0.0.1:0",
         "--metrics-listen", f"127.0.0.1:{metrics_port}", "--zstd-downconvert-codec", "lz4", *flags],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env(), cwd=TESTS,
        preexec_fn=_limit_descriptors)
    line = proc.stdout.readline() if proc.stdout else ""
    if not line.startswith("listening on "):
        proc.kill()
        raise RuntimeError(f"serve did not start: {line!r} {proc.stderr.read() if proc.stderr else ''}")
    return proc, int(line.strip().rsplit(":", 1)[1]), metrics_port


def _rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def _fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def closed_counts(metrics_port: int) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("kafkacodec_serve_connections_closed_total{"):
            reason = line.split('reason="', 1)[1].split('"', 1)[0]
            out[reason] = float(line.rsplit(" ", 1)[1])
    return out


# --- good clients -------------------------------------------------------------------------------
def read_partition(client: BlockingClient | None, port: int, topic: str, partition: int, end: int,
                   version: int) -> list[tuple[int, bytes | None, bytes | None]]:
    """Every data record of a partition up to `end`, by Fetch `version` (v0-3: down-converted,
    through kafka-python's request classes on a connection each)."""
    from serve_support import old_fetch

    rows: list[tuple[int, bytes | None, bytes | None]] = []
    offset = 0
    while offset < end:
        if client is None:
            error, _, records = old_fetch(port, version, topic, partition, offset, 256 * 1024, 100,
                                          timeout=REQUEST_DEADLINE_S)
        else:
            answer = client.fetch([(topic, [(partition, offset, 256 * 1024)])], api_version=version,
                                  max_wait_ms=100).responses[0].partitions[0]
            error, records = answer.error_code, bytes(answer.records)
        if error:
            raise AssertionError(f"{topic}-{partition} at {offset}: error {error}")
        after = offset
        for batch in MemoryRecords(records).batches():
            if batch.magic == 2:
                after = max(after, batch.last_offset + 1)
            if batch.magic == 2 and batch.is_control:
                continue
            for record in batch:
                if record.offset >= offset:
                    rows.append((record.offset, record.key, record.value))
                    after = max(after, record.offset + 1)
        if after == offset:
            time.sleep(0.05)                      # nothing new here yet
        offset = after
    return rows


def good_client(name: str, port: int, want: dict[tuple[str, int], list[Any]], ends: dict[tuple[str, int], int],
                version: int, stop: threading.Event, result: SoakResult, lock: threading.Lock,
                passes: int | None = None) -> None:
    """Read every partition whole, again and again, until `stop` (or `passes` passes)."""
    while not stop.is_set() and (passes is None or result.passes[name] < passes):
        start = time.monotonic()
        try:
            client = BlockingClient("127.0.0.1", port, timeout=REQUEST_DEADLINE_S) if version >= 4 else None
            try:
                for (topic, partition), rows in want.items():
                    got = read_partition(client, port, topic, partition, ends[(topic, partition)], version)
                    if got != rows:
                        with lock:
                            result.failures.append(f"{name}: {topic}-{partition}: {len(got)} records, "
                                                   f"not the {len(rows)} stored")
                        return
            finally:
                if client is not None:
                    client.close()
        except (OSError, AssertionError) as exc:
            with lock:
                result.failures.append(f"{name}: {type(exc).__name__}: {exc}")
            return
        took = time.monotonic() - start
        with lock:
            result.slowest_pass = max(result.slowest_pass, took)
            if took > PASS_DEADLINE_S:
                result.failures.append(f"{name}: a pass took {took:.1f} s")
                return
            result.passes[name] += 1


# --- hostile connections ------------------------------------------------------------------------
def _connect(port: int, rcvbuf: int | None = None) -> socket.socket | None:
    try:
        sock = socket.socket()
        if rcvbuf:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        sock.settimeout(5)
        sock.connect(("127.0.0.1", port))
        return sock
    except OSError:
        return None


def _reset(sock: socket.socket) -> None:
    """Close with a RST (SO_LINGER 0), as a crashed client or a cut network."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    sock.close()


def _fetch_frame(version: int, topic: str, partitions: int) -> bytes:
    """A framed Fetch of every partition from offset 0 (kafka-python's classes below v4)."""
    if version >= 4:
        from kafkacodec.protocol import encode_fetch_request

        return bytes(encode_fetch_request([(topic, [(p, 0, 8 * MiB) for p in range(partitions)])],
                                          api_version=version, max_bytes=64 * MiB, max_wait_ms=0))
    from kafka.protocol.consumer import FetchRequest

    request = FetchRequest[version](
        replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=64 * MiB,
        topics=[FetchRequest.FetchTopic(topic=topic, partitions=[FetchRequest.FetchTopic.FetchPartition(
            partition=p, fetch_offset=0, partition_max_bytes=8 * MiB) for p in range(partitions)])])
    body = bytes(request.encode(version=version))
    header = struct.pack(">hhih", 1, version, 5, -1)
    return struct.pack(">i", len(header) + len(body)) + header + body


def hostile(kind: str, port: int, topic: str, partitions: int, stop: threading.Event,
            result: SoakResult, lock: threading.Lock) -> None:
    rng = random.Random(kind)
    held: list[socket.socket] = []
    try:
        while not stop.is_set():
            with lock:
                result.hostile[kind] += 1
            if kind == "slowloris":                   # a byte now and then, never a whole request
                sock = _connect(port)
                if sock:
                    try:
                        sock.sendall(struct.pack(">i", 1000))
                        while not stop.is_set():
                            sock.send(b"\0")
                            time.sleep(0.2)
                    except OSError:
                        pass
                    sock.close()
            elif kind == "huge":                      # announces the largest request, sends little
                sock = _connect(port)
                if sock:
                    try:
                        sock.sendall(struct.pack(">i", 8 * MiB) + b"\0" * 100)
                        sock.recv(1)                  # until the server closes it
                    except OSError:
                        pass
                    sock.close()
            elif kind == "idle":                      # holds connections open, says nothing
                held = [s for s in held if s.fileno() >= 0]
                alive = []
                for s in held:
                    try:
                        s.setblocking(False)
                        if s.recv(1) == b"":
                            s.close()
                            continue
                    except BlockingIOError:
                        pass
                    except OSError:
                        s.close()
                        continue
                    alive.append(s)
                held = alive
                while len(held) < IDLE_HOLDERS and not stop.is_set():
                    sock = _connect(port)
                    if sock is None:
                        break
                    held.append(sock)
                stop.wait(0.5)
            elif kind == "nonreader":                 # asks for a large answer, never reads it
                sock = _connect(port, rcvbuf=4096)
                if sock:
                    try:
                        sock.sendall(_fetch_frame(rng.choice((3, 11)), topic, partitions))
                        sock.settimeout(10)
                        time.sleep(3)
                    except OSError:
                        pass
                    _reset(sock)
            elif kind == "abandon":                   # reads the start of an answer, then goes
                sock = _connect(port, rcvbuf=4096)
                if sock:
                    try:
                        sock.sendall(_fetch_frame(rng.choice((2, 3, 11)), topic, partitions))
                        sock.recv(100)
                    except OSError:
                        pass
                    _reset(sock)
                stop.wait(0.05)
            elif kind == "garbage":                   # random frames, random sizes
                sock = _connect(port)
                if sock:
                    try:
                        size = rng.choice((rng.randrange(-5, 64), rng.randrange(64, 4096), 1 << 30))
                        body = rng.randbytes(max(0, min(size, 4096)))
                        sock.sendall(struct.pack(">i", size) + body)
                        sock.recv(100)
                    except OSError:
                        pass
                    sock.close()
                stop.wait(0.02)
            elif kind == "costly":                    # far more entries than a request may hold
                sock = _connect(port)
                if sock:
                    try:
                        names = b"".join(struct.pack(">h", 1) + b"t" for _ in range(100_000))
                        frame = struct.pack(">hhih", 3, 1, 7, 4) + b"soak" + struct.pack(">i", 100_000) + names
                        sock.sendall(struct.pack(">i", len(frame)) + frame)
                        sock.recv(100)
                    except OSError:
                        pass
                    sock.close()
                stop.wait(0.5)
            elif kind == "churn":                     # connects, half a request, RST
                sock = _connect(port)
                if sock:
                    try:
                        sock.sendall(_fetch_frame(11, topic, 1)[:rng.randrange(1, 40)])
                    except OSError:
                        pass
                    _reset(sock)
                stop.wait(0.01)
    finally:
        for sock in held:
            sock.close()


HOSTILE = ("slowloris", "slowloris", "huge", "huge", "huge", "huge", "idle", "nonreader", "nonreader", "abandon",
           "garbage", "costly", "churn")


# --- the run ----------------------------------------------------------------------------------------
def soak(server_args: list[str], want: dict[tuple[str, int], list[Any]], ends: dict[tuple[str, int], int],
         wide_topic: tuple[str, int], seconds: float, versions: tuple[int, ...] = (11, 3),
         pools: int = POOLS) -> SoakResult:
    """Run the server with `server_args`, the good clients (one per Fetch version) reading
    `want` (the data records of each partition, up to `ends`), and the hostile mix for
    `seconds`; `wide_topic` (name, partitions) is what the hostile fetches ask for; `pools`
    the memory the server's flags allow it."""
    result = SoakResult(pools=pools)
    proc, port, metrics_port = start_server(server_args)
    lock = threading.Lock()
    stop = threading.Event()
    try:
        # warm-up: every segment read once (the log view keeps a mapping, a descriptor, each)
        for v in versions:
            good_client("warm-up", port, want, ends, v, stop, result, lock, passes=1)
            result.passes.pop("warm-up", None)
        sock = _connect(port)
        if sock is not None:
            sock.sendall(_fetch_frame(11, *wide_topic))
            sock.settimeout(PASS_DEADLINE_S)
            size = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))[0]
            while size > 0:
                size -= len(sock.recv(min(size, MiB)))
            sock.close()
        time.sleep(0.5)
        result.rss_start, result.fds_start = _rss(proc.pid), _fds(proc.pid)
        threads = [threading.Thread(target=good_client, name=f"good-v{v}", daemon=True,
                                    args=(f"fetch-v{v}", port, want, ends, v, stop, result, lock))
                   for v in versions]
        threads += [threading.Thread(target=hostile, name=kind, daemon=True,
                                     args=(kind, port, *wide_topic, stop, result, lock)) for kind in HOSTILE]
        for t in threads:
            t.start()
        end = time.monotonic() + seconds
        while time.monotonic() < end and proc.poll() is None:
            result.rss_max = max(result.rss_max, _rss(proc.pid))
            result.fds_max = max(result.fds_max, _fds(proc.pid))
            time.sleep(0.25)
        stop.set()
        for t in threads:
            t.join(PASS_DEADLINE_S + 15)
            if t.is_alive():
                result.failures.append(f"{t.name} did not stop")
        if proc.poll() is None:
            deadline = time.monotonic() + 15             # every hostile connection gone
            while time.monotonic() < deadline and _fds(proc.pid) > result.fds_start:
                time.sleep(0.2)
            result.fds_end = _fds(proc.pid)
            result.closed = closed_counts(metrics_port)
        else:
            result.failures.append(f"the server died: {proc.stderr.read() if proc.stderr else ''}"[-3000:])
    finally:
        if proc.poll() is None:
            proc.terminate()
        try:
            result.exit_code = proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            result.exit_code = proc.wait()
    return result


def log_dir_soak(root: Path, seconds: float) -> SoakResult:
    """The soak over a log directory: serve_support's topics (every magic and codec, zstd
    recompressed for the v3 reader) plus `wide`, 30 partitions of 1 MiB for the hostile
    fetches (answers far larger than the socket buffers)."""
    from serve_support import make_log_dir, partition_records

    from kafkacodec import MemoryRecordsBuilder

    make_log_dir(root)
    for p in range(30):
        directory = root / f"wide-{p}"
        directory.mkdir()
        b = MemoryRecordsBuilder(magic=2, compression="none", base_offset=0)
        for i in range(16):
            b.append(1_700_000_000_000 + i, b"w%d" % i, os.urandom(64 * 1024), [])
        (directory / f"{0:020d}.log").write_bytes(b.build())
    want = {}
    ends = {}
    for topic, partitions in (("mixed", 2), ("legacy", 1), ("v1only", 1), ("modern", 1)):
        for p in range(partitions):
            rows = partition_records(root, topic, p)
            want[(topic, p)] = [r[:3] for r in rows]
            ends[(topic, p)] = rows[-1][0] + 1
    return soak([str(root)], want, ends, ("wide", 30), seconds)


CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


def gateway_soak(seconds: float) -> SoakResult:
    """The soak through `serve --upstream` (GATEWAY_LIMITS on top of SOAK_LIMITS) in front of
    librdkafka's mock cluster (3 brokers, in this process; the gateway in the child): `codecs`
    (4 partitions, 40 records produced with each codec) for the good clients, who compare with
    what confluent-kafka reads from the mock directly, and `wide` (4 partitions of 1 MiB of
    incompressible records) for the hostile fetches."""
    from mock_cluster import MOCK_PARTITIONS, MockCluster

    cluster = MockCluster(3)
    cluster.create_topic("codecs")
    cluster.create_topic("wide")
    for codec in CODECS:
        cluster.produce("codecs", [(i % MOCK_PARTITIONS, b"%s-%d" % (codec.encode(), i),
                                    b"%s value %d " % (codec.encode(), i) * (1 + i % 7), None, None)
                                   for i in range(40)], **{"compression.type": codec})
    cluster.produce("wide", [(p, b"w%d" % i, os.urandom(64 * 1024), None, None)
                             for p in range(MOCK_PARTITIONS) for i in range(16)])
    count = 40 * len(CODECS)
    direct = cluster.consume("codecs", range(MOCK_PARTITIONS), count)
    if len(direct) != count:
        raise RuntimeError(f"the mock cluster holds {len(direct)} of the {count} records produced")
    want: dict[tuple[str, int], list[Any]] = {("codecs", p): [] for p in range(MOCK_PARTITIONS)}
    for partition, offset, key, value, _, _ in direct:
        want[("codecs", partition)].append((offset, key, value))
    ends = {tp: rows[-1][0] + 1 for tp, rows in want.items() if rows}
    want = {tp: rows for tp, rows in want.items() if rows}
    flags = [x for pair in GATEWAY_LIMITS.items() for x in pair]
    return soak(["--upstream", cluster.bootstrap, *flags], want, ends, ("wide", MOCK_PARTITIONS),
                seconds, pools=GATEWAY_POOLS)


def main() -> int:
    import tempfile

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--gateway", action="store_true",
                        help="soak serve --upstream in front of librdkafka's mock cluster")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        result = gateway_soak(args.seconds) if args.gateway else log_dir_soak(Path(tmp) / "logs", args.seconds)
    print(result)
    for problem in result.problems():
        print("PROBLEM:", problem)
    return 1 if result.problems() else 0


if __name__ == "__main__":
    sys.exit(main())
