"""The fuzz harness inside the test suite: every registered target runs over the seed corpus
(made here by fuzz/make_corpus.py), over a few hundred deterministic mutations of it, and over
the committed regression inputs. Contract: a result or a KafkaCodecError, nothing else.
Targets whose entry point is not in this build are skipped with the missing name."""

from __future__ import annotations

import importlib.util
import random
import sys
from pathlib import Path

import pytest

import kafkacodec

FUZZ = Path(__file__).resolve().parent.parent / "fuzz"
if not (FUZZ / "fuzz_targets.py").exists():
    pytest.skip("fuzz/ not found beside tests/", allow_module_level=True)


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"_kc_{name}", FUZZ / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


fuzz_targets = _load("fuzz_targets")
make_corpus = _load("make_corpus")
MUTATIONS_PER_TARGET = 300


@pytest.fixture(scope="session")
def corpus(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("corpus")
    counts = make_corpus.main(out)
    assert counts["records"] >= 50 and counts["fetch"] > 0 and counts["compressed"] > 0
    return out


def test_harness_accepts_only_kafka_codec_errors(monkeypatch):
    def raises(exc):
        def target(data: bytes) -> None:
            raise exc
        return target

    Target = fuzz_targets.Target
    monkeypatch.setitem(fuzz_targets.ALL_TARGETS, "_codec_error",
                        Target(raises(kafkacodec.CorruptRecordError("bad", position=3)), "records"))
    monkeypatch.setitem(fuzz_targets.ALL_TARGETS, "_value_error",
                        Target(raises(ValueError("not ours")), "records"))
    fuzz_targets.check_one("_codec_error", b"x")  # a valid outcome
    with pytest.raises(ValueError):
        fuzz_targets.check_one("_value_error", b"x")
    assert fuzz_targets.availability("_value_error") is None


def test_fix_crcs_makes_corrupted_checksums_valid(corpus):
    from kafka.record import MemoryRecords as KpMemoryRecords

    seed = next(p.read_bytes() for p in sorted((corpus / "records").iterdir()))
    broken = bytearray(seed)
    broken[20] ^= 0xFF  # inside the checksum of the first entry (v2: crc, v0/v1: after it)
    fixed = fuzz_targets.fix_crcs(bytes(broken))
    batch = KpMemoryRecords(fixed).next_batch()
    assert batch is not None and batch.validate_crc()


@pytest.mark.parametrize("name", list(fuzz_targets.TARGETS))
def test_target_on_corpus_and_mutations(name, corpus, monkeypatch):
    why = fuzz_targets.availability(name)
    if why:
        pytest.skip(why)
    monkeypatch.setattr(fuzz_targets, "CORPUS", corpus)
    seeds = fuzz_targets.load_seeds(name)
    assert seeds, f"no seeds for {name} (kind {fuzz_targets.TARGETS[name].kind})"
    regressions = fuzz_targets.REGRESSIONS / name
    if regressions.is_dir():
        seeds += [p.read_bytes() for p in sorted(regressions.iterdir()) if p.is_file()]
    rng = random.Random(name)
    inputs = seeds + [fuzz_targets.mutate(rng.choice(seeds), rng)
                      for _ in range(MUTATIONS_PER_TARGET)]
    inputs += [seed[:cut] for seed in seeds[:5] for cut in range(0, min(len(seed), 80), 7)]
    for data in inputs:
        try:
            fuzz_targets.check_one(name, data)
        except Exception as error:
            raise AssertionError(f"{name}: {type(error).__name__}: {error} "
                                 f"on input {data[:64].hex()}... ({len(data)} bytes)") from error

