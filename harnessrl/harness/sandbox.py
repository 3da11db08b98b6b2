"""Cheap per-episode workspaces, and the OS sandbox that model-issued commands run in.

Workspaces. An episode gets its own copy of the task's repo snapshot. Hardlinking every file is
~15x faster than copying (bench/harness.py), but then the workspace and the snapshot share inodes,
so a write in place would corrupt the snapshot for every later episode. Two rules keep that from
happening:
  - the harness's own file tools never write in place: `replace_file` writes a temp file and renames
    it over the old name, which gives the workspace a fresh inode (copy-on-write by hand);
  - sandboxed commands run as an unprivileged uid that owns the workspace's directories but not the
    hardlinked files, so the kernel refuses in-place writes to snapshot inodes (EACCES), while
    creating, renaming and deleting files (what `sed -i`, editors and git do) still works.
The second rule needs the harness to run as root (it is in our containers). Otherwise the sandbox
runs as the harness's own uid, could write the shared inodes, and `method="auto"` falls back to a copy.

The sandbox. `Sandbox.run` runs a shell command under bubblewrap: new pid/net/ipc/uts namespaces,
an empty root with read-only binds of only the system dirs and the Python prefix, the workspace
bound read-write at /workspace, a private tmpfs /tmp, a scrubbed environment (bwrap itself is
started with a minimal env, because inside the sandbox /proc/1 is bwrap), rlimits (CPU, address
space, processes, file size), a wall-clock timeout that kills the whole tree, and output capped
while it is read. Loopback on the host is unreachable because the sandbox has its own netns.
"""

from __future__ import annotations

import contextlib
import functools
import os
import select
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

SANDBOX_ROOT = "/workspace"  # where the workspace appears inside the sandbox (and to the model)
DEFAULT_UID = 65534  # nobody; give concurrent episodes distinct uids so NPROC counts stay per episode
# The harness's own interpreter (its prefix is bound read-only into the sandbox), where ruff and
# pytest are installed with harnessrl; a bare `python` could resolve to another, e.g. a venv's base.
# Only its folder is resolved: resolving a venv's python link itself would name the base interpreter.
PYTHON = os.path.join(os.path.realpath(os.path.dirname(sys.executable)), os.path.basename(sys.executable))


class SandboxUnavailable(RuntimeError):
    """bubblewrap is missing or cannot create namespaces here."""


# ---------------------------------------------------------------------------------------------
# Workspaces


def _running_as_root() -> bool:
    return os.geteuid() == 0


def create_workspace(
    snapshot: Path | str,
    dest: Path | str,
    method: Literal["auto", "hardlink", "copy"] = "auto",
    owner_uid: int = DEFAULT_UID,
) -> Path:
    """Materialize `snapshot` at `dest` (which must not exist) and return `dest`.

    hardlink: directories are created fresh, files are hardlinked (files writable by group/other
    are copied instead, since the sandbox uid could write those in place). copy: shutil-style deep
    copy. auto: hardlink when running as root (the sandbox then runs as `owner_uid`, which cannot
    write the shared inodes), else copy. As root, directories (and copied files) are chowned to
    `owner_uid` so the sandboxed process can work in the workspace.
    """
    snapshot, dest = Path(snapshot), Path(dest)
    if method == "auto":
        method = "hardlink" if _running_as_root() else "copy"
    chown = _running_as_root() and owner_uid != 0
    os.makedirs(dest)
    if chown:
        os.chown(dest, owner_uid, owner_uid)
    _materialize(snapshot, dest, method == "hardlink", owner_uid if chown else None)
    return dest


def _materialize(src: Path, dst: Path, link: bool, owner: int | None) -> None:
    # One scandir walk; entry.stat() reuses the dirent where it can. Symlinks are copied as
    # symlinks (never followed): containment is enforced where paths are used, not here.
    with os.scandir(src) as it:
        for entry in it:
            target = os.path.join(dst, entry.name)
            if entry.is_symlink():
                os.symlink(os.readlink(entry.path), target)
                if owner is not None:
                    os.lchown(target, owner, owner)
            elif entry.is_dir():
                os.mkdir(target)
                if owner is not None:
                    os.chown(target, owner, owner)
                _materialize(Path(entry.path), Path(target), link, owner)
            elif link and not entry.stat(follow_symlinks=False).st_mode & 0o022:
                os.link(entry.path, target)
            else:
                shutil.copy2(entry.path, target)
                if owner is not None:
                    os.chown(target, owner, owner)


def remove_workspace(path: Path | str) -> None:
    """Delete a workspace, even if the sandboxed process chmod'ed parts of it to 000."""

    def fix_and_retry(func, p, _exc):  # type: ignore[no-untyped-def]
        os.chmod(os.path.dirname(p), 0o700)
        if os.path.isdir(p) and not os.path.islink(p):
            os.chmod(p, 0o700)
        func(p)

    shutil.rmtree(path, onerror=fix_and_retry)


def replace_file(path: Path, content: str, parent_fd: int | None = None) -> None:
    """Write `content` to `path` via temp-file-then-rename, never in place.

    A hardlinked workspace shares inodes with the snapshot; renaming a fresh file over the name
    breaks the link instead of writing through it. The new file keeps the old mode and, as root,
    is owned by the directory's owner (the sandbox uid), so sandboxed commands can edit it later.
    `parent_fd` (an fd of path's directory) makes every step relative to it, so nothing resolves
    the path again after the caller checked it.
    """
    name = path.name
    dfd = os.open(path.parent, os.O_PATH | os.O_DIRECTORY) if parent_fd is None else parent_fd
    tmp = f".{name}.harness-tmp-{os.getpid()}-{time.monotonic_ns()}"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644, dir_fd=dfd)
        try:
            with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
                f.write(content)
                with contextlib.suppress(FileNotFoundError):
                    os.fchmod(f.fileno(), os.lstat(name, dir_fd=dfd).st_mode & 0o7777)
                if _running_as_root():
                    st = os.stat(dfd)
                    os.fchown(f.fileno(), st.st_uid, st.st_gid)
            os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp, dir_fd=dfd)
            raise
    finally:
        if parent_fd is None:
            os.close(dfd)


# ---------------------------------------------------------------------------------------------
# The OS sandbox


class SandboxLimits(BaseModel):
    """Per-command limits. Rlimits apply to every process in the sandbox."""

    model_config = ConfigDict(extra="forbid")

    wall_s: float = 60.0  # the whole process tree is killed after this
    cpu_s: int = 60  # RLIMIT_CPU, per process
    address_space_bytes: int = 4 << 30  # RLIMIT_AS, per process
    nproc: int = 256  # RLIMIT_NPROC, processes of the sandbox uid
    fsize_bytes: int = 256 << 20  # RLIMIT_FSIZE, largest file a process may write
    tmp_bytes: int = 256 << 20  # size of the private /tmp tmpfs
    output_bytes: int = 1 << 20  # bytes of output kept (head and tail halves); the rest is counted


class CommandResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    exit_code: int | None  # None when killed for the wall-clock timeout
    output: str  # stdout and stderr interleaved
    timed_out: bool
    dropped_bytes: int  # output dropped from the middle to stay within output_bytes
    wall_s: float


@functools.cache
def _bwrap_path() -> str | None:
    return shutil.which("bwrap")


def _python_prefixes() -> list[str]:
    """Directories the interpreter needs, outside /usr (pyenv lives under /root, venvs anywhere), the
    running environment's own first: its bin/ leads the sandbox's PATH, so `python` in the sandbox
    is the interpreter the harness runs under (a venv's, never the base one it was made from)."""
    paths = [os.path.realpath(p) for p in (sys.prefix, sys.exec_prefix, sys.base_prefix)]
    return [p for p in dict.fromkeys(paths) if not p.startswith("/usr/") and p != "/usr"]


def env_prefix(python: str) -> str | None:
    """The virtualenv folder of an interpreter `<venv>/bin/python` (it holds pyvenv.cfg), unless it is
    the harness's own: a source's environment (harnessrl/sources/envs.py), which the sandbox binds read-only."""
    prefix = os.path.dirname(os.path.dirname(python))
    if not os.path.isfile(os.path.join(prefix, "pyvenv.cfg")) or os.path.realpath(prefix) in _python_prefixes():
        return None
    return os.path.realpath(prefix)


def _parents(path: str) -> list[str]:
    parts = Path(path).parents
    return [str(p) for p in reversed(list(parts)) if str(p) != "/"]


class Sandbox:
    """Runs shell commands for one workspace. Thread-safe: each run is its own process tree."""

    def __init__(
        self,
        workspace: Path | str,
        limits: SandboxLimits | None = None,
        uid: int = DEFAULT_UID,
        extra_ro_binds: tuple[str, ...] = (),
        allow_unsandboxed: bool = False,
        python: str | None = None,
    ) -> None:
        """`python`: the interpreter that checks, probes and the terminal tools run (default the
        harness's own, PYTHON); a source environment's is bound read-only and its bin/ leads PATH,
        so a bare `python` or `pytest` in a command is the environment's too."""
        self.workspace = Path(workspace).resolve()
        self.python = python or PYTHON
        self.env_prefix = env_prefix(self.python)
        self.limits = limits or SandboxLimits()
        self.uid = uid
        self.extra_ro_binds = extra_ro_binds
        self.unsandboxed = False
        if _bwrap_path() is None or not _bwrap_works():
            if not allow_unsandboxed:
                raise SandboxUnavailable(
                    "bubblewrap (bwrap) is not installed or cannot create namespaces; install it "
                    "(apt-get install -y bubblewrap) or pass allow_unsandboxed=True to accept the "
                    "rlimit-only fallback (see Sandbox._fallback_argv for what it does not contain)"
                )
            self.unsandboxed = True

    # -- argv -------------------------------------------------------------------------------

    def _rlimit_argv(self) -> list[str]:
        lim = self.limits
        limits = [f"--cpu={lim.cpu_s}", f"--as={lim.address_space_bytes}", f"--nproc={lim.nproc}"]
        return ["/usr/bin/prlimit", *limits, f"--fsize={lim.fsize_bytes}", "--core=0", "--"]

    def _drop_privileges_argv(self) -> list[str]:
        # As root, run the command as self.uid. Root bypasses RLIMIT_NPROC, and as the owner of the
        # hardlinked snapshot files it could write them in place.
        if not _running_as_root() or self.uid == 0:
            return []
        ids = [f"--reuid={self.uid}", f"--regid={self.uid}", "--clear-groups"]
        return ["/usr/bin/setpriv", *ids, "--no-new-privs", "--inh-caps=-all"]

    def _env(self) -> dict[str, str]:
        prefixes = [self.env_prefix] if self.env_prefix else []
        prefix_bins = [os.path.join(p, "bin") for p in [*prefixes, *_python_prefixes()]]
        return {
            "PATH": ":".join([*prefix_bins, "/usr/local/bin", "/usr/bin", "/bin"]),
            "HOME": "/tmp",
            "USER": "sandbox",
            "LANG": "C.UTF-8",
            "TERM": "dumb",
            "PYTHONDONTWRITEBYTECODE": "1",
        }

    def _bwrap_argv(self, command: str, cwd: str) -> list[str]:
        argv = [_bwrap_path() or "bwrap", "--die-with-parent", "--new-session"]
        if _running_as_root():
            # Not --unshare-all: as root that adds a user namespace mapping only uid 0, and we could
            # no longer drop to an unprivileged uid (see _drop_privileges_argv).
            argv += ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts"]
            argv += ["--unshare-cgroup-try"]
            argv += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]  # for setpriv, which drops them
        else:
            argv += ["--unshare-all"]
        argv += ["--hostname", "sandbox", *_system_binds()]
        # The private /tmp comes before the interpreter's binds: mounted after them it would hide a
        # venv that lives under /tmp, and `python` would then run as the base interpreter.
        argv += ["--perms", "1777", "--size", str(self.limits.tmp_bytes), "--tmpfs", "/tmp"]
        opened: list[str] = []
        env = [self.env_prefix] if self.env_prefix else []
        for path in [*_python_prefixes(), *env, *self.extra_ro_binds]:
            argv += ["--ro-bind", path, path]
            opened += _parents(path)
        # bwrap creates missing parents of a bind 0700 (e.g. /root); the sandbox uid must traverse them.
        # /tmp itself stays 1777: the sandbox's commands write there.
        for parent in dict.fromkeys(opened):
            if not parent.startswith("/usr") and parent != "/tmp":
                argv += ["--chmod", "0755", parent]
        argv += ["--bind", str(self.workspace), SANDBOX_ROOT]
        argv += ["--proc", "/proc", "--dev", "/dev", "--chdir", cwd, "--clearenv"]
        for key, value in self._env().items():
            argv += ["--setenv", key, value]
        return [*argv, "--", *self._drop_privileges_argv(), *self._rlimit_argv(), "/bin/bash", "-c", command]

    def _fallback_argv(self, command: str) -> list[str]:
        """Rlimit-only fallback, used only with allow_unsandboxed=True.

        It contains: CPU/memory/process/file-size rlimits, the wall-clock timeout and output cap,
        a scrubbed environment, and (as root) an unprivileged uid. It does NOT contain: reads of any
        file the uid can read, writes outside the workspace wherever the uid may write, network
        access (host loopback included), /proc of other processes, or signals to processes of the
        same uid (as non-root, `kill $PPID` can reach the harness). Use it for trusted commands only.
        """
        return [*self._drop_privileges_argv(), *self._rlimit_argv(), "/bin/bash", "-c", command]

    # -- running ----------------------------------------------------------------------------

    def run(self, command: str, timeout_s: float | None = None, cwd: str = SANDBOX_ROOT) -> CommandResult:
        """Run `command` with bash in the sandbox; never raises for anything the command does."""
        wall = self.limits.wall_s if timeout_s is None else min(timeout_s, self.limits.wall_s)
        if self.unsandboxed:
            argv = self._fallback_argv(command)
            host_cwd = str(self.workspace / os.path.relpath(cwd, SANDBOX_ROOT))
            env = {**self._env(), "HOME": str(self.workspace)}
        else:
            argv = self._bwrap_argv(command, cwd)
            host_cwd, env = "/", {"PATH": "/usr/bin:/bin"}  # bwrap's own env is visible in /proc/1
        start = time.monotonic()
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            cwd=host_cwd,
            env=env,
            start_new_session=True,
            close_fds=True,
        )
        try:
            head, tail, dropped, timed_out = _read_capped(proc, start + wall, self.limits.output_bytes)
        finally:
            _kill_tree(proc)
        exit_code = None if timed_out else proc.returncode
        output = head.decode("utf-8", "replace")
        if dropped:
            output += f"\n[... truncated {dropped} bytes ...]\n"
        output += tail.decode("utf-8", "replace")
        return CommandResult(
            exit_code=exit_code,
            output=output,
            timed_out=timed_out,
            dropped_bytes=dropped,
            wall_s=time.monotonic() - start,
        )


def _read_capped(proc: subprocess.Popen, deadline: float, cap: int) -> tuple[bytes, bytes, int, bool]:
    """Drain the pipe until EOF or the deadline, keeping the first and last cap/2 bytes."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    os.set_blocking(fd, False)
    # poll, not select: with hundreds of concurrent episodes the pipe's fd number passes 1024,
    # which select cannot watch.
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
    half = max(cap // 2, 1)
    head = bytearray()
    tail = bytearray()
    dropped = 0

    def take(chunk: bytes) -> None:
        nonlocal dropped
        if len(head) < half:
            n = half - len(head)
            head.extend(chunk[:n])
            chunk = chunk[n:]
        tail.extend(chunk)
        if len(tail) > half:
            dropped += len(tail) - half
            del tail[: len(tail) - half]

    def drain() -> bool:
        """Read what is there now; True at EOF."""
        while True:
            try:
                chunk = os.read(fd, 1 << 16)
            except BlockingIOError:
                return False
            if not chunk:
                return True
            take(chunk)

    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return bytes(head), bytes(tail), dropped, True
        if poller.poll(min(left, 0.5) * 1000):
            if drain():
                break
        elif proc.poll() is not None:
            # bwrap exits with the command and its pid namespace takes every child with it; in the
            # fallback a background child may still hold the pipe, so stop once the shell is gone,
            # after reading what it wrote between the last poll and its exit.
            drain()
            break
    try:
        proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
    except subprocess.TimeoutExpired:
        return bytes(head), bytes(tail), dropped, True
    return bytes(head), bytes(tail), dropped, False


def _kill_tree(proc: subprocess.Popen) -> None:
    # The process group is bwrap's (start_new_session); killing bwrap makes the sandbox's pid 1 die
    # (--die-with-parent) and the kernel then kills everything in its pid namespace.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, 9)
    proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()


def _system_binds() -> list[str]:
    """Read-only /usr, the merged-/usr top-level dirs, and the few /etc entries that dynamic linking and
    Debian's alternatives symlinks need. Nothing else of the host's /etc (or /home, /root, ...)."""
    argv = ["--ro-bind", "/usr", "/usr"]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64"):
        if os.path.islink(top):
            argv += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            argv += ["--ro-bind", top, top]
    for etc in ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives"):
        if os.path.exists(etc):
            argv += ["--ro-bind", etc, etc]
    return argv


@functools.cache
def _bwrap_works() -> bool:
    """One cheap smoke run, cached: bwrap can be installed yet unable to create namespaces."""
    try:
        done = subprocess.run(
            [_bwrap_path() or "bwrap", "--unshare-net", *_system_binds(), "/usr/bin/true"],
            env={"PATH": "/usr/bin:/bin"},
            capture_output=True,
            timeout=20,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0
