"""`kafkacodec serve` against the machine's limits, in one run (issue 16's performance goals).

    /work/venv/bin/python bench/bench_serve.py [--size-mb 512] [--consumers 50] [--rounds 3]
                                               [--only new,old,memory,tls] [--ktls-python PY]

new     bytes/s a confluent-kafka consumer reads through `serve` (Fetch v4+: sendfile of the
        segment ranges), against the loopback sendfile limit measured in the same run: one
        thread sendfile()s the same segment file into a loopback socket, another recv()s it
        into a reused 4 MiB buffer.  Goal: >= 70% of the limit.  Bytes are segment bytes.
        The consumer is configured as a user after throughput would (CONSUMER, the best of
        the settings tried, docs/serve.md) and drained with consume(1000) batches; the
        default-sized fetches of the first version of this benchmark (16 MiB per partition)
        are measured too.  Printed with each figure: the CPU seconds of the server process
        (/proc/PID/stat), of the consumer's threads (librdkafka's broker thread, which
        receives and parses, and the Python thread that consume()s), of the sendfile limit's
        two threads, and a minimal Fetch v4 client's rate with 16 MiB and with 4 MiB (the
        consumer's) fetches: what the server achieves without librdkafka.
old     down-conversion to magic 1 for kafka-python at Fetch v3 (api_version (0, 10, 1)), an
        uncompressed log of 1 KiB records in 16 KiB producer batches.  kafka-python decodes every
        record in Python and is the bottleneck (the wall-clock rate is its speed, not ours), so
        the figure is input bytes per CPU second of the server process (/proc/PID/stat), on one
        core (the server converts on its single network thread).  Goal: >= 1 GB/s.
tls     the same log through `serve` over a PLAINTEXT and an SSL listener of one server (a
        broker properties file, --config; trustme certificates), confluent-kafka (CONSUMER
        settings) and the minimal client over each, each round starting one mode later: bytes/s and
        the server's CPU seconds per GB for plaintext sendfile, TLS as serve sends it on this
        machine (without kernel TLS: each range pread into a 256 KiB buffer and encrypted by
        ssl in user space) and kernel TLS where it works (serve then sendfile()s and the kernel
        encrypts; --ktls-python: a Python 3.12+ with ssl.OP_ENABLE_KTLS and kafkacodec built
        for it).  Whether kernel TLS works is probed step by step (the kernel's `tls` ULP on a
        socket, OP_ENABLE_KTLS, the kernel holding the send keys after a handshake) and the
        row says why not.  Limits of the same run: sendfile into a loopback socket, and pread
        + SSLSocket.send (user-space TLS without serve), with the sending thread's CPU per GB.
        The cipher: what confluent-kafka's settings negotiate with serve's server context.
        Goal: kernel TLS >= 80% of plaintext sendfile.
memory  peak memory of the server while N old consumers (raw Fetch v3 loops on their own
        connections, in a separate process) read the same log at once, against
        --max-conversion-memory + 64 MiB.  Anonymous memory (RssAnon, sampled every 5 ms) is the
        server's own; file pages it maps (RssFile, page cache) are reported apart.

The server runs as `kafkacodec serve` in its own process; clients run in this process or in
their own.  Linux only (/proc).  Not part of the test suite.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import socket
import ssl
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from kafkacodec import MemoryRecordsBuilder  # noqa: E402


# --- data -----------------------------------------------------------------------------------------
def write_topic(root: Path, topic: str, size: int, record: int, batch: int) -> int:
    """An uncompressed v2 log of `record`-byte values in `batch`-byte batches; its size."""
    directory = root / f"{topic}-0"
    directory.mkdir(parents=True)
    value = os.urandom(record)
    per_batch = max(1, batch // (record + 20))
    written, offset = 0, 0
    with open(directory / "00000000000000000000.log", "wb") as out:
        while written < size:
            builder = MemoryRecordsBuilder(magic=2, compression="none", base_offset=offset)
            for i in range(per_batch):
                builder.append(1_700_000_000_000 + offset + i, b"%012d" % (offset + i), value, [])
            data = builder.build()
            out.write(data)
            written += len(data)
            offset += per_batch
    return written


# --- the server process -------------------------------------------------------------------------------
class ServeProcess:
    """`kafkacodec serve` in a child process, importing kafkacodec from `code` (default: this
    checkout; bench_net_ab.py passes another tree) under `python`.  With `listeners` (names of a
    --config file's listeners) their ports are read from the startup lines."""

    def __init__(self, log_dir: Path | None, *options: str, code: Path = ROOT, python: str = sys.executable,
                 listeners: tuple[str, ...] = ()):
        env = {**os.environ, "PYTHONPATH": str(code)}
        listen = [] if "--config" in options else ["--listen", "127.0.0.1:0"]
        directories = [] if log_dir is None else [str(log_dir)]    # (None: a gateway, --upstream)
        self.stderr = tempfile.TemporaryFile()        # a pipe nobody reads could fill and block it
        self.proc = subprocess.Popen([python, "-m", "kafkacodec.cli", "serve", *directories, *listen, *options],
                                     stdout=subprocess.PIPE, stderr=self.stderr, text=True, env=env, cwd=code)
        line = self.proc.stdout.readline()           # "listening on HOST:PORT"
        if not line.startswith("listening on "):
            self.proc.wait(30)
            self.stderr.seek(0)
            raise RuntimeError(f"serve did not start: {line}{self.stderr.read().decode(errors='replace')}")
        self.port = int(line.strip().rsplit(":", 1)[1])
        self.bootstrap = f"127.0.0.1:{self.port}"
        # "listener NAME PROTOCOL HOST:PORT: advertised as ..., sending segments with HOW"
        self.ports: dict[str, int] = {}
        self.sending: dict[str, str] = {}
        while len(self.ports) < len(listeners):
            words = self.proc.stdout.readline().split()
            if words[:1] != ["listener"]:
                raise RuntimeError(f"serve's startup lines name no listener: {words}")
            self.ports[words[1]] = int(words[3].rstrip(":").rsplit(":", 1)[1])
            self.sending[words[1]] = " ".join(words[words.index("with") + 1:]).split(",")[0]

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def status(self, field: str) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
        raise KeyError(field)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()
        self.stderr.close()


# --- new clients: confluent-kafka vs the loopback sendfile limit -------------------------------------
# The sending side of loopback_limit, in a process of its own (as serve is: no GIL shared with
# the receiving side): argv path, PEM keystore ("" for plaintext); prints its port, then its CPU.
LOOPBACK_SENDER = r"""
import os, socket, ssl, sys, time
path, keystore = sys.argv[1], sys.argv[2]
listener = socket.create_server(("127.0.0.1", 0))
print(listener.getsockname()[1], flush=True)
conn, _ = listener.accept()
started = time.thread_time()
if keystore:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(keystore)
    conn = context.wrap_socket(conn, server_side=True)
size = os.path.getsize(path)
with conn, open(path, "rb") as file:
    done = 0
    if not keystore:
        while done < size:
            done += os.sendfile(conn.fileno(), file.fileno(), done, size - done)
    else:
        buffer = memoryview(bytearray(256 << 10))
        while done < size:
            got = os.preadv(file.fileno(), [buffer], done)
            conn.sendall(buffer[:got])
            done += got
print(time.thread_time() - started, flush=True)
"""


def loopback_limit(path: Path, tls: tuple[Path, ssl.SSLContext] | None = None) -> dict[str, float]:
    """A process sends the file into a loopback socket, this one recv_into()s it into a reused
    4 MiB buffer: {"rate": bytes/s, "send_cpu", "recv_cpu": each side's CPU seconds}.  Plain:
    os.sendfile (zero copy).  With `tls` (the server's PEM keystore, a client context): what
    serve does without kernel TLS, pread into one 256 KiB buffer
    (kafkacodec.net.pieces.FILE_BUFFER_BYTES) and SSLSocket.send, decrypted by
    SSLSocket.recv_into: user-space TLS on this machine."""
    size = path.stat().st_size
    sender = subprocess.Popen([sys.executable, "-c", LOOPBACK_SENDER, str(path), str(tls[0]) if tls else ""],
                              stdout=subprocess.PIPE, text=True)
    try:
        port = int(sender.stdout.readline())
        buffer = bytearray(4 << 20)
        view = memoryview(buffer)
        with socket.create_connection(("127.0.0.1", port)) as raw:
            cpu = time.thread_time()
            sock = tls[1].wrap_socket(raw, server_hostname="127.0.0.1") if tls is not None else raw
            started = time.perf_counter()
            got = 0
            while got < size:
                n = sock.recv_into(view)
                if not n:
                    break
                got += n
            elapsed = time.perf_counter() - started
            recv_cpu = time.thread_time() - cpu
        send_cpu = float(sender.stdout.readline())
    finally:
        if sender.poll() is None:
            sender.kill()                         # (done, or failed: nothing more to wait for)
        sender.wait()
        sender.stdout.close()
    if got < size:
        raise RuntimeError(f"the loopback limit read {got} of {size} bytes")
    return {"rate": size / elapsed, "send_cpu": send_cpu, "recv_cpu": recv_cpu}


def sendfile_limit(path: Path) -> float:
    """Bytes/s of one sendfile() of the file into a loopback socket, read by recv_into."""
    return loopback_limit(path)["rate"]


# What a user after throughput sets (librdkafka 2.16; the best of those tried on the dev VM,
# docs/serve.md): 4 MiB per partition fetch (librdkafka keeps one fetch in flight per broker and
# parses a response before asking again: larger fetches were slower, smaller ones cost more
# requests), a prefetch queue of four fetches with no back-off once it is full, a short wait at
# the end of the log.  check.crcs is false by default.
CONSUMER = {"fetch.max.bytes": 16 << 20, "max.partition.fetch.bytes": 4 << 20, "fetch.wait.max.ms": 10,
            "queued.max.messages.kbytes": 16 << 10, "fetch.queue.backoff.ms": 0, "check.crcs": False}
# the first version of this benchmark: 16 MiB per partition fetch
LARGE_FETCHES = {"fetch.max.bytes": 64 << 20, "max.partition.fetch.bytes": 16 << 20,
                 "socket.receive.buffer.bytes": 8 << 20, "fetch.wait.max.ms": 100}


def thread_cpu() -> dict[str, float]:
    """CPU seconds of this process's threads by name (librdkafka's are rdk:broker<N>, rdk:main...)."""
    out: dict[str, float] = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            name = Path(f"/proc/self/task/{tid}/comm").read_text().strip()
            fields = Path(f"/proc/self/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue                                   # a thread that ended meanwhile
        name = "rdk:broker" if name.startswith("rdk:broker") else name
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return out


def process_cpu() -> float:
    usage = os.times()
    return usage.user + usage.system


def confluent_rate(bootstrap: str, topic: str, size: int, config: dict[str, object]) -> tuple[float, dict[str, float]]:
    """Segment bytes/s of one confluent-kafka consumer reading the whole partition, and the CPU
    seconds its threads spent (by name; "all": the whole process)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False,
                         "isolation.level": "read_uncommitted", **config})
    consumer.assign([TopicPartition(topic, 0, 0)])
    _, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    before, cpu = thread_cpu(), process_cpu()
    started = time.perf_counter()
    last = -1
    while last < high - 1:
        # returns once that many are there (or after 100 ms): never more than are left, or
        # the last call would wait out its 100 ms for records that do not exist
        for msg in consumer.consume(min(1000, high - 1 - last), 0.1):
            if msg.error():
                raise RuntimeError(msg.error())
            last = msg.offset()
    elapsed = time.perf_counter() - started
    after = thread_cpu()
    spent = {name: after[name] - before.get(name, 0.0) for name in after}
    spent["all"] = process_cpu() - cpu
    consumer.close()
    return size / elapsed, spent


def raw_fetch_rate(port: int, topic: str, size: int, fetch_bytes: int = 16 << 20,
                   tls: ssl.SSLContext | None = None) -> float:
    """Segment bytes/s of a minimal client: Fetch v4 requests of `fetch_bytes`, each response
    read into one reused buffer (what the server alone achieves, without librdkafka); over TLS
    with the client context `tls`."""
    from kafkacodec.protocol import decode_fetch_response, encode_fetch_request

    buffer = bytearray(fetch_bytes + (1 << 20))
    view = memoryview(buffer)
    offset = done = 0
    with socket.create_connection(("127.0.0.1", port)) as raw:
        sock = tls.wrap_socket(raw, server_hostname="127.0.0.1") if tls is not None else raw
        started = time.perf_counter()
        while done < size:
            sock.sendall(encode_fetch_request([(topic, [(0, offset, fetch_bytes)])], api_version=4,
                                              max_wait_ms=0))
            got = 0
            while got < 4:
                got += sock.recv_into(view[got:4])
            frame = struct.unpack(">i", buffer[:4])[0]
            got = 0
            while got < frame:
                got += sock.recv_into(view[got:frame])
            part = decode_fetch_response(view[:frame], 4).responses[0].partitions[0]
            records = part.records
            pos, last = 0, offset - 1             # (nothing complete: ask for the same offset again)
            while len(records) - pos >= 12:
                base, length = struct.unpack_from(">qi", records, pos)
                if pos + 12 + length > len(records):
                    break
                last = base + struct.unpack_from(">i", records, pos + 23)[0]   # LastOffsetDelta
                pos += 12 + length
            done += pos
            offset = last + 1
        elapsed = time.perf_counter() - started
    return done / elapsed


# --- old clients: kafka-python at Fetch v3 -------------------------------------------------------
def kafka_python_v3(bootstrap: str, topic: str) -> int:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, api_version=(0, 10, 1), enable_auto_commit=False,
                             max_partition_fetch_bytes=8 << 20, fetch_max_bytes=64 << 20, check_crcs=False)
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek_to_end(tp)
    end = consumer.position(tp)
    consumer.seek(tp, 0)
    records = 0
    while consumer.position(tp) < end:
        for batch in consumer.poll(timeout_ms=1000, max_records=100000).values():
            records += len(batch)
    consumer.close()
    return records


# --- memory: N old consumers at once (a separate process) ----------------------------------------------
CLIENTS = r'''
import socket, struct, sys, threading
port, topic, consumers, end = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])

def request(offset):
    body = struct.pack(">iiii", -1, 500, 1, 64 << 20) + struct.pack(">i", 1)
    body += struct.pack(">h", len(topic)) + topic.encode() + struct.pack(">i", 1)
    body += struct.pack(">iqi", 0, offset, 8 << 20)
    header = struct.pack(">hhih", 1, 3, 1, -1)
    return struct.pack(">i", len(header) + len(body)) + header + body

def exactly(sock, n):
    buf = bytearray(n); view = memoryview(buf); got = 0
    while got < n:
        k = sock.recv_into(view[got:])
        if not k: raise ConnectionError
        got += k
    return buf

def last_offset(data):
    pos, last = 0, -1
    while len(data) - pos >= 17:
        offset, size = struct.unpack_from(">qi", data, pos)
        if size < 14 or pos + 12 + size > len(data): break
        last, pos = offset, pos + 12 + size
    return last

def consume():
    sock = socket.create_connection(("127.0.0.1", port))
    offset = 0
    while offset < end:
        sock.sendall(request(offset))
        data = exactly(sock, struct.unpack(">i", exactly(sock, 4))[0])
        # v3: correlation, throttle, [topic, [partition, error, hw, records]]
        pos = 8 + 4 + 2 + len(topic) + 4 + 4 + 2 + 8
        size = struct.unpack_from(">i", data, pos)[0]
        last = last_offset(bytes(data[pos + 4:pos + 4 + size]))
        offset = max(offset, last + 1)
    sock.close()

threads = [threading.Thread(target=consume) for _ in range(consumers)]
for t in threads: t.start()
for t in threads: t.join()
'''


def old_consumers_memory(server: ServeProcess, topic: str, consumers: int, end: int) -> dict[str, int]:
    baseline = {f: server.status(f) for f in ("RssAnon", "RssFile", "VmHWM")}
    peak = dict(baseline)
    clients = subprocess.Popen([sys.executable, "-c", CLIENTS, str(server.port), topic, str(consumers), str(end)])
    while clients.poll() is None:
        for f in ("RssAnon", "RssFile"):
            peak[f] = max(peak[f], server.status(f))
        time.sleep(0.005)
    if clients.returncode != 0:
        raise RuntimeError("the old consumers failed")
    peak["VmHWM"] = server.status("VmHWM")
    return {f"{k}_baseline": v for k, v in baseline.items()} | {f"{k}_peak": v for k, v in peak.items()}


def new_clients(server: ServeProcess, segment: Path, size: int, rounds: int) -> None:
    """Each round measures, one after the other, the sendfile limit, confluent-kafka configured
    as CONSUMER, then with LARGE_FETCHES, then the minimal client (16 MiB, then 4 MiB fetches);
    the best of each is compared (the machine's load moves all of them) and every round's
    figures are printed."""
    best = {"limit": 0.0, "confluent": 0.0, "large fetches": 0.0, "minimal": 0.0, "minimal 4 MiB": 0.0}
    for i in range(rounds):
        load = os.getloadavg()[0]
        cpu = process_cpu()
        limit = sendfile_limit(segment)
        limit_cpu = process_cpu() - cpu
        line = [f"round {i + 1}, load {load:.1f}: sendfile limit {limit / 1e9:.2f} GB/s (CPU {limit_cpu:.2f} s)"]
        best["limit"] = max(best["limit"], limit)
        for name, config in (("confluent", CONSUMER), ("large fetches", LARGE_FETCHES)):
            served = server.cpu_seconds()
            rate, spent = confluent_rate(server.bootstrap, "new", size, config)
            served = server.cpu_seconds() - served
            best[name] = max(best[name], rate)
            line.append(f"{name} {rate / 1e9:.2f} GB/s = {100 * rate / limit:.0f}% (CPU: server {served:.2f} s, "
                        f"client {spent['all']:.2f} s of which librdkafka's broker thread "
                        f"{spent.get('rdk:broker', 0.0):.2f} s, Python {spent.get('python', 0.0):.2f} s)")
        for name, fetch_bytes in (("minimal", 16 << 20), ("minimal 4 MiB", 4 << 20)):
            served, cpu = server.cpu_seconds(), process_cpu()
            raw = raw_fetch_rate(server.port, "new", size, fetch_bytes)
            best[name] = max(best[name], raw)
            line.append(f"minimal client, {fetch_bytes >> 20} MiB fetches {raw / 1e9:.2f} GB/s = "
                        f"{100 * raw / limit:.0f}% (CPU: server {server.cpu_seconds() - served:.2f} s, client "
                        f"{process_cpu() - cpu:.2f} s)")
        print("  " + ";\n    ".join(line), flush=True)
    limit = best["limit"]
    print(f"new clients: confluent-kafka via serve {best['confluent'] / 1e9:.2f} GB/s, loopback sendfile limit "
          f"{limit / 1e9:.2f} GB/s: {100 * best['confluent'] / limit:.0f}% (goal >= 70%), best of {rounds}; "
          f"{size >> 20} MiB, 16 KiB records, 1 MiB batches; consumer: {CONSUMER}, consume(1000); with 16 MiB "
          f"fetches {best['large fetches'] / 1e9:.2f} GB/s ({100 * best['large fetches'] / limit:.0f}%); a minimal "
          f"Fetch v4 client reading 16 MiB responses into one buffer {best['minimal'] / 1e9:.2f} GB/s "
          f"({100 * best['minimal'] / limit:.0f}%), 4 MiB responses (the consumer's size) "
          f"{best['minimal 4 MiB'] / 1e9:.2f} GB/s ({100 * best['minimal 4 MiB'] / limit:.0f}%)")


# --- TLS: serve over an SSL listener: user-space TLS, kernel TLS ------------------------------------
# Run with the Python that would serve (--ktls-python): whether kernel TLS can work here.  OpenSSL
# (ssl.OP_ENABLE_KTLS, Python 3.12+) first sets the kernel's "tls" upper-layer protocol on the
# socket (setsockopt TCP_ULP), then gives it the keys (setsockopt SOL_TLS TLS_TX); the kernel
# encrypts from then on, and getsockopt(SOL_TLS, TLS_TX) answers.  Each step is tried here.
KTLS_PROBE = r"""
import errno, gzip, json, socket, ssl, sys, threading
keystore, ca = sys.argv[1], sys.argv[2]
out = {"python": sys.version.split()[0], "openssl": ssl.OPENSSL_VERSION,
       "op_enable_ktls": hasattr(ssl, "OP_ENABLE_KTLS")}
try:
    out["available_ulp"] = open("/proc/sys/net/ipv4/tcp_available_ulp").read().split()
except OSError as exc:
    out["available_ulp"] = None
try:
    with gzip.open("/proc/config.gz", "rt") as config:
        out["config_tls"] = next((l.strip() for l in config if l.startswith(("CONFIG_TLS=", "# CONFIG_TLS "))), None)
except OSError:
    out["config_tls"] = None
def pair():
    listener = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(listener.getsockname())
    server = listener.accept()[0]
    listener.close()
    return server, client
server, client = pair()
try:
    server.setsockopt(socket.IPPROTO_TCP, 31, b"tls")          # TCP_ULP
    out["tcp_ulp_tls"] = "ok"
except OSError as exc:
    out["tcp_ulp_tls"] = f"{errno.errorcode.get(exc.errno, exc.errno)} ({exc.strerror})"
server.close(); client.close()
if out["op_enable_ktls"]:
    sctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    sctx.load_cert_chain(keystore)
    sctx.options |= ssl.OP_ENABLE_KTLS
    cctx = ssl.create_default_context(cafile=ca)
    server, client = pair()
    done = threading.Thread(target=lambda: cctx.wrap_socket(client, server_hostname="127.0.0.1").recv(1))
    done.start()
    tls = sctx.wrap_socket(server, server_side=True)
    out["cipher"] = tls.version() + " " + tls.cipher()[0]
    try:
        out["tls_tx"] = "ok" if tls.getsockopt(282, 1, 4) != bytes(4) else "not set"   # SOL_TLS, TLS_TX
    except OSError as exc:
        out["tls_tx"] = f"{errno.errorcode.get(exc.errno, exc.errno)} ({exc.strerror})"
    tls.send(b"x")
    done.join(10)
    tls.close()
print(json.dumps(out))
"""


def kernel_tls(python: str, keystore: Path, ca: Path) -> tuple[bool, str]:
    """(usable, why): whether `python` on this kernel gets kernel TLS for a server socket."""
    run = subprocess.run([python, "-c", KTLS_PROBE, str(keystore), str(ca)], capture_output=True, text=True,
                         timeout=60)
    if run.returncode != 0:
        return False, f"the probe failed under {python}: {run.stderr.strip()[-500:]}"
    probe = json.loads(run.stdout)
    facts = [f"/proc/sys/net/ipv4/tcp_available_ulp: {' '.join(probe['available_ulp'] or ['(none)'])}",
             f"setsockopt(TCP_ULP, \"tls\") on a connected socket: {probe['tcp_ulp_tls']}"]
    if probe["config_tls"]:
        facts.append(f"/proc/config.gz: {probe['config_tls']}")
    if not probe["op_enable_ktls"]:
        facts.append(f"Python {probe['python']} has no ssl.OP_ENABLE_KTLS (3.12+; --ktls-python)")
    else:
        facts.append(f"Python {probe['python']} with {probe['openssl']} and OP_ENABLE_KTLS: "
                     f"{probe['cipher']}, getsockopt(SOL_TLS, TLS_TX): {probe['tls_tx']}")
    usable = probe.get("tls_tx") == "ok"
    return usable, ("kernel TLS works: " if usable else "kernel TLS unavailable: ") + "; ".join(facts)


def make_pki(folder: Path) -> dict[str, Path]:
    """A CA and a server certificate for 127.0.0.1 (trustme): Kafka's PEM keystore (the key and
    its chain in one file) and the CA file clients trust."""
    import trustme

    folder.mkdir(parents=True, exist_ok=True)
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    paths = {"ca": folder / "ca.pem", "keystore": folder / "server.pem"}
    ca.cert_pem.write_to_path(str(paths["ca"]))
    paths["keystore"].write_bytes(cert.private_key_pem.bytes() + b"".join(b.bytes() for b in cert.cert_chain_pems))
    return paths


def librdkafka_cipher(properties: dict[str, str], client: dict[str, object]) -> str:
    """The TLS version and cipher a confluent-kafka consumer with `client`'s settings negotiates
    with serve's server context (kafkacodec.net.tls.server_context of the same properties):
    one handshake in this process (librdkafka does not log the cipher)."""
    from confluent_kafka import Consumer

    from kafkacodec.net.properties import BrokerSecurity
    from kafkacodec.net.tls import server_context

    context = server_context(BrokerSecurity.from_properties(properties), "SSL")
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(30)
    got: list[str] = []

    def accept() -> None:
        conn, _ = listener.accept()
        conn.settimeout(30)
        with context.wrap_socket(conn, server_side=True) as tls:
            got.append(f"{tls.version()} {tls.cipher()[0]}")

    thread = threading.Thread(target=accept)
    thread.start()
    consumer = Consumer({**client, "bootstrap.servers": f"127.0.0.1:{listener.getsockname()[1]}",
                         "group.id": "cipher", "logger": logging.getLogger("librdkafka")})
    try:
        consumer.list_topics(timeout=3)
    except Exception:
        pass                                  # the handshake was all we wanted
    thread.join(30)
    consumer.close()
    listener.close()
    return got[0] if got else "unknown (no handshake)"


def cpu_per_gb(seconds: float, size: int) -> float:
    return seconds / (size / 1e9)


def tls_clients(log_dir: Path, segment: Path, size: int, rounds: int, ktls_python: str) -> None:
    """plaintext sendfile, TLS as serve does it, kernel TLS where it works: confluent-kafka
    (CONSUMER settings) through `serve`, bytes/s and the server's CPU seconds per GB; the
    loopback limits of each (sendfile; pread + SSLSocket.send) with the sending thread's CPU per
    GB; a minimal Fetch v4 client over each.  Each round starts one mode later; medians are compared."""
    with tempfile.TemporaryDirectory() as work:
        _tls_clients(log_dir, Path(work), segment, size, rounds, ktls_python)


def _tls_clients(root: Path, work: Path, segment: Path, size: int, rounds: int, ktls_python: str) -> None:
    pki = make_pki(work / "pki")
    properties = {"listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0", "ssl.keystore.type": "PEM",
                  "ssl.keystore.location": str(pki["keystore"])}
    config = work / "serve.properties"
    config.write_text("".join(f"{k}={v}\n" for k, v in properties.items()))
    tls_client = {"security.protocol": "SSL", "ssl.ca.location": str(pki["ca"]),
                  "ssl.endpoint.identification.algorithm": "https"}
    client_context = ssl.create_default_context(cafile=str(pki["ca"]))
    cipher = librdkafka_cipher(properties, tls_client)
    ktls_usable, ktls_facts = kernel_tls(ktls_python, pki["keystore"], pki["ca"])
    print(f"  TLS: confluent-kafka negotiates {cipher} with serve's context; {ktls_facts}", flush=True)

    servers = {"serve": ServeProcess(root, "--config", str(config), listeners=("PLAINTEXT", "SSL"))}
    try:
        modes = {"plaintext sendfile": ("serve", "PLAINTEXT", {}), "TLS, " + servers["serve"].sending["SSL"]:
                 ("serve", "SSL", tls_client)}
        if ktls_usable and servers["serve"].sending["SSL"] != "kernel TLS":
            try:
                servers["ktls"] = ServeProcess(root, "--config", str(config), python=ktls_python,
                                               listeners=("SSL",))
            except RuntimeError as exc:           # kafkacodec's modules not built for that Python
                ktls_usable, ktls_facts = False, f"kernel TLS unavailable: serve under {ktls_python}: {exc}"
            else:
                modes[f"TLS, {servers['ktls'].sending['SSL']} ({ktls_python})"] = ("ktls", "SSL", tls_client)
        results: dict[str, list[dict[str, float]]] = {}
        versus: dict[str, str] = {}           # each row's plaintext counterpart

        def record(name: str, plaintext: str, **figures: float) -> None:
            results.setdefault(name, []).append(figures)
            versus[name] = plaintext

        for i in range(rounds):
            load = os.getloadavg()[0]
            for name, tls in (("loopback limit: sendfile", None), ("loopback limit: pread + ssl send",
                                                                   (pki["keystore"], client_context))):
                limit = loopback_limit(segment, tls)
                record(name, "loopback limit: sendfile", rate=limit["rate"], load=load,
                       server=cpu_per_gb(limit["send_cpu"], size), client=cpu_per_gb(limit["recv_cpu"], size))
            # each round starts one mode later: no mode always first, or always after another
            order = list(modes.items())[i % len(modes):] + list(modes.items())[:i % len(modes)]
            for name, (which, listener, client) in order:
                server = servers[which]
                port = server.ports[listener]
                served = server.cpu_seconds()
                rate, spent = confluent_rate(f"127.0.0.1:{port}", "new", size, {**CONSUMER, **client})
                record(name, "plaintext sendfile", rate=rate, load=load,
                       server=cpu_per_gb(server.cpu_seconds() - served, size), client=cpu_per_gb(spent["all"], size))
                served, cpu = server.cpu_seconds(), process_cpu()
                raw = raw_fetch_rate(port, "new", size, 16 << 20, client_context if client else None)
                record(f"minimal client, {name}", "minimal client, plaintext sendfile", rate=raw, load=load,
                       server=cpu_per_gb(server.cpu_seconds() - served, size),
                       client=cpu_per_gb(process_cpu() - cpu, size))
            print(f"  round {i + 1}, load {load:.2f}: " + "; ".join(
                f"{name} {runs[-1]['rate'] / 1e6:.0f} MB/s" for name, runs in results.items()), flush=True)
    finally:
        for server in servers.values():
            server.stop()
    medians = {name: statistics.median(r["rate"] for r in runs) for name, runs in results.items()}
    print(f"TLS: {size >> 20} MiB of 16 KiB records in 1 MiB batches, {rounds} rounds, medians (min..max); "
          f"CPU seconds per GB of segment bytes; confluent-kafka {CONSUMER}")
    print(f"  {'mode':52} {'MB/s':>15} {'vs plain':>8} {'server CPU s/GB':>16} {'client CPU s/GB':>16}")
    for name, runs in results.items():
        rates = [r["rate"] for r in runs]
        rate = medians[name]
        ratio = f"{100 * rate / medians[versus[name]]:.0f}%"
        print(f"  {name:52} {rate / 1e6:6.0f} ({min(rates) / 1e6:.0f}..{max(rates) / 1e6:.0f}) {ratio:>8} "
              f"{statistics.median(r['server'] for r in runs):16.2f} "
              f"{statistics.median(r['client'] for r in runs):16.2f}")
    if not ktls_usable:
        print(f"  {'TLS, kernel TLS':52} unavailable: {ktls_facts.split(': ', 1)[1]}")
    print(f"  cipher: {cipher}; server CPU: serve's process (/proc), or the limit's sending process; goal: "
          f"kernel TLS >= 80% of plaintext sendfile")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mb", type=int, default=512)
    parser.add_argument("--consumers", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--conversion-memory-mb", type=int, default=64)
    parser.add_argument("--only", default="new,old,memory,tls")
    parser.add_argument("--ktls-python", default=sys.executable,
                        help="the Python serve runs under for kernel TLS (ssl.OP_ENABLE_KTLS: 3.12+, "
                             "with kafkacodec's modules built for it; default: this one)")
    args = parser.parse_args()
    parts = set(args.only.split(","))
    size = args.size_mb << 20
    print(f"# {platform.platform()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}, "
          f"Python {platform.python_version()}")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        if parts & {"new", "tls"}:
            new_size = write_topic(root, "new", size, 16 << 10, 1 << 20)
        if parts & {"old", "memory"}:
            old_size = write_topic(root, "old", size, 1 << 10, 16 << 10)
        server = ServeProcess(root, "--max-conversion-memory", f"{args.conversion_memory_mb}MiB")
        try:
            if "new" in parts:
                new_clients(server, root / "new-0" / "00000000000000000000.log", new_size, args.rounds)
            if "old" in parts:
                best_cpu = best_wall = 0.0
                for _ in range(args.rounds):
                    cpu, started = server.cpu_seconds(), time.perf_counter()
                    records = kafka_python_v3(server.bootstrap, "old")
                    wall, cpu = time.perf_counter() - started, server.cpu_seconds() - cpu
                    best_cpu = max(best_cpu, old_size / max(cpu, 1e-9))
                    best_wall = max(best_wall, old_size / wall)
                print(f"old clients: kafka-python at Fetch v3, {records} records of 1 KiB: server "
                      f"{best_cpu / 1e9:.2f} GB/s of input per CPU second (goal >= 1 GB/s); wall "
                      f"{best_wall / 1e6:.0f} MB/s, kafka-python's own speed (it decodes every record)")
        finally:
            server.stop()
        if "tls" in parts:
            tls_clients(root, root / "new-0" / "00000000000000000000.log", new_size, args.rounds,
                        args.ktls_python)
        if "memory" in parts:
            server = ServeProcess(root, "--max-conversion-memory", f"{args.conversion_memory_mb}MiB")
            try:
                from serve_support import old_fetch
                end = old_fetch(server.port, 3, "old", 0, 0)[1]     # warm up, and the high watermark
                m = old_consumers_memory(server, "old", args.consumers, end)
            finally:
                server.stop()
            grown = m["RssAnon_peak"] - m["RssAnon_baseline"]
            bound = (args.conversion_memory_mb + 64) << 20
            print(f"memory: {args.consumers} old consumers at once, --max-conversion-memory "
                  f"{args.conversion_memory_mb} MiB: anonymous memory grew {grown >> 20} MiB (peak RssAnon "
                  f"{m['RssAnon_peak'] >> 20} MiB), bound {bound >> 20} MiB: "
                  f"{'within' if grown <= bound else 'ABOVE'}; mapped file pages peak "
                  f"{m['RssFile_peak'] >> 20} MiB (page cache); VmHWM {m['VmHWM_peak'] >> 20} MiB")


if __name__ == "__main__":
    main()
