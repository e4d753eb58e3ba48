"""A longer random campaign against the ring and its fetch iterator (hostile streams, mutated
FetchResponses, random chunking through feed() and the BufferedProtocol path, random release
order).  Every case must end in a result or a KafkaCodecError; run it under the sanitizer build
(KAFKACODEC_SANITIZE=address,undefined, LD_PRELOAD=libasan) to catch memory errors.

    python scripts/fuzz_ring.py [seed] [seconds]
"""
import os
import random
import struct
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from kafkacodec import ResponseRingBuffer, KafkaCodecError
from fetch_fixtures import build_fetch_response, build_records
rng = random.Random(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
seeds = [build_fetch_response(v, 1, [("t", [(0, build_records([(i, b"k", rng.randbytes(rng.randint(0, 200)), [("h", b"x")]) for i in range(rng.randint(1, 9))], compression=c))])]) for v, c in ((4, 0), (12, 1), (12, 2), (11, 3), (13, 4), (16, 0))]
deadline = time.time() + float(sys.argv[2] if len(sys.argv) > 2 else 60)
cases = 0
while time.time() < deadline:
    cases += 1
    frames = []
    for _ in range(rng.randint(1, 30)):
        if rng.random() < 0.5:
            f = bytearray(rng.choice(seeds))
            for _ in range(rng.randint(0, 3)):
                f[rng.randrange(4, len(f))] = rng.randrange(256)
            frames.append(bytes(f))
        else:
            body = rng.randbytes(rng.randint(0, 300))
            frames.append(struct.pack(">i", len(body)) + body)
    stream = b"".join(frames)
    if rng.random() < 0.05:
        stream += rng.randbytes(rng.randint(1, 20))       # garbage tail / bad sizes
    cap = max(len(f) for f in frames) + 5 + rng.randint(0, 800)
    ring = ResponseRingBuffer(cap)
    held = []
    pos = 0
    try:
        stall = 0
        while pos < len(stream) and stall < 3:
            n = rng.randint(1, 900)
            if rng.random() < 0.5:
                acc = ring.feed(stream[pos:pos + n])
            else:
                if ring.writable() == 0:
                    acc = 0
                else:
                    w = ring.get_buffer(-1)
                    acc = min(len(w), n, len(stream) - pos)
                    w[:acc] = stream[pos:pos + acc]
                    del w
                    ring.buffer_updated(acc)
            pos += acc
            while (r := ring.next_response()) is not None:
                held.append(r)
            if held and (acc == 0 or len(held) > rng.randint(0, 4)):
                r = held.pop(rng.randrange(len(held)) if rng.random() < 0.3 else 0)
                try:
                    for rec in r.records(rng.choice((4, 11, 12, 13, 16))):
                        rec.key_view, rec.value, rec.headers
                except KafkaCodecError:
                    pass
                r.release()
            stall = stall + 1 if acc == 0 and not held else 0
    except KafkaCodecError:
        pass
print("cases", cases)
