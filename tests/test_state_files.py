"""The state files of `serve` (one file per group's committed offsets) and `mirror` (the
checkpoint), all written and read through kafkacodec._statestore (a test of internals): a
damaged file of any kind is renamed aside (`<name>.damaged-<UTC time>`, never deleted), logged
and counted, and the previous good generation (`<name>.previous`) is used instead; any group
id maps to a file name of at most 255 bytes and comes back identical after a restart; the file
names of the earlier percent-encoded layout are still read."""

from __future__ import annotations

import builtins
import json
import logging
import os
import threading
import urllib.parse
from pathlib import Path

import pytest

from kafkacodec.serve.offsets import CommittedOffset, OffsetStore

GOOD = {"format": 1, "group": "good", "offsets": [
    {"topic": "t", "partition": 0, "offset": 5, "leader_epoch": -1, "metadata": "",
     "commit_timestamp": 1}]}


def _group(offsets: list) -> bytes:
    return json.dumps({"format": 1, "group": "bad", "offsets": offsets}).encode()


def _row(**change) -> dict:
    return {"topic": "t", "partition": 0, "offset": 1, "leader_epoch": -1, "metadata": "",
            "commit_timestamp": 1, **change}


# Every form of damage a group file may show, as the bytes found (None: not a regular file).
DAMAGE = {
    "not utf-8": b'{"format": 1, "group": "\xff\xfe"}',
    "not json": b"{nope",
    "empty": b"",
    "truncated": json.dumps(GOOD).encode()[:40],
    "a list": b"[1, 2, 3]",
    "a string": b'"offsets"',
    "unknown format": json.dumps({**GOOD, "format": 99, "group": "bad"}).encode(),
    "no format": json.dumps({"group": "bad", "offsets": []}).encode(),
    "missing offsets": json.dumps({"format": 1, "group": "bad"}).encode(),
    "group not a string": json.dumps({"format": 1, "group": 5, "offsets": []}).encode(),
    "offsets a dict": json.dumps({"format": 1, "group": "bad", "offsets": {"t": 1}}).encode(),
    "row a list": _group([[1, 2]]),
    "offset a float": _group([_row(offset=1.5)]),
    "offset a string": _group([_row(offset="7")]),
    "partition a bool": _group([_row(partition=True)]),
    "offset beyond a long": _group([_row(offset=1 << 63)]),
    "partition beyond an int": _group([_row(partition=1 << 31)]),
    "negative partition": _group([_row(partition=-1)]),
    "thousands of digits": b'{"format": 1, "group": "bad", "offsets": [{"offset": ' + b"9" * 5000 + b"}]}",
    "nested too deep": b"[" * 100_000 + b"]" * 100_000,
    "NaN": b'{"format": 1, "group": "bad", "offsets": [{"topic": "t", "partition": 0, "offset": NaN}]}',
    "metadata a number": _group([_row(metadata=3)]),
    "a directory": None,
    "a fifo": None,
    "unreadable": b"{}",
}


def _make_damage(path: Path, kind: str, monkeypatch) -> None:
    if kind == "a directory":
        path.mkdir()
        (path / "inside").write_text("x")
    elif kind == "a fifo":
        os.mkfifo(path)
    else:
        path.write_bytes(DAMAGE[kind])
    if kind == "unreadable":               # EACCES (the tests may run as root: chmod would not do)
        real_open, real_os_open = builtins.open, os.open

        def refuse(file, *args, **kwargs):
            if os.fspath(file) == os.fspath(path):
                raise PermissionError(13, "Permission denied", os.fspath(path))
            return real_open(file, *args, **kwargs)

        def refuse_os(file, *args, **kwargs):
            if os.fspath(file) == os.fspath(path):
                raise PermissionError(13, "Permission denied", os.fspath(path))
            return real_os_open(file, *args, **kwargs)

        monkeypatch.setattr(builtins, "open", refuse)
        monkeypatch.setattr(os, "open", refuse_os)


def _bounded(fn, path: Path, timeout: float = 10.0):
    """fn() in a thread, at most `timeout` seconds (a FIFO opened for reading blocks until a
    writer comes: one is opened when it does, so the thread never outlives the test)."""
    result: list = []
    errors: list = []

    def run() -> None:
        try:
            result.append(fn())
        except BaseException as exc:        # reported to the test below
            errors.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)
        worker.join(10)
        pytest.fail(f"reading the state directory blocked on {path.name}")
    if errors:
        raise errors[0]
    return result[0]


def _damaged_copies(directory: Path, name: str) -> list[Path]:
    return sorted(p for p in directory.iterdir() if p.name.startswith(name + ".damaged-"))


@pytest.mark.parametrize("kind", sorted(DAMAGE))
def test_a_damaged_group_file_is_quarantined_and_the_others_load(tmp_path, kind, monkeypatch, caplog):
    groups = tmp_path / "groups"
    groups.mkdir()
    (groups / "good.json").write_text(json.dumps(GOOD))         # the layout of earlier versions
    bad = groups / "bad.json"
    _make_damage(bad, kind, monkeypatch)
    caplog.set_level(logging.WARNING, "kafkacodec")
    store = _bounded(lambda: OffsetStore(str(tmp_path)), bad)
    monkeypatch.undo()
    assert store.get("good") == {("t", 0): CommittedOffset(5, -1, "", 1)}
    assert "bad" not in store.groups
    assert not os.path.lexists(bad)
    (moved,) = _damaged_copies(groups, "bad.json")
    if DAMAGE[kind] is not None:
        assert moved.read_bytes() == DAMAGE[kind]               # kept as it was, only renamed
    assert store.store.quarantined == 1
    (warning,) = [r.getMessage() for r in caplog.records                # ours (not a client's
                  if r.levelno == logging.WARNING and r.name.startswith("kafkacodec")]   # left by a test)
    assert str(bad) in warning and str(moved) in warning
    # the group commits again afterwards, and comes back
    store.commit("bad", {("t", 1): CommittedOffset(9)})
    assert OffsetStore(str(tmp_path)).get("bad")[("t", 1)].offset == 9


def test_damage_falls_back_to_the_previous_generation(tmp_path, caplog):
    store = OffsetStore(str(tmp_path))
    store.commit("g", {("t", 0): CommittedOffset(10)})
    store.commit("g", {("t", 0): CommittedOffset(20)})
    (current,) = [p for p in (tmp_path / "groups").iterdir() if p.name.endswith(".json")]
    assert OffsetStore(str(tmp_path)).get("g")[("t", 0)].offset == 20
    current.write_bytes(b'{"format": 1, "group": "g", "offs')       # damaged (e.g. by hand)
    caplog.set_level(logging.WARNING, "kafkacodec")
    again = OffsetStore(str(tmp_path))
    assert again.get("g")[("t", 0)].offset == 10                    # the generation before
    assert again.store.quarantined == 1 and _damaged_copies(tmp_path / "groups", current.name)
    assert any("previous" in r.getMessage() for r in caplog.records)


GROUP_IDS = [".hidden", ".", "..", "...", "/", "a/b", "%", "%2F", "a%2Fb", "\0", "nul\0in", " ",
             "", "~", "x" * 240, "y" * 1000, "组" * 30, "グループ" * 60, "Group", "group", "GROUP",
             "a.json", "g.json.previous", "g.damaged-1", "\ud800", "emoji 🎉", "CON", "trailing."]


def test_any_group_id_commits_and_comes_back_identical(tmp_path):
    store = OffsetStore(str(tmp_path))
    for i, group in enumerate(GROUP_IDS):
        store.commit(group, {("t", i): CommittedOffset(100 + i, 3, f"m{i}")})
    names = [p.name for p in (tmp_path / "groups").iterdir()]
    assert len(names) == len(GROUP_IDS)
    assert all(len(os.fsencode(n)) <= 255 for n in names)
    assert len({n.lower() for n in names}) == len(names)          # a case-insensitive file system too
    assert not [n for n in names if n.startswith(".")]            # never taken for a temporary file
    again = OffsetStore(str(tmp_path))
    assert sorted(again.groups) == sorted(GROUP_IDS)
    for i, group in enumerate(GROUP_IDS):
        assert again.get(group) == {("t", i): CommittedOffset(100 + i, 3, f"m{i}", store.get(group)[("t", i)].commit_timestamp)}


def test_files_of_the_percent_encoded_layout_are_read_and_migrated(tmp_path):
    """Earlier versions named a group's file urllib.parse.quote(group, safe="") + ".json";
    a group id starting with a dot was written that way but never read back."""
    groups = tmp_path / "groups"
    groups.mkdir()
    old = {"my group": 3, ".dotted": 4, "a/b": 5, "界": 6}
    for group, offset in old.items():
        body = {"format": 1, "group": group, "offsets": [_row(offset=offset)]}
        (groups / (urllib.parse.quote(group, safe="") + ".json")).write_text(json.dumps(body))
    store = OffsetStore(str(tmp_path))
    assert {g: store.get(g)[("t", 0)].offset for g in old} == old
    # now under the new names; the old files are kept aside, never read again
    again = OffsetStore(str(tmp_path))
    assert {g: again.get(g)[("t", 0)].offset for g in old} == old
    left = sorted(p.name for p in groups.iterdir() if p.name.endswith(".json"))
    assert len(left) == 4 and not any(urllib.parse.quote(g, safe="") + ".json" in left for g in old)


def test_a_write_failure_leaves_the_current_and_previous_files(tmp_path, monkeypatch):
    import kafkacodec._statestore as statestore

    store = OffsetStore(str(tmp_path))
    store.commit("g", {("t", 0): CommittedOffset(1)})
    store.commit("g", {("t", 0): CommittedOffset(2)})
    before = {p.name: p.read_bytes() for p in (tmp_path / "groups").iterdir()}

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(statestore, "atomic_output", full_disk)
    with pytest.raises(OSError):
        store.commit("g", {("t", 0): CommittedOffset(3)})
    assert {p.name: p.read_bytes() for p in (tmp_path / "groups").iterdir()} == before
    assert store.get("g")[("t", 0)].offset == 2


def test_a_state_file_larger_than_the_bound_is_neither_written_nor_read(tmp_path, monkeypatch):
    import kafkacodec._statestore as statestore

    monkeypatch.setattr(statestore, "MAX_STATE_FILE_BYTES", 1000)
    store = OffsetStore(str(tmp_path))
    with pytest.raises(OSError, match="larger than"):
        store.commit("g", {("t", p): CommittedOffset(p) for p in range(100)})
    assert store.get("g") == {}
    groups = tmp_path / "groups"
    (groups / "big.json").write_text(json.dumps({"format": 1, "group": "big", "offsets": [
        _row(partition=p) for p in range(100)]}))
    assert "big" not in OffsetStore(str(tmp_path)).groups
    assert _damaged_copies(groups, "big.json")


# --- the mirror's checkpoint ------------------------------------------------------------------
def test_the_checkpoint_keeps_its_previous_generation(tmp_path):
    from kafkacodec.mirror._checkpoint import Checkpoint

    cp = Checkpoint(str(tmp_path))
    assert cp.load("src", "dst") == {}
    cp.save({("a", 0): 5, ("a", 1): 6}, {"a": "a"})
    cp.save({("a", 0): 7, ("a", 1): 8}, {"a": "a"})
    assert Checkpoint(str(tmp_path)).load("src", "dst") == {("a", 0): 7, ("a", 1): 8}
    (tmp_path / "checkpoint.json").write_bytes(b"\0" * 100)        # e.g. after a disk fault
    again = Checkpoint(str(tmp_path))
    assert again.load("src", "dst") == {("a", 0): 5, ("a", 1): 6}
    assert again.store.quarantined == 1 and _damaged_copies(tmp_path, "checkpoint.json")


CHECKPOINT_DAMAGE = {
    "not json": b"{",
    "a list": b"[]",
    "positions a list": json.dumps({"format": 1, "positions": [1]}).encode(),
    "a position without a partition": json.dumps({"format": 1, "positions": {"a": 1}}).encode(),
    "a negative position": json.dumps({"format": 1, "positions": {"a/0": -5}}).encode(),
    "a position beyond a long": json.dumps({"format": 1, "positions": {"a/0": 1 << 64}}).encode(),
    "unknown format": json.dumps({"format": 7, "positions": {}}).encode(),
    "cluster id a number": json.dumps({"format": 1, "source_cluster": 1, "positions": {}}).encode(),
}


@pytest.mark.parametrize("kind", sorted(CHECKPOINT_DAMAGE))
def test_a_damaged_checkpoint_without_a_previous_one_is_refused_with_where_it_went(tmp_path, kind):
    from kafkacodec.mirror._checkpoint import Checkpoint, CheckpointDamagedError

    (tmp_path / "checkpoint.json").write_bytes(CHECKPOINT_DAMAGE[kind])
    with pytest.raises(CheckpointDamagedError) as info:
        Checkpoint(str(tmp_path)).load("src", "dst")
    (moved,) = _damaged_copies(tmp_path, "checkpoint.json")
    assert moved.read_bytes() == CHECKPOINT_DAMAGE[kind]
    assert str(tmp_path / "checkpoint.json") in str(info.value) and str(moved) in str(info.value)
    assert "--start" in str(info.value)
    # the next run starts without a checkpoint (the user chose --start)
    assert Checkpoint(str(tmp_path)).load("src", "dst") == {}


def test_a_file_where_the_groups_directory_belongs_is_quarantined(tmp_path):
    (tmp_path / "groups").write_text("not a directory")
    store = OffsetStore(str(tmp_path))
    assert store.store.quarantined == 1
    (moved,) = _damaged_copies(tmp_path, "groups")
    assert moved.read_text() == "not a directory"
    store.commit("g", {("t", 0): CommittedOffset(4)})
    assert OffsetStore(str(tmp_path)).get("g")[("t", 0)].offset == 4
