"""`kafkacodec serve` against the machine's limits, in one run (issue 16's performance goals).

    /work/venv/bin/python bench/bench_serve.py [--size-mb 512] [--consumers 50] [--rounds 3]
                                               [--only new,old,memory]

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
memory  peak memory of the server while N old consumers (raw Fetch v3 loops on their own
        connections, in a separate process) read the same log at once, against
        --max-conversion-memory + 64 MiB.  Anonymous memory (RssAnon, sampled every 5 ms) is the
        server's own; file pages it maps (RssFile, page cache) are reported apart.

The server runs as `kafkacodec serve` in its own process; clients run in this process or in
their own.  Linux only (/proc).  Not part of the test suite.
"""

from __future__ import annotations

import argparse
import os
import platform
import socket
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
    def __init__(self, log_dir: Path, *options: str):
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen([sys.executable, "-m", "kafkacodec.cli", "serve", str(log_dir),
                                      "--listen", "127.0.0.1:0", *options],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        line = self.proc.stdout.readline()           # "listening on HOST:PORT"
        if not line.startswith("listening on "):
            raise RuntimeError(f"serve did not start: {line}{self.proc.stderr.read()}")
        self.port = int(line.strip().rsplit(":", 1)[1])
        self.bootstrap = f"127.0.0.1:{self.port}"

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
        self.proc.wait(30)


# --- new clients: confluent-kafka vs the loopback sendfile limit -------------------------------------
def sendfile_limit(path: Path) -> float:
    """Bytes/s of one sendfile() of the file into a loopback socket, read by recv_into."""
    size = path.stat().st_size
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def send() -> None:
        conn, _ = listener.accept()
        with conn, open(path, "rb") as file:
            done = 0
            while done < size:
                done += os.sendfile(conn.fileno(), file.fileno(), done, size - done)

    sender = threading.Thread(target=send)
    sender.start()
    buffer = bytearray(4 << 20)
    view = memoryview(buffer)
    with socket.create_connection(("127.0.0.1", port)) as sock:
        started = time.perf_counter()
        got = 0
        while got < size:
            n = sock.recv_into(view)
            if not n:
                break
            got += n
        elapsed = time.perf_counter() - started
    sender.join()
    listener.close()
    return size / elapsed


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
        for msg in consumer.consume(1000, 0.1):       # returns once 1000 are there (or 100 ms)
            if msg.error():
                raise RuntimeError(msg.error())
            last = msg.offset()
    elapsed = time.perf_counter() - started
    after = thread_cpu()
    spent = {name: after[name] - before.get(name, 0.0) for name in after}
    spent["all"] = process_cpu() - cpu
    consumer.close()
    return size / elapsed, spent


def raw_fetch_rate(port: int, topic: str, size: int, fetch_bytes: int = 16 << 20) -> float:
    """Segment bytes/s of a minimal client: Fetch v4 requests of `fetch_bytes`, each response
    read into one reused buffer (what the server alone achieves, without librdkafka)."""
    from kafkacodec.protocol import decode_fetch_response, encode_fetch_request

    buffer = bytearray(fetch_bytes + (1 << 20))
    view = memoryview(buffer)
    offset = done = 0
    with socket.create_connection(("127.0.0.1", port)) as sock:
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
            pos = last = 0
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mb", type=int, default=512)
    parser.add_argument("--consumers", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--conversion-memory-mb", type=int, default=64)
    parser.add_argument("--only", default="new,old,memory")
    args = parser.parse_args()
    parts = set(args.only.split(","))
    size = args.size_mb << 20
    print(f"# {platform.platform()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}, "
          f"Python {platform.python_version()}")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        if "new" in parts:
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
