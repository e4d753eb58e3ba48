"""`kafkacodec serve` under abuse and exhaustion: every connection has deadlines, one connection
cannot hold the request memory of all, a request's cost is bounded before any work, every
descriptor has one owner, and the listener backs off at the descriptor limit.  Each test is a
case an attacker or a bad network produces; the good client beside it must keep being served."""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from isolated import child_env

from kafkacodec import MemoryRecordsBuilder
from kafkacodec.protocol import messages as m
from kafkacodec.protocol.api import ApiKey
from blocking_client import BlockingClient
from kafkacodec.serve import Server

TESTS = os.path.dirname(os.path.abspath(__file__))


def v2(offset: int, count: int, value: bytes = b"x" * 50) -> bytes:
    b = MemoryRecordsBuilder(magic=2, compression="none", base_offset=offset)
    for i in range(count):
        b.append(1_700_000_000_000 + offset + i, b"k%d" % (offset + i), value, [])
    return b.build()


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    for topic in ("t", "u"):
        directory = tmp_path / f"{topic}-0"
        directory.mkdir()
        (directory / f"{0:020d}.log").write_bytes(v2(0, 5) + v2(5, 5))
    return tmp_path


def wait_for(condition, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def closed_by_server(sock: socket.socket, timeout: float) -> float:
    """Seconds until the server closed `sock` (EOF or reset); fails after `timeout`."""
    start = time.monotonic()
    sock.settimeout(timeout)
    try:
        while sock.recv(65536):
            pass
    except ConnectionResetError:
        pass
    except socket.timeout:
        raise AssertionError(f"the server kept the connection open for {timeout} s") from None
    return time.monotonic() - start


def api_versions_answered(port: int, timeout: float = 5.0) -> float:
    """Seconds a fresh client waits for an ApiVersions answer."""
    start = time.monotonic()
    with BlockingClient("127.0.0.1", port, timeout=timeout) as client:
        client.api_versions()
    return time.monotonic() - start


def announce(port: int, size: int, sent: bytes = b"\0\x12\0\x03") -> socket.socket:
    """A connection that announces a request of `size` bytes, sends its first bytes, and stops."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(struct.pack(">i", size) + sent)
    return sock


# --- deadlines --------------------------------------------------------------------------------
def test_requests_announced_huge_and_never_sent_do_not_starve_other_clients(log_dir):
    """Two connections announcing socket.request.max.bytes each would hold the whole default
    request pool (200 MiB) forever: large requests share half of it, so others are served."""
    with Server([str(log_dir)], listen=("127.0.0.1", 0)) as srv:
        holders = [announce(srv.port, srv.config.socket_request_max_bytes) for _ in range(2)]
        wait_for(lambda: len(srv.connections) == 2 and srv.request_pool.available_memory < srv.request_pool.size)
        assert api_versions_answered(srv.port) < 2.0
        assert srv.request_pool.available_memory >= srv.request_pool.size // 2
        for sock in holders:
            sock.close()


def test_a_request_must_arrive_whole_within_the_read_timeout(log_dir):
    with Server([str(log_dir)], listen=("127.0.0.1", 0), request_read_timeout_ms=400) as srv:
        stalled = announce(srv.port, 50)
        trickle = announce(srv.port, 5000)                 # slowloris: a byte now and then
        start = time.monotonic()
        while time.monotonic() - start < 0.9:
            try:
                trickle.send(b"\0")
            except OSError:
                break
            time.sleep(0.05)
        assert closed_by_server(stalled, 5) < 2.0
        assert closed_by_server(trickle, 5) < 2.0
        assert time.monotonic() - start >= 0.35           # not before its time
        assert api_versions_answered(srv.port) < 1.0
        wait_for(lambda: srv.request_pool.available_memory == srv.request_pool.size)
        closed = srv.closed_connections
        assert closed.get("request_read_timeout", 0) == 2


def test_idle_connections_are_closed_after_connections_max_idle_ms(log_dir):
    with Server([str(log_dir)], listen=("127.0.0.1", 0), connections_max_idle_ms=300) as srv:
        with BlockingClient("127.0.0.1", srv.port, timeout=5) as client:
            client.api_versions()
            start = time.monotonic()
            assert closed_by_server(client._sock, 5) >= 0.2
        assert time.monotonic() - start < 3.0
        idle = socket.create_connection(("127.0.0.1", srv.port))   # never sends anything
        assert closed_by_server(idle, 5) < 3.0
        wait_for(lambda: srv.closed_connections.get("idle", 0) == 2)


def test_a_waiting_fetch_is_not_idle(log_dir):
    """A long poll is a request in progress: it is answered at its max wait, not closed."""
    with Server([str(log_dir)], listen=("127.0.0.1", 0), connections_max_idle_ms=200) as srv:
        with BlockingClient("127.0.0.1", srv.port, timeout=10) as client:
            start = time.monotonic()
            answer = client.fetch([("t", [(0, 10, 1 << 20)])], api_version=11, max_wait_ms=1000)
            assert time.monotonic() - start >= 0.9
            assert answer.responses[0].partitions[0].error_code == 0


def test_a_client_that_stops_reading_its_response_is_closed_and_gives_back_what_it_held(tmp_path):
    directory = tmp_path / "big-0"
    directory.mkdir()
    offset, batches = 0, []
    for _ in range(200):
        batches.append(v2(offset, 20, value=os.urandom(900)))
        offset += 20
    (directory / f"{0:020d}.log").write_bytes(b"".join(batches))
    from kafka.protocol.consumer import FetchRequest
    with Server([str(tmp_path)], listen=("127.0.0.1", 0), response_write_timeout_ms=400,
                max_conversion_memory=1 << 20) as srv:
        sockets = []
        for version in (3, 11):                  # down-converted (pool memory) and sendfile
            request = FetchRequest[version](
                replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=64 << 20,
                topics=[FetchRequest.FetchTopic(topic="big", partitions=[FetchRequest.FetchTopic.FetchPartition(
                    partition=0, fetch_offset=0, partition_max_bytes=64 << 20)])])
            body = bytes(request.encode(version=version))
            header = struct.pack(">hhih", 1, version, 1, -1)
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.connect(("127.0.0.1", srv.port))
            sock.sendall(struct.pack(">i", len(header) + len(body)) + header + body)
            sockets.append(sock)                 # ...and never read
        wait_for(lambda: srv.closed_connections.get("response_write_timeout", 0) == 2, timeout=10)
        assert not srv.connections
        assert srv.conversion_pool.available_memory == 1 << 20
        for sock in sockets:
            sock.close()


# --- cost bounds --------------------------------------------------------------------------------
def metadata_frame(names: list[bytes], version: int = 1) -> bytes:
    body = struct.pack(">i", len(names)) + b"".join(struct.pack(">h", len(n)) + n for n in names)
    frame = struct.pack(">hhih", ApiKey.METADATA, version, 7, 4) + b"test" + body
    return struct.pack(">i", len(frame)) + frame


def test_a_request_with_too_many_entries_is_refused_before_any_work(log_dir):
    """A 2 MB Metadata request naming 666,000 topics: closed at once, the loop not blocked, the
    server's memory not grown by its decoded entries."""
    with Server([str(log_dir)], listen=("127.0.0.1", 0)) as srv:
        assert srv.config.max_request_entries == 20_000
        before = rss_bytes()
        sock = socket.create_connection(("127.0.0.1", srv.port))
        sock.sendall(metadata_frame([b"t"] * 666_000))
        took = closed_by_server(sock, 10)
        assert took < 1.0
        if os.environ.get("KAFKACODEC_SANITIZED") != "1":   # ASan's quarantine keeps freed memory
            assert rss_bytes() - before < 40 << 20
        assert api_versions_answered(srv.port) < 1.0
        assert srv.closed_connections.get("request_too_costly", 0) == 1


def test_metadata_names_each_topic_once_as_kafka(log_dir):
    """Kafka answers the set of topics asked for: a name repeated is answered once."""
    with Server([str(log_dir)], listen=("127.0.0.1", 0)) as srv:
        sock = socket.create_connection(("127.0.0.1", srv.port))
        sock.sendall(metadata_frame([b"t", b"u", b"t", b"nope", b"t", b"nope"]))
        size = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))[0]
        payload = sock.recv(size, socket.MSG_WAITALL)
        sock.close()
        answer = m.METADATA_RESPONSE.decode(payload, 1, 4)
        assert sorted(t["name"] for t in answer["topics"]) == ["nope", "t", "u"]


def test_fetch_entries_are_bounded_too(log_dir):
    """Every array element counts: a topic and each of its partitions."""
    with Server([str(log_dir)], listen=("127.0.0.1", 0), max_request_entries=51) as srv:
        with BlockingClient("127.0.0.1", srv.port, timeout=5) as client:
            ok = client.fetch([("t", [(0, 0, 1 << 20)] * 50)], api_version=11, max_wait_ms=0)
            assert len(ok.responses[0].partitions) == 50
        with BlockingClient("127.0.0.1", srv.port, timeout=5) as client:
            with pytest.raises((ConnectionError, OSError)):
                client.fetch([("t", [(0, 0, 1 << 20)] * 51)], api_version=11, max_wait_ms=0)
        wait_for(lambda: srv.closed_connections.get("request_too_costly", 0) == 1)


# --- descriptors ----------------------------------------------------------------------------------
def rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts /proc/self/fd")
def test_building_a_fetch_answer_opens_no_descriptor_and_a_failed_one_leaks_none(log_dir, monkeypatch):
    """Pieces open their file when they are written, and whatever fails while an answer is built
    (here: the answer's encoding) gives back every piece made before."""
    import kafkacodec.serve.fetch as fetch_module

    with Server([str(log_dir)], listen=("127.0.0.1", 0)) as srv:
        with BlockingClient("127.0.0.1", srv.port, timeout=5) as client:
            client.fetch([("t", [(0, 0, 1 << 20)]), ("u", [(0, 0, 1 << 20)])], api_version=11, max_wait_ms=0)
        baseline = open_descriptors()

        def fail(*args, **kwargs):
            raise OverflowError("the answer does not fit an int32 size")
        monkeypatch.setattr(fetch_module, "encode_fetch_response", fail)
        for _ in range(20):
            with BlockingClient("127.0.0.1", srv.port, timeout=5) as client:
                with pytest.raises((ConnectionError, OSError)):
                    client.fetch([("t", [(0, 0, 1 << 20)]), ("u", [(0, 0, 1 << 20)])], api_version=11,
                                 max_wait_ms=0)
        wait_for(lambda: not srv.connections)
        assert open_descriptors() <= baseline


def huge_batch_segment(directory: Path, entry_size: int) -> None:
    """A segment holding one v2 batch whose header claims `entry_size` bytes, the file sparse
    after the header (the bytes are never read: a fetch would send them with sendfile)."""
    from kafkacodec._format import LOG_OVERHEAD

    head = bytearray(v2(0, 1))
    struct.pack_into(">i", head, 8, entry_size - LOG_OVERHEAD)     # batchLength
    directory.mkdir()
    with open(directory / f"{0:020d}.log", "wb") as out:
        out.write(head)
        out.truncate(entry_size)


def test_an_answer_is_bounded_to_what_an_int32_frame_holds(tmp_path, log_dir):
    """A partition whose first batch cannot fit any response (2 GiB) is answered with an error
    (the int32 frame size cannot carry it), the other partitions with their records, and the
    client reads a valid frame; nothing is sent of the huge batch."""
    from kafkacodec.serve.fetch import MAX_ANSWER_BYTES

    assert MAX_ANSWER_BYTES < 1 << 31
    huge_batch_segment(log_dir / "huge-0", (1 << 31) - 1)
    with Server([str(log_dir)], listen=("127.0.0.1", 0)) as srv:
        with BlockingClient("127.0.0.1", srv.port, timeout=10) as client:
            answer = client.fetch([("huge", [(0, 0, (1 << 31) - 1)]), ("t", [(0, 0, 1 << 20)])],
                                  api_version=11, max_wait_ms=0, max_bytes=(1 << 31) - 1)
            huge, t = answer.responses[0].partitions[0], answer.responses[1].partitions[0]
            assert huge.error_code == 56 and bytes(huge.records) == b""    # KAFKA_STORAGE_ERROR
            assert t.error_code == 0 and len(bytes(t.records)) > 0


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts /proc/self/fd")
def test_an_answer_being_written_holds_at_most_one_descriptor(tmp_path):
    """Pieces open their segment when written, not when the answer is built: a client that
    reads slowly through an answer of 60 partitions costs one descriptor, not 60 (beyond the
    segments' mappings, which the log view keeps once they are read)."""
    for p in range(60):
        directory = tmp_path / f"wide-{p}"
        directory.mkdir()
        (directory / f"{0:020d}.log").write_bytes(v2(0, 20, value=os.urandom(3000)))
    with Server([str(tmp_path)], listen=("127.0.0.1", 0)) as srv:
        with BlockingClient("127.0.0.1", srv.port, timeout=10) as client:   # maps every segment
            client.fetch([("wide", [(p, 0, 1 << 20) for p in range(60)])], api_version=11, max_wait_ms=0)
        wait_for(lambda: not srv.connections)
        baseline = open_descriptors()
        header = struct.pack(">hhih", ApiKey.FETCH, 4, 1, -1)
        from kafka.protocol.consumer import FetchRequest
        request = FetchRequest[4](
            replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=64 << 20, isolation_level=0,
            topics=[FetchRequest.FetchTopic(topic="wide", partitions=[FetchRequest.FetchTopic.FetchPartition(
                partition=p, fetch_offset=0, partition_max_bytes=1 << 20) for p in range(60)])])
        body = bytes(request.encode(version=4))
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(("127.0.0.1", srv.port))
        sock.sendall(struct.pack(">i", len(header) + len(body)) + header + body)
        sock.recv(100)
        time.sleep(0.3)                            # the server is blocked writing the answer
        assert srv.connections and next(iter(srv.connections)).messages
        assert open_descriptors() - baseline <= 3  # the connection, one segment (+1 of slack)
        sock.close()
        wait_for(lambda: not srv.connections)
        wait_for(lambda: open_descriptors() <= baseline)


@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_NOFILE")
def test_at_the_descriptor_limit_the_listener_backs_off_and_recovers(log_dir):
    """The server (a child process with 40 spare descriptors) runs out of them on accept: no
    busy loop, no flood of warnings, and new clients are served once descriptors return."""
    code = textwrap.dedent(f"""
        import logging, os, resource, sys, time
        from kafkacodec.serve import Server
        warnings = []
        class Count(logging.Handler):
            def emit(self, record):
                warnings.append(record.getMessage())
        logging.getLogger("kafkacodec.serve").addHandler(Count(logging.WARNING))
        srv = Server([{str(log_dir)!r}], listen=("127.0.0.1", 0), max_connections=10_000).start()
        base = len(os.listdir("/proc/self/fd"))
        resource.setrlimit(resource.RLIMIT_NOFILE, (base + 40, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
        print(srv.port, flush=True)
        for line in sys.stdin:
            if line.startswith("cpu"):
                print(time.process_time(), flush=True)
            else:
                print(len(warnings), srv.accept_backoffs, len(srv.connections), flush=True)
        srv.stop()
    """)
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=child_env(), cwd=TESTS)
    clients: list[socket.socket] = []
    try:
        port = int(child.stdout.readline())

        def ask(what: str) -> list[str]:
            child.stdin.write(what + "\n")
            child.stdin.flush()
            return child.stdout.readline().split()
        clients = [socket.create_connection(("127.0.0.1", port)) for _ in range(80)]  # 40 wait in the backlog
        time.sleep(0.5)
        cpu = float(ask("cpu")[0])
        time.sleep(1.5)
        spent = float(ask("cpu")[0]) - cpu
        warnings, backoffs, connections = map(int, ask("stats"))
        assert spent < 0.5, spent                 # a spinning accept loop burns the 1.5 s
        assert warnings <= 3 and backoffs >= 1 and 20 < connections <= 45, (warnings, backoffs, connections)
        for sock in clients[:60]:
            sock.close()
        start = time.monotonic()
        with BlockingClient("127.0.0.1", port, timeout=10) as client:
            client.api_versions()
        assert time.monotonic() - start < 5.0
    finally:
        for sock in clients:
            sock.close()
        out, err = child.communicate("", timeout=60)
    assert child.returncode == 0, err[-3000:]


def test_max_connections_pauses_accepting_until_one_closes(log_dir):
    with Server([str(log_dir)], listen=("127.0.0.1", 0), max_connections=3) as srv:
        held = [socket.create_connection(("127.0.0.1", srv.port)) for _ in range(3)]
        wait_for(lambda: len(srv.connections) == 3)
        late = socket.create_connection(("127.0.0.1", srv.port))   # waits in the backlog
        time.sleep(0.2)
        assert len(srv.connections) == 3
        held.pop().close()
        wait_for(lambda: len(srv.connections) == 3 and not any(c.closed for c in srv.connections))
        late.sendall(b"")
        with pytest.raises(socket.timeout):
            late.settimeout(0.2)
            late.recv(1)                           # accepted, open, waiting for a request
        for sock in held + [late]:
            sock.close()
