"""The sandbox launcher: a trusted little program that isolates itself, then execs the untrusted one.

Started by ``sandbox.py`` as ``python -I -S _sandbox_launcher.py CONFIG_FD`` with an empty environment, a
new session and only stdin/stdout/stderr plus a status pipe open. Doing the isolation here rather than in a
``preexec_fn`` keeps all of it out of the (threaded) server process: this interpreter is single-threaded, so
forking and calling ctypes between fork and exec is safe.

Process tree with a pid namespace (the default as root)::

    launcher (host pid ns; backstop wall clock)
      └─ init (pid 1 of the new ns; builds the mount tree, reaps orphans)
           └─ target (rlimits, uid drop, no_new_privs, landlock, seccomp, then execve)

When init exits (right after the target does) the kernel kills everything left in the namespace, so a
program cannot leave daemons behind. Without a pid namespace the launcher is the target's parent. Once the
target is forked, the launcher and init hold no copy of its stdin and stdout (``let_go_of_stdio``).

Status goes back as JSON lines on the status pipe (close-on-exec, so the target never holds it):
``setup_error`` (a requested layer could not be applied: the run is refused), ``exec_error``, ``exit``
(with rusage), ``timeout`` (backstop fired). ``_sandbox_probe.py`` reuses this module to test each layer.

Stdlib only; loads ``_linux.py`` by path because ``-I -S`` leaves the package off ``sys.path``.
"""

from __future__ import annotations

import errno
import importlib.util
import json
import os
import resource
import signal
import stat
import sys
from types import ModuleType
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    from minihermes.tools import _linux
else:

    def _load_linux() -> ModuleType:
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_linux.py")
        spec = importlib.util.spec_from_file_location("_minihermes_linux", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    _linux = _load_linux()

# Layer names; sandbox.Layer mirrors them (a test keeps the two in step).
NET = "net_namespace"
MOUNT = "mount_namespace"
PID = "pid_namespace"
IPC = "ipc_namespace"
USERNS = "user_namespace"
USER_DROP = "user_drop"
LANDLOCK = "landlock"
SECCOMP = "seccomp"
RLIMITS = "rlimits"
ALL_LAYERS = (RLIMITS, USER_DROP, USERNS, NET, MOUNT, PID, IPC, LANDLOCK, SECCOMP)

EXIT_SETUP_FAILED = 125
NEWROOT = "/tmp"  # mount point of the sandbox's root tmpfs, in the private mount namespace only
DEVICES = ("null", "zero", "full", "random", "urandom")
_DEV_RIGHTS = (
    _linux.LL_FS_READ_FILE | _linux.LL_FS_WRITE_FILE | _linux.LL_FS_TRUNCATE | _linux.LL_FS_IOCTL_DEV
)
_ALL_FS = (1 << 62) - 1  # masked down to what the ABI handles


class SetupError(Exception):
    """A requested isolation layer could not be applied."""

    def __init__(self, layer: str, error: BaseException) -> None:
        super().__init__(f"{layer}: {error}")
        self.layer = layer


class Launch:
    """The parsed configuration plus the status channel."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        self.status_fd: int = cfg["status_fd"]
        self.layers: frozenset[str] = frozenset(cfg["layers"])
        unknown = self.layers - set(ALL_LAYERS)
        if unknown:
            raise ValueError(f"unknown layers {sorted(unknown)}")
        self.argv: list[str] = cfg.get("argv") or []
        self.env: dict[str, str] = cfg.get("env") or {}
        self.workspace: str | None = cfg.get("workspace")
        self.ro_paths: list[str] = cfg["ro_paths"]
        self.workspace_ro_dirs: list[str] = cfg.get("workspace_ro_dirs") or []
        self.uid: int = cfg["uid"]
        self.gid: int = cfg["gid"]
        self.limits: dict[str, int] = cfg["limits"]
        self.tmp_bytes: int = cfg["tmp_bytes"]
        self.backstop_seconds: float = cfg["backstop_seconds"]
        self.is_root = os.geteuid() == 0
        self.outer_uid, self.outer_gid = os.getuid(), os.getgid()

    def report(self, event: dict[str, Any]) -> None:
        if isinstance(event.get("message"), str):
            event["message"] = event["message"][:1000]  # stay under PIPE_BUF so lines never interleave
        try:
            os.write(self.status_fd, (json.dumps(event) + "\n").encode())
        except OSError:
            pass  # the server is gone; pdeathsig is about to end us anyway

    def fail(self, err: SetupError) -> NoReturn:
        self.report({"event": "setup_error", "layer": err.layer, "message": str(err)})
        os._exit(EXIT_SETUP_FAILED)


# ------------------------------------------------------------------------------------------------ namespaces


def enter_namespaces(run: Launch, flags: int) -> None:
    """unshare the requested namespaces; unprivileged, inside a fresh user namespace mapping only our ids."""
    if not flags:
        return
    if not run.is_root:
        flags |= _linux.CLONE_NEWUSER
    _linux.unshare(flags)
    if flags & _linux.CLONE_NEWUSER:
        # Map only our own ids: the program keeps its uid, and execve drops the namespace capabilities.
        for name, text in (
            ("setgroups", "deny"),
            ("uid_map", f"{run.outer_uid} {run.outer_uid} 1\n"),
            ("gid_map", f"{run.outer_gid} {run.outer_gid} 1\n"),
        ):
            with open(f"/proc/self/{name}", "w") as f:
                f.write(text)


def namespace_flags(layers: frozenset[str]) -> int:
    flags = 0
    if NET in layers:
        flags |= _linux.CLONE_NEWNET
    if MOUNT in layers:
        flags |= _linux.CLONE_NEWNS
    if PID in layers:
        flags |= _linux.CLONE_NEWPID
    if IPC in layers:
        flags |= _linux.CLONE_NEWIPC | _linux.CLONE_NEWUTS
    return flags


def _bind(source_fd: int, target: str, *, readonly: bool) -> None:
    if stat.S_ISDIR(os.fstat(source_fd).st_mode):
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644))
    # The source goes by descriptor: it was opened before /tmp got covered by the new root.
    _linux.mount(f"/proc/self/fd/{source_fd}", target, None, _linux.MS_BIND | _linux.MS_REC)
    attrs = _linux.MOUNT_ATTR_NOSUID | _linux.MOUNT_ATTR_NODEV | (_linux.MOUNT_ATTR_RDONLY if readonly else 0)
    try:
        _linux.mount_setattr_recursive(target, attrs)
    except OSError:
        # Older kernel: remount the top mount only, repeating its locked flags.
        extra = _linux.MS_RDONLY if readonly else 0
        flags = _linux.MS_REMOUNT | _linux.MS_BIND | _linux.MS_NOSUID | _linux.MS_NODEV | extra
        _linux.mount(None, target, None, flags | _linux.mount_flags_of(target))


_DIR_PATH = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def readonly_subdirs(root: str, names: list[str]) -> list[str]:
    """Make each folder ``root/NAME`` read-only in this mount namespace: bind it onto itself, then remount
    the bind MS_BIND|MS_REMOUNT|MS_RDONLY (repeating the flags a user namespace locks). A name that is
    absent, or not a real folder (a link, a file), is skipped: the server put nothing there. Returns the
    names made read-only; raises OSError when one cannot be.

    Everything goes by descriptor (``/proc/self/fd/N``, as runc does): a link swapped in by another run
    sharing the workspace can never redirect the mount elsewhere."""
    done = []
    root_fd = os.open(root, _DIR_PATH)
    try:
        for name in names:
            try:
                fd = os.open(name, _DIR_PATH, dir_fd=root_fd)
            except OSError as e:
                if e.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
                    continue
                raise
            try:
                _readonly_bind(root_fd, name, fd)
            finally:
                os.close(fd)
            done.append(name)
    finally:
        os.close(root_fd)
    return done


def _readonly_bind(root_fd: int, name: str, fd: int) -> None:
    _linux.mount(f"/proc/self/fd/{fd}", f"/proc/self/fd/{fd}", None, _linux.MS_BIND)
    top = os.open(name, _DIR_PATH, dir_fd=root_fd)  # looked up again, the name crosses into the new bind
    try:
        if not os.path.samestat(os.fstat(top), os.fstat(fd)):
            raise OSError(errno.EBUSY, f"{name}: replaced while being mounted")
        target = f"/proc/self/fd/{top}"
        flags = _linux.MS_REMOUNT | _linux.MS_BIND | _linux.MS_RDONLY
        _linux.mount(None, target, None, flags | _linux.mount_flags_of(target))
        # The bind (and not the workspace under it) is what became read-only.
        if not os.fstatvfs(top).f_flag & os.ST_RDONLY or os.fstatvfs(root_fd).f_flag & os.ST_RDONLY:
            raise OSError(errno.EIO, f"{name}: the read-only bind did not take")
    finally:
        os.close(top)


def build_root(run: Launch, *, with_proc: bool) -> str:
    """Replace / (in our private mount namespace) with a tmpfs holding read-only binds of the system paths,
    the workspace read-write but for its ``workspace_ro_dirs`` (read-only binds), a private /tmp and
    /dev/shm, a minimal /dev and, with a pid namespace, a fresh /proc. The server's data dir, /root, /home
    ... simply do not exist in there. Returns a note on /proc."""
    binds: list[tuple[str, int]] = []
    links: list[tuple[str, str]] = []
    for path in run.ro_paths:
        try:
            if stat.S_ISLNK(os.lstat(path).st_mode):
                links.append((path, os.readlink(path)))  # merged /usr: /bin -> usr/bin
                continue
            binds.append((path, os.open(path, os.O_PATH | os.O_CLOEXEC)))
        except FileNotFoundError:
            continue
    ws_fd = None
    if run.workspace:
        ws_fd = os.open(run.workspace, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    devices = [
        (d, os.open(f"/dev/{d}", os.O_PATH | os.O_CLOEXEC)) for d in DEVICES if os.path.exists(f"/dev/{d}")
    ]

    def at(path: str) -> str:
        return NEWROOT + path

    _linux.mount(None, "/", None, _linux.MS_REC | _linux.MS_PRIVATE)  # nothing we do propagates to the host
    _linux.mount("tmpfs", NEWROOT, "tmpfs", _linux.MS_NOSUID | _linux.MS_NODEV, "mode=0755,size=4m")
    for path, fd in binds:
        _bind(fd, at(path), readonly=True)
    for path, target in links:
        os.makedirs(os.path.dirname(at(path)), exist_ok=True)
        os.symlink(target, at(path))
    os.makedirs(at("/tmp"), exist_ok=True)
    tmp_flags = _linux.MS_NOSUID | _linux.MS_NODEV
    _linux.mount("tmpfs", at("/tmp"), "tmpfs", tmp_flags, f"mode=1777,size={run.tmp_bytes}")
    if ws_fd is not None and run.workspace:
        _bind(ws_fd, at(run.workspace), readonly=False)  # may land inside the private /tmp: mounted after it
        readonly_subdirs(at(run.workspace), run.workspace_ro_dirs)  # before the program runs or drops root
    os.makedirs(at("/dev"), exist_ok=True)
    _linux.mount("tmpfs", at("/dev"), "tmpfs", _linux.MS_NOSUID | _linux.MS_NOEXEC, "mode=0755,size=64k")
    for name, fd in devices:
        target = at(f"/dev/{name}")
        os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o666))
        _linux.mount(f"/proc/self/fd/{fd}", target, None, _linux.MS_BIND)
    for name, target in (
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
    ):
        os.symlink(target, at(f"/dev/{name}"))
    os.symlink("/proc/self/fd/2", at("/dev/stderr"))
    os.makedirs(at("/dev/shm"))
    shm_flags = _linux.MS_NOSUID | _linux.MS_NODEV | _linux.MS_NOEXEC
    _linux.mount("tmpfs", at("/dev/shm"), "tmpfs", shm_flags, f"mode=1777,size={run.tmp_bytes}")
    proc_note = "no /proc (needs a pid namespace)"
    if with_proc:
        os.makedirs(at("/proc"))
        try:
            _linux.mount("proc", at("/proc"), "proc", _linux.MS_NOSUID | _linux.MS_NODEV | _linux.MS_NOEXEC)
            proc_note = "private /proc"
        except OSError as e:  # e.g. a container masking parts of the host /proc: go without
            proc_note = f"no /proc ({e})"
    for fd in [fd for _, fd in binds] + [fd for _, fd in devices] + ([ws_fd] if ws_fd is not None else []):
        os.close(fd)
    os.chdir(NEWROOT)
    _linux.pivot_root(".", ".")  # stacks the old root on top of the new one ...
    _linux.umount2(".", _linux.MNT_DETACH)  # ... and detaches it: the host tree is gone from this namespace
    os.chdir("/")
    ro = _linux.MS_REMOUNT | _linux.MS_BIND | _linux.MS_RDONLY | _linux.MS_NOSUID
    _linux.mount(None, "/", None, ro | _linux.MS_NODEV)
    _linux.mount(None, "/dev", None, ro | _linux.MS_NOEXEC)
    return proc_note


# ----------------------------------------------------------------------------------------- the target process


def apply_rlimits(limits: dict[str, int]) -> None:
    cpu = limits["cpu"]
    # Soft limit sends SIGXCPU (reported as cpu_limit); the hard limit one second later is a SIGKILL.
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    for name, value in (
        ("RLIMIT_AS", limits["memory"]),
        ("RLIMIT_NPROC", limits["nproc"]),
        ("RLIMIT_FSIZE", limits["fsize"]),
        ("RLIMIT_NOFILE", limits["nofile"]),
        ("RLIMIT_CORE", 0),
        ("RLIMIT_MEMLOCK", 0),
    ):
        resource.setrlimit(getattr(resource, name), (value, value))


def landlock_rules(run: Launch) -> list[tuple[str, int]]:
    rules = [(path, _linux.LL_READ) for path in run.ro_paths]
    if run.workspace:
        rules.append((run.workspace, _ALL_FS))
    rules += [(f"/dev/{d}", _DEV_RIGHTS) for d in DEVICES]
    if MOUNT in run.layers:
        # Everything below / is our own minimal tree here: listing it reveals nothing of the host.
        rules += [("/", _linux.LL_FS_READ_DIR), ("/tmp", _ALL_FS), ("/dev/shm", _ALL_FS)]
        if PID in run.layers:
            rules.append(("/proc", _linux.LL_FS_READ_FILE | _linux.LL_FS_READ_DIR))
    return rules


def drop_privileges(run: Launch) -> None:
    if os.getresuid() == (run.uid,) * 3 and os.getresgid() == (run.gid,) * 3 and not os.getgroups():
        return  # already done by init
    os.setgroups([])
    os.setresgid(run.gid, run.gid, run.gid)
    os.setresuid(run.uid, run.uid, run.uid)
    if os.getresuid() != (run.uid,) * 3 or os.getresgid() != (run.gid,) * 3:
        raise OSError("credentials did not change")


def exec_target(run: Launch) -> NoReturn:
    """Runs in the target process: last layers, then execve. Never returns."""
    try:
        layer = "workspace"
        if run.workspace:
            os.chdir(run.workspace)
        os.umask(0o022)
        # Python ignores these at start-up; ignored dispositions would survive execve.
        for sig in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT, signal.SIGTERM, signal.SIGALRM):
            signal.signal(sig, signal.SIG_DFL)
        layer = RLIMITS
        apply_rlimits(run.limits)
        if USER_DROP in run.layers:
            layer = USER_DROP
            drop_privileges(run)
        if PID not in run.layers:
            _linux.set_parent_death_signal(signal.SIGKILL)  # cleared by the uid change, so set it after
        layer = "no_new_privs"
        _linux.set_no_new_privs()
        if LANDLOCK in run.layers:
            layer = LANDLOCK
            _linux.landlock_restrict(landlock_rules(run), abi=_linux.landlock_abi())
        if SECCOMP in run.layers:
            layer = SECCOMP
            _linux.install_seccomp_filter()  # last: it refuses syscalls the steps above use
        _linux.close_fds_except([run.status_fd])  # the status pipe is close-on-exec
    except (OSError, ValueError) as e:
        run.fail(SetupError(layer, e))
    try:
        os.execvpe(run.argv[0], run.argv, run.env)
    except OSError as e:
        message = f"sandbox: cannot execute {run.argv[0]!r}: {e.strerror or e}"
        run.report({"event": "exec_error", "message": message})
        try:
            os.write(2, (message + "\n").encode())
        finally:
            os._exit(127)


def wait_and_report(run: Launch, pid: int) -> None:
    """Reap children until ``pid`` exits (as pid 1 we inherit every orphan); report its status."""
    while True:
        try:
            child, status, usage = os.wait4(-1, 0)
        except ChildProcessError:
            return
        if child == pid:
            run.report(
                {
                    "event": "exit",
                    "returncode": os.waitstatus_to_exitcode(status),
                    "cpu_seconds": round(usage.ru_utime + usage.ru_stime, 4),
                    "max_rss_kb": usage.ru_maxrss,
                }
            )
            return


def let_go_of_stdio() -> None:
    """After forking the program: the launcher and init keep no copy of its stdin and stdout. Stdout is the
    program's reply channel (see ``skills/_sandbox_code.py``): a process of the sandbox uid that could open
    ``/proc/<launcher or init>/fd/1`` must find nothing there. Stderr stays, for the launcher's own errors."""
    null = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
    try:
        os.dup2(null, 0)
        os.dup2(null, 1)
    finally:
        os.close(null)


def child_main(run: Launch) -> NoReturn:
    """First child: pid 1 of the new pid namespace when there is one. Builds the mount tree, then either
    becomes the target or forks it and stays as its reaper."""
    try:
        _linux.set_parent_death_signal(signal.SIGKILL)
        if MOUNT in run.layers:
            try:
                build_root(run, with_proc=PID in run.layers)
            except OSError as e:
                raise SetupError(MOUNT, e) from e
        if IPC in run.layers:
            try:
                _linux.sethostname("sandbox")
            except OSError as e:
                raise SetupError(IPC, e) from e
        if PID in run.layers and USER_DROP in run.layers:
            # Nothing left for init to do as root: it only reaps and reports from here on.
            try:
                drop_privileges(run)
                _linux.set_parent_death_signal(signal.SIGKILL)
                _linux.set_no_new_privs()
            except OSError as e:
                raise SetupError(USER_DROP, e) from e
    except SetupError as e:
        run.fail(e)
    if PID not in run.layers:
        exec_target(run)
    # Init ignores what the program might send it; the launcher ends it with SIGKILL.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGALRM):
        signal.signal(sig, signal.SIG_IGN)
    pid = os.fork()
    if pid == 0:
        exec_target(run)
    let_go_of_stdio()
    wait_and_report(run, pid)
    os._exit(0)  # as pid 1, exiting kills whatever the program left running


def launch(run: Launch) -> int:
    try:
        try:
            enter_namespaces(run, namespace_flags(run.layers))
        except OSError as e:
            raise SetupError(USERNS if not run.is_root else "namespaces", e) from e
        if USER_DROP in run.layers and run.workspace:
            try:
                # The program runs as the sandbox uid: give it the workspace (the top directory only; what
                # the server writes inside is chowned by workspace.py). O_NOFOLLOW: never chown through a link.
                fd = os.open(run.workspace, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
                try:
                    os.fchown(fd, run.uid, run.gid)
                finally:
                    os.close(fd)
            except OSError as e:
                raise SetupError(USER_DROP, e) from e
    except SetupError as e:
        run.fail(e)
    children: list[int] = []

    def terminate(signum: int, frame: object) -> None:
        # SIGTERM from the server (wall clock, output flood) or our own backstop alarm. With a pid namespace,
        # killing init makes the kernel kill and reap everything inside before our waitpid returns, so the
        # server knows nothing is left once we exit. Without one, the process group is all we can reach.
        if signum == signal.SIGALRM:
            run.report({"event": "timeout"})  # only if the server is wedged or gone
        if PID in run.layers and children:
            os.kill(children[0], signal.SIGKILL)
        else:
            os.killpg(0, signal.SIGKILL)

    signal.signal(signal.SIGTERM, terminate)
    signal.signal(signal.SIGALRM, terminate)
    pid = os.fork()
    if pid == 0:
        child_main(run)
    let_go_of_stdio()
    children.append(pid)
    signal.setitimer(signal.ITIMER_REAL, run.backstop_seconds)
    if PID in run.layers:
        _, status = os.waitpid(pid, 0)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # init is reaped: its pid must not be signalled again
        code = os.waitstatus_to_exitcode(status)
        return code if code >= 0 else 128 - code
    wait_and_report(run, pid)
    return 0


def read_config(fd: int) -> dict[str, Any]:
    # The configuration comes in a memfd rather than argv, where it would show in pid 1's /proc cmdline.
    chunks = []
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
    os.close(fd)
    cfg: dict[str, Any] = json.loads(b"".join(chunks))
    return cfg


def start(run: Launch, cfg: dict[str, Any]) -> None:
    """Common first steps of the launcher and the probe."""
    os.set_inheritable(run.status_fd, False)
    os.umask(0o022)  # directories built for the mount tree must be traversable by the sandbox uid
    _linux.set_parent_death_signal(signal.SIGKILL)
    if os.getppid() != cfg["parent_pid"]:
        os._exit(EXIT_SETUP_FAILED)  # the server died before the line above took effect


def main(argv: list[str]) -> int:
    cfg = read_config(int(argv[-1]))
    run = Launch(cfg)
    start(run, cfg)
    return launch(run)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
