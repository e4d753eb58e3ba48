"""kafkacodec.net.users and `kafkacodec users`: the credentials file (hashes only, mode 0600,
atomic, errors naming the line), the servers authenticating against it, and the command that
edits it without the password ever in argv, output, errors or the file."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import threading

import pytest

from kafkacodec.cli import EXIT_DATA, EXIT_INPUT, EXIT_OK, EXIT_USAGE, main
from kafkacodec.errors import AuthenticationError
from kafkacodec.net import ScramClient, UsersFile, add_user, remove_user, server_for

PASSWORD = "correct horse SeCrEt"


def test_file_round_trip_and_authentication(tmp_path):
    path = tmp_path / "users"
    add_user(path, "alice", ["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"], PASSWORD)
    add_user(path, "CN=svc, O=Ex #1 é", ["SCRAM-SHA-256"], "other", iterations=8192)
    text = path.read_text()
    assert text.startswith("kafkacodec-users 1\n") and PASSWORD not in text and "other" not in text
    assert "CN=svc,%20O=Ex%20%231%20%C3%A9 SCRAM-SHA-256 iterations=8192 " in text
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    users = UsersFile.load(path)
    assert users.names() == ["CN=svc, O=Ex #1 é", "alice"]
    assert users.mechanisms("alice") == ("SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN")
    assert users.dumps() == text
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        client = ScramClient(mechanism, "alice", PASSWORD)
        server = server_for(mechanism, users)
        final = server.evaluate_response(client.evaluate_challenge(server.evaluate_response(client.start())))
        assert client.evaluate_challenge(final) is None and server.principal == "User:alice"
    plain = server_for("PLAIN", users)
    assert plain.evaluate_response(b"\0alice\0" + PASSWORD.encode()) == b"" and plain.principal == "User:alice"
    with pytest.raises(AuthenticationError):
        server_for("PLAIN", users).evaluate_response(b"\0CN=svc, O=Ex #1 \xc3\xa9\0other")   # no PLAIN entry
    assert remove_user(path, "alice", "PLAIN") == ["PLAIN"]
    assert UsersFile.load(path).mechanisms("alice") == ("SCRAM-SHA-256", "SCRAM-SHA-512")
    assert remove_user(path, "alice") == ["SCRAM-SHA-256", "SCRAM-SHA-512"]
    assert remove_user(path, "alice") == []
    assert UsersFile.load(path).names() == ["CN=svc, O=Ex #1 é"]


GOOD = ("alice SCRAM-SHA-256 iterations=4096 salt=c2FsdA== stored_key=" + "A" * 43 + "= server_key=" + "B" * 43
        + "=")


@pytest.mark.parametrize("text, message", [
    ("", ": empty; not a kafkacodec users file"),
    ("alice PLAIN x=1\n", ":1: not a kafkacodec users file"),
    ("kafkacodec-users 1\n\n# c\nalice\n", ":4: expected NAME MECHANISM"),
    ("kafkacodec-users 1\nalice GSSAPI\n", ":2: mechanism 'GSSAPI' is not one of"),
    ("kafkacodec-users 1\n" + GOOD + " extra=1\n", ":2: unexpected field 'extra'"),
    ("kafkacodec-users 1\n" + GOOD.replace("iterations=4096", "iterations=100") + "\n",
     ":2: iterations 100 is not 4096..16384"),
    ("kafkacodec-users 1\n" + GOOD.replace("salt=c2FsdA==", "salt=***") + "\n", ":2: salt is not base64"),
    ("kafkacodec-users 1\n" + GOOD.replace("A" * 43, "A" * 42) + "\n", ":2: stored_key is not base64"),
    ("kafkacodec-users 1\n" + GOOD.replace("A" * 43 + "=", "A" * 40) + "\n", ":2: stored_key has 30 bytes"),
    ("kafkacodec-users 1\n" + GOOD.replace(" server_key=" + "B" * 43 + "=", "") + "\n", ":2: .* without server_key"),
    ("kafkacodec-users 1\n" + GOOD + "\n" + GOOD + "\n", ":3: 'alice' has a second SCRAM-SHA-256 entry .*line 2"),
    ("kafkacodec-users 1\nal%FFice PLAIN\n", ":2: the name's %-escapes are not UTF-8"),
    ("kafkacodec-users 1\nalice PLAIN algorithm=MD5 iterations=4096 salt=eA== hash=eA==\n", ":2: algorithm 'MD5'"),
])
def test_damaged_files_are_refused_naming_the_line(tmp_path, text, message):
    path = tmp_path / "users"
    path.write_text(text)
    with pytest.raises(ValueError, match=f"{path}{message}"):
        UsersFile.load(path)


def test_a_file_others_can_read_loads_with_a_warning(tmp_path, caplog):
    path = tmp_path / "users"
    add_user(path, "alice", ["PLAIN"], PASSWORD)
    os.chmod(path, 0o644)
    UsersFile.load(path)
    assert "readable by others" in caplog.text
    add_user(path, "bob", ["PLAIN"], PASSWORD)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600          # rewritten 0600


def test_concurrent_adds_lose_no_user(tmp_path):
    path = tmp_path / "users"
    errors = []

    def add(name):
        try:
            add_user(path, name, ["SCRAM-SHA-256"], PASSWORD)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=add, args=(f"user{i}",)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors and UsersFile.load(path).names() == sorted(f"user{i}" for i in range(8))


def test_a_held_lock_times_out_with_a_clear_error(tmp_path):
    fcntl = pytest.importorskip("fcntl")
    from kafkacodec.net.users import _locked

    fd = os.open(tmp_path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)                       # another writer holds the directory
        with pytest.raises(TimeoutError, match="another process has been changing the users file"):
            with _locked(tmp_path / "users", timeout=0.2):
                pass
    finally:
        os.close(fd)
    with _locked(tmp_path / "users", timeout=0.2):          # released: taken at once
        pass


# --- the command ------------------------------------------------------------------------------

def run(capsys, monkeypatch, *argv, stdin=""):
    import io

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin.encode())))
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_users_command_add_list_remove(tmp_path, capsys, monkeypatch):
    path = tmp_path / "users.txt"
    code, out, err = run(capsys, monkeypatch, "users", "add", path, "alice", "--mechanism", "SCRAM-SHA-512",
                         "--mechanism", "PLAIN", stdin=PASSWORD + "\n")
    assert code == EXIT_OK and out == "" and "alice set for SCRAM-SHA-512, PLAIN" in err
    code, _, err = run(capsys, monkeypatch, "users", "add", path, "alice", "--mechanism", "PLAIN",
                       stdin="new password\r\n")
    assert code == EXIT_OK and "SCRAM-SHA-512 keeps the earlier password" in err
    users = UsersFile.load(path)
    assert users.plain_credential("alice").verify("new password")       # CR LF stripped
    assert users.plain_credential("alice").iterations == 4096
    code, out, _ = run(capsys, monkeypatch, "users", "list", path)
    assert (code, out) == (EXIT_OK, "alice\tSCRAM-SHA-512,PLAIN\n")
    code, out, _ = run(capsys, monkeypatch, "users", "list", "--json", path)
    assert out == '[{"name": "alice", "mechanisms": ["SCRAM-SHA-512", "PLAIN"]}]\n'
    code, _, err = run(capsys, monkeypatch, "users", "remove", path, "bob")
    assert code == EXIT_USAGE and "no user bob; nothing was changed" in err
    code, _, err = run(capsys, monkeypatch, "users", "remove", path, "alice", "--mechanism", "PLAIN")
    assert code == EXIT_OK and "alice removed (PLAIN)" in err
    assert PASSWORD not in path.read_text()


def test_users_command_refusals(tmp_path, capsys, monkeypatch):
    path = tmp_path / "users.txt"
    code, _, err = run(capsys, monkeypatch, "users", "add", path, "alice", "--mechanism", "PLAIN", stdin="")
    assert code == EXIT_USAGE and "no password on standard input" in err
    code, _, err = run(capsys, monkeypatch, "users", "add", path, "alice", "--mechanism", "PLAIN", stdin="\n")
    assert code == EXIT_USAGE and "the password is empty" in err
    code, _, err = run(capsys, monkeypatch, "users", "add", path, "alice", "--mechanism", "SCRAM-SHA-256",
                       "--iterations", "20000", stdin="pw\n")
    assert code == EXIT_USAGE and "SCRAM allows at most 16384" in err
    with pytest.raises(SystemExit) as info:
        run(capsys, monkeypatch, "users", "add", path, "alice", "--mechanism", "PLAIN", "--iterations", "100")
    assert info.value.code == EXIT_USAGE
    assert not path.exists()
    code, _, err = run(capsys, monkeypatch, "users", "list", tmp_path / "missing")
    assert code == EXIT_INPUT and "No such file" in err
    path.write_text("kafkacodec-users 1\nalice GSSAPI\n")
    code, _, err = run(capsys, monkeypatch, "users", "list", path)
    assert code == EXIT_DATA and f"{path}:2: mechanism 'GSSAPI'" in err and "Traceback" not in err


def test_terminal_password_is_asked_twice(tmp_path, capsys, monkeypatch):
    import getpass
    import io

    class Tty(io.StringIO):
        def isatty(self):
            return True

    answers = iter([PASSWORD, PASSWORD, PASSWORD, "typo"])
    monkeypatch.setattr(getpass, "getpass", lambda prompt: next(answers))
    monkeypatch.setattr(sys, "stdin", Tty())
    assert main(["users", "add", str(tmp_path / "u"), "alice", "--mechanism", "PLAIN"]) == EXIT_OK
    assert main(["users", "add", str(tmp_path / "u"), "bob", "--mechanism", "PLAIN"]) == EXIT_USAGE
    assert "the two passwords differ" in capsys.readouterr().err
    assert UsersFile.load(tmp_path / "u").names() == ["alice"]


def test_the_password_is_never_in_argv_output_or_file(tmp_path):
    """A real process: the password goes in on stdin only, and nothing it prints or writes
    holds it."""
    path = tmp_path / "users"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    result = subprocess.run([sys.executable, "-m", "kafkacodec.cli", "users", "add", str(path), "alice",
                             "--mechanism", "SCRAM-SHA-256", "--mechanism", "PLAIN"],
                            input=PASSWORD + "\n", capture_output=True, text=True, timeout=60, env=env)
    assert result.returncode == 0, result.stderr
    assert PASSWORD not in result.stdout + result.stderr and PASSWORD not in path.read_text()
    help_text = subprocess.run([sys.executable, "-m", "kafkacodec.cli", "users", "add", "--help"],
                               capture_output=True, text=True, timeout=60, env=env).stdout
    assert "--password" not in help_text and "standard input" in help_text
