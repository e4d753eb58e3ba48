"""kafkacodec._atomic: the temporary-file-and-rename writer every command uses."""

import os
import stat
from pathlib import Path

import pytest

from kafkacodec._atomic import SameFileError, atomic_output, same_file


def test_writes_whole_file_and_keeps_mode(tmp_path):
    target = tmp_path / "out.log"
    target.write_bytes(b"old")
    os.chmod(target, 0o640)
    with atomic_output(target) as out:
        out.write(b"new content")
        assert target.read_bytes() == b"old"          # not visible before the rename
    assert target.read_bytes() == b"new content"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["out.log"]


def test_a_given_mode_holds_from_the_first_byte_and_replaces_the_old_mode(tmp_path):
    """A secrets file (the users file) is written with mode 0600: the temporary file has it
    before anything is written, whatever the umask, and it replaces a wider mode of the file it
    replaces (which atomic_output otherwise keeps)."""
    target = tmp_path / "users"
    old_umask = os.umask(0)
    try:
        with atomic_output(target, mode=0o600) as out:
            assert stat.S_IMODE(os.fstat(out.fileno()).st_mode) == 0o600
            out.write(b"hashes")
    finally:
        os.umask(old_umask)
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    os.chmod(target, 0o644)
    with atomic_output(target, mode=0o600) as out:
        assert stat.S_IMODE(os.fstat(out.fileno()).st_mode) == 0o600
        out.write(b"more hashes")
    assert stat.S_IMODE(target.stat().st_mode) == 0o600 and target.read_bytes() == b"more hashes"


def test_failure_keeps_target_and_removes_temporary(tmp_path):
    target = tmp_path / "out.log"
    target.write_bytes(b"precious")
    with pytest.raises(RuntimeError):
        with atomic_output(target) as out:
            out.write(b"half")
            raise RuntimeError("disk full")
    assert target.read_bytes() == b"precious"
    assert [p.name for p in tmp_path.iterdir()] == ["out.log"]


def test_failure_without_target_leaves_nothing(tmp_path):
    with pytest.raises(RuntimeError):
        with atomic_output(tmp_path / "new.log") as out:
            out.write(b"x")
            raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("link", ["same", "symlink", "hardlink"])
def test_refuses_output_that_is_the_input(tmp_path, link):
    src = tmp_path / "in.log"
    src.write_bytes(b"data")
    out = {"same": lambda: src,
           "symlink": lambda: (tmp_path / "s.log").symlink_to(src) or tmp_path / "s.log",
           "hardlink": lambda: os.link(src, tmp_path / "h.log") or tmp_path / "h.log"}[link]()
    assert same_file(src, out)
    with pytest.raises(SameFileError):
        with atomic_output(out, inputs=[src]):
            pytest.fail("opened for writing")
    assert src.read_bytes() == b"data"


def test_refuses_non_regular_targets_and_existing_without_overwrite(tmp_path):
    with pytest.raises(IsADirectoryError):
        with atomic_output(tmp_path):
            pass
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(FileExistsError):
        with atomic_output(fifo):
            pass
    assert stat.S_ISFIFO(fifo.stat().st_mode)            # not replaced
    existing = tmp_path / "e.log"
    existing.write_bytes(b"keep")
    with pytest.raises(FileExistsError):
        with atomic_output(existing, overwrite=False):
            pass
    assert existing.read_bytes() == b"keep"


def test_symlink_target_is_written_through_and_the_link_kept(tmp_path):
    real = tmp_path / "data" / "real.log"
    real.parent.mkdir()
    real.write_bytes(b"old")
    link = tmp_path / "link.log"
    link.symlink_to(real)
    with atomic_output(link) as out:
        out.write(b"new")
    assert link.is_symlink() and real.read_bytes() == b"new"
    assert sorted(p.name for p in real.parent.iterdir()) == ["real.log"]   # the temporary was beside it
    dangling = tmp_path / "dangling.log"
    dangling.symlink_to(tmp_path / "data" / "made.log")
    with atomic_output(dangling) as out:
        out.write(b"made")
    assert dangling.is_symlink() and (tmp_path / "data" / "made.log").read_bytes() == b"made"


def test_no_overwrite_holds_when_the_target_appears_meanwhile(tmp_path):
    """overwrite=False is enforced by the final step itself, not only by a check before it."""
    target = tmp_path / "out.log"
    with pytest.raises(FileExistsError):
        with atomic_output(target, overwrite=False) as out:
            out.write(b"mine")
            target.write_bytes(b"another writer's")
    assert target.read_bytes() == b"another writer's"
    assert [p.name for p in tmp_path.iterdir()] == ["out.log"]


def test_errors_name_the_directory_not_the_temporary_file(tmp_path):
    with pytest.raises(FileNotFoundError) as error:
        with atomic_output(tmp_path / "missing" / "out.log"):
            pytest.fail("opened for writing")
    assert error.value.filename == str(tmp_path / "missing")


def test_atomic_directory_new_target(tmp_path):
    from kafkacodec._atomic import atomic_directory

    target = tmp_path / "out"
    with atomic_directory(target) as tmp:
        assert os.path.dirname(tmp) == str(tmp_path) and not target.exists()
        (Path(tmp) / "part-0").write_bytes(b"x")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    assert (target / "part-0").read_bytes() == b"x"


def test_atomic_directory_keeps_what_it_did_not_write(tmp_path):
    from kafkacodec._atomic import atomic_directory

    target = tmp_path / "out"
    target.mkdir()
    (target / "notes.txt").write_text("mine")
    (target / "part-old").write_text("old")
    with pytest.raises(FileExistsError, match="not empty"):
        with atomic_directory(target):
            pass
    with pytest.raises(RuntimeError):
        with atomic_directory(target, overwrite=True, replaceable=lambda n: n.startswith("part-")) as tmp:
            (Path(tmp) / "part-new").write_text("new")
            raise RuntimeError("the writer failed")
    assert sorted(p.name for p in target.iterdir()) == ["notes.txt", "part-old"]
    with pytest.raises(FileExistsError, match="notes.txt"):
        with atomic_directory(target, overwrite=True, replaceable=lambda n: n.startswith("part-")) as tmp:
            (Path(tmp) / "notes.txt").write_text("clash")
    assert (target / "notes.txt").read_text() == "mine"
    with atomic_directory(target, overwrite=True, replaceable=lambda n: n.startswith("part-")) as tmp:
        (Path(tmp) / "part-new").write_text("new")
    assert sorted(p.name for p in target.iterdir()) == ["notes.txt", "part-new"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]          # nothing left beside it
    with pytest.raises(SameFileError):
        with atomic_directory(target / "sub", inputs=[target]):
            pass
