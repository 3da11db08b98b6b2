"""Workspaces (hardlink vs copy, never writing the snapshot) and escapes the OS sandbox must contain
while the harness stays up."""

import os
import socket
import time
from pathlib import Path

import pytest

from harnessrl.harness import sandbox as sb
from harnessrl.harness.sandbox import Sandbox, SandboxLimits, create_workspace, remove_workspace, replace_file
from tests.conftest import needs_bwrap

UID = 61111  # a uid nothing else on the machine uses, so leftover-process checks mean something
ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not ROOT, reason="uid separation from the snapshot needs a root harness")


def make_snapshot(root: Path) -> Path:
    snap = root / "snap"
    (snap / "pkg").mkdir(parents=True)
    (snap / "pkg" / "mod.py").write_text("VALUE = 1\n")
    (snap / "README").write_text("hello\n")
    os.symlink("pkg/mod.py", snap / "link.py")
    return snap


@pytest.fixture
def workspace(tmp_path):
    snap = make_snapshot(tmp_path)
    ws = create_workspace(snap, tmp_path / "ws", owner_uid=UID)
    yield snap, ws
    remove_workspace(ws)


def sandbox(ws, **limits):
    base = {"wall_s": 10.0, "cpu_s": 10, "nproc": 64}
    return Sandbox(ws, SandboxLimits(**{**base, **limits}), uid=UID)


def uid_processes(uid: int) -> list[int]:
    pids = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                if os.stat(f"/proc/{d}").st_uid == uid:
                    pids.append(int(d))
            except FileNotFoundError:
                pass
    return pids


# -- workspaces ----------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["hardlink", "copy"])
def test_workspace_has_the_snapshot(tmp_path, method):
    snap = make_snapshot(tmp_path)
    ws = create_workspace(snap, tmp_path / method, method=method, owner_uid=UID)
    assert (ws / "pkg" / "mod.py").read_text() == "VALUE = 1\n"
    assert os.readlink(ws / "link.py") == "pkg/mod.py"  # symlinks copied as links, not followed
    shared = os.stat(ws / "README").st_ino == os.stat(snap / "README").st_ino
    assert shared == (method == "hardlink")
    if ROOT:
        assert os.stat(ws / "pkg").st_uid == UID  # the sandbox uid owns the directories


def test_world_writable_files_are_copied_not_linked(tmp_path):
    snap = make_snapshot(tmp_path)
    os.chmod(snap / "README", 0o666)
    ws = create_workspace(snap, tmp_path / "ws", method="hardlink", owner_uid=UID)
    assert os.stat(ws / "README").st_ino != os.stat(snap / "README").st_ino
    assert os.stat(ws / "pkg" / "mod.py").st_ino == os.stat(snap / "pkg" / "mod.py").st_ino


def test_replace_file_breaks_the_hardlink(tmp_path):
    snap = make_snapshot(tmp_path)
    os.chmod(snap / "README", 0o640)
    ws = create_workspace(snap, tmp_path / "ws", method="hardlink", owner_uid=UID)
    replace_file(ws / "README", "changed\n")
    assert (ws / "README").read_text() == "changed\n"
    assert (snap / "README").read_text() == "hello\n"
    assert os.stat(ws / "README").st_mode & 0o777 == 0o640  # mode kept
    assert not [p for p in os.listdir(ws) if "harness-tmp" in p]  # no temp files left


def test_remove_workspace_handles_locked_dirs(tmp_path):
    ws = create_workspace(make_snapshot(tmp_path), tmp_path / "ws", owner_uid=UID)
    os.chmod(ws / "pkg", 0)
    remove_workspace(ws)
    assert not ws.exists()


# -- the sandbox: normal use ---------------------------------------------------------------------


@needs_bwrap
def test_output_is_read_when_fd_numbers_pass_1024(workspace):
    """Hundreds of concurrent episodes push pipe fds past select()'s limit; output must still arrive."""
    _, ws = workspace
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        r = sandbox(ws).run("cat pkg/mod.py")
    finally:
        for fd in held:
            os.close(fd)
    assert r.exit_code == 0 and r.output.split() == ["VALUE", "=", "1"]


@needs_bwrap
def test_runs_in_workspace_with_python(workspace):
    _, ws = workspace
    r = sandbox(ws).run("pwd; cat pkg/mod.py; python -c 'import sys; print(sys.version_info[0])'; exit 3")
    assert r.exit_code == 3 and not r.timed_out
    assert r.output.split() == ["/workspace", "VALUE", "=", "1", "3"]


@needs_bwrap
@needs_root
def test_commands_cannot_write_snapshot_inodes_in_place(workspace):
    snap, ws = workspace
    r = sandbox(ws).run("echo x >> pkg/mod.py; echo rc=$?; sed -i s/1/2/ pkg/mod.py; cat pkg/mod.py; id -u")
    assert "Permission denied" in r.output and "rc=1" in r.output
    assert "VALUE = 2" in r.output and r.output.strip().endswith(str(UID))  # sed -i renames: allowed
    assert (snap / "pkg" / "mod.py").read_text() == "VALUE = 1\n"


# -- the sandbox: escapes ------------------------------------------------------------------------


@needs_bwrap
def test_cannot_read_or_write_outside_workspace(workspace, tmp_path):
    snap, ws = workspace
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET-CONTENT")
    cmd = (
        f"cat {secret}; ls {tmp_path}; cat {snap}/README; ls /root /home /etc/shadow; "
        f"echo pwned > {tmp_path}/pwned; echo pwned > /usr/pwned; "
        f"ln -s {secret} ./s; cat ./s; ln -s / ./rootlink; cat ./rootlink{secret}; echo end"
    )
    r = sandbox(ws).run(cmd)
    assert "TOP-SECRET-CONTENT" not in r.output and "hello" not in r.output
    assert r.output.rstrip().endswith("end")
    assert not (tmp_path / "pwned").exists() and not Path("/usr/pwned").exists()
    assert "Read-only file system" in r.output  # /usr is bound read-only


@needs_bwrap
def test_environment_is_not_visible(workspace, monkeypatch):
    _, ws = workspace
    monkeypatch.setenv("HARNESSRL_TEST_SECRET", "hunter2-do-not-leak")
    r = sandbox(ws).run("cat /proc/1/environ; cat /proc/*/environ; env; echo end")
    assert "hunter2-do-not-leak" not in r.output
    assert "end" in r.output


@needs_bwrap
def test_no_network_to_host_loopback(workspace):
    _, ws = workspace
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.settimeout(0.3)
    port = listener.getsockname()[1]
    code = (
        "import socket\ntry:\n"
        f" socket.create_connection(('127.0.0.1', {port}), timeout=2); print('CONNECTED')\n"
        "except OSError as e:\n print('FAILED', e)"
    )
    r = sandbox(ws).run(f'python -c "{code}"')
    assert "FAILED" in r.output and "CONNECTED" not in r.output
    with pytest.raises(TimeoutError):
        listener.accept()
    listener.close()


@needs_bwrap
def test_fork_bomb_is_bounded(workspace):
    _, ws = workspace
    t = time.monotonic()
    r = sandbox(ws, nproc=32, wall_s=3).run(":(){ :|:& };:; sleep 1; echo survived")
    assert time.monotonic() - t < 8
    assert "Resource temporarily unavailable" in r.output  # NPROC stopped it, not luck
    time.sleep(0.2)
    assert uid_processes(UID) == []  # the whole tree is gone
    assert sandbox(ws).run("echo fine").output.strip() == "fine"  # and the sandbox still works


@needs_bwrap
def test_infinite_loop_hits_cpu_limit(workspace):
    _, ws = workspace
    t = time.monotonic()
    r = sandbox(ws, cpu_s=1, wall_s=20).run("while :; do :; done")
    assert time.monotonic() - t < 10 and not r.timed_out
    assert r.exit_code not in (0, None)  # killed by SIGXCPU/SIGKILL


@needs_bwrap
def test_memory_and_file_size_limits(workspace):
    _, ws = workspace
    lim = sandbox(ws, address_space_bytes=1 << 30, fsize_bytes=1 << 20)
    r = lim.run("python -c 'b = bytearray(4 << 30)'")
    assert "MemoryError" in r.output and r.exit_code != 0
    r = lim.run("head -c 50000000 /dev/zero > big; echo rc=$?")
    assert "rc=0" not in r.output and os.path.getsize(ws / "big") <= 1 << 20


@needs_bwrap
def test_huge_output_is_capped_while_reading(workspace):
    _, ws = workspace
    r = sandbox(ws, output_bytes=64 << 10, wall_s=2).run("yes")
    assert r.timed_out and r.exit_code is None
    assert len(r.output) < 70_000 and r.dropped_bytes > 1_000_000
    assert "[... truncated" in r.output


@needs_bwrap
def test_sleep_past_timeout_is_killed(workspace):
    _, ws = workspace
    t = time.monotonic()
    r = sandbox(ws).run("echo started; sleep 60", timeout_s=1)
    assert r.timed_out and r.exit_code is None and "started" in r.output
    assert time.monotonic() - t < 4
    time.sleep(0.2)
    assert uid_processes(UID) == []


@needs_bwrap
def test_background_children_die_with_the_command(workspace):
    _, ws = workspace
    t = time.monotonic()
    r = sandbox(ws).run("sleep 60 & nohup sleep 60 >/dev/null 2>&1 & setsid sleep 60 & echo spawned")
    assert r.exit_code == 0 and time.monotonic() - t < 4
    time.sleep(0.2)
    assert uid_processes(UID) == []


@needs_bwrap
def test_killing_the_parent_leaves_the_harness_up(workspace):
    _, ws = workspace
    s = sandbox(ws)
    r = s.run("kill -9 $PPID; kill -9 1; kill -9 -1; kill -9 0; echo tried")
    assert r.exit_code is not None or r.timed_out
    assert os.getpid() and s.run("echo still-here").output.strip() == "still-here"


def test_missing_bwrap_is_a_clear_error(workspace, monkeypatch):
    _, ws = workspace
    monkeypatch.setattr(sb, "_bwrap_path", lambda: None)
    with pytest.raises(sb.SandboxUnavailable, match="apt-get install -y bubblewrap"):
        Sandbox(ws)
    fallback = Sandbox(ws, SandboxLimits(wall_s=5), uid=UID, allow_unsandboxed=True)
    assert fallback.unsandboxed
    r = fallback.run("cat pkg/mod.py")
    assert r.exit_code == 0 and "VALUE = 1" in r.output
