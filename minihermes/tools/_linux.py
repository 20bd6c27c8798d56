"""ctypes wrappers over the Linux syscalls the sandbox launcher needs (namespaces, mounts, landlock, seccomp).

Stdlib only and no package imports: the launcher runs under ``python -I -S`` and loads this file by path.
Every wrapper raises ``OSError`` with the syscall name on failure; none of them retries or degrades, deciding
what a failure means is the launcher's job.

Python 3.11 has no ``os.unshare``/``os.mount``; landlock and seccomp have no libc wrappers at all, so they
go through ``syscall(2)`` with per-architecture numbers (only x86_64 and aarch64 are supported; anything
else reports those layers as unavailable).
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import socket
import stat
import struct
from collections.abc import Iterable, Sequence

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long

ARCH = platform.machine()

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
CLONE_NEWCGROUP = 0x02000000
_ALL_NEW_NAMESPACES = (
    CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWCGROUP
)

MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_NOATIME = 1024
MS_NODIRATIME = 2048
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
MS_RELATIME = 1 << 21
MNT_DETACH = 2

PR_SET_PDEATHSIG = 1
PR_SET_SECCOMP = 22
PR_SET_NO_NEW_PRIVS = 38

# Syscalls without a libc wrapper, plus the ones the seccomp filter refuses. Numbers from
# asm/unistd_64.h (x86_64) and asm-generic/unistd.h (aarch64).
_SYSCALLS: dict[str, dict[str, int]] = {
    "x86_64": {
        "pivot_root": 155, "socket": 41, "clone": 56, "clone3": 435,
        "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "kcmp": 312,
        "keyctl": 250, "add_key": 248, "request_key": 249, "bpf": 321, "perf_event_open": 298,
        "userfaultfd": 323, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
        "unshare": 272, "setns": 308, "mount": 165, "umount2": 166, "chroot": 161,
        "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
        "mount_setattr": 442, "kexec_load": 246, "kexec_file_load": 320, "init_module": 175,
        "finit_module": 313, "delete_module": 176, "reboot": 169, "swapon": 167, "swapoff": 168,
        "acct": 163, "syslog": 103, "name_to_handle_at": 303, "open_by_handle_at": 304, "quotactl": 179,
        "lookup_dcookie": 212, "fanotify_init": 300, "vhangup": 153, "iopl": 172, "ioperm": 173,
        "uselib": 134,
    },
    "aarch64": {
        "pivot_root": 41, "socket": 198, "clone": 220, "clone3": 435,
        "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271, "kcmp": 272,
        "keyctl": 219, "add_key": 217, "request_key": 218, "bpf": 280, "perf_event_open": 241,
        "userfaultfd": 282, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
        "unshare": 97, "setns": 268, "mount": 40, "umount2": 39, "chroot": 51,
        "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
        "mount_setattr": 442, "kexec_load": 104, "kexec_file_load": 294, "init_module": 105,
        "finit_module": 273, "delete_module": 106, "reboot": 142, "swapon": 224, "swapoff": 225,
        "acct": 89, "syslog": 116, "name_to_handle_at": 264, "open_by_handle_at": 265, "quotactl": 60,
        "lookup_dcookie": 18, "fanotify_init": 262, "vhangup": 58,
    },
}  # fmt: skip
_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
_NR_LANDLOCK_CREATE_RULESET = 444  # same number on every architecture (unified table since 5.x)
_NR_LANDLOCK_ADD_RULE = 445
_NR_LANDLOCK_RESTRICT_SELF = 446


def _fail(what: str) -> OSError:
    err = ctypes.get_errno()
    return OSError(err, f"{what}: {os.strerror(err)}")


def _syscall_number(name: str) -> int:
    table = _SYSCALLS.get(ARCH)
    if table is None or name not in table:
        raise OSError(errno.ENOSYS, f"{name}: unsupported architecture {ARCH!r}")
    return table[name]


def _cstr(value: str | None) -> bytes | None:
    return None if value is None else os.fsencode(value)


# ------------------------------------------------------------------------------------------ namespaces, mounts


def unshare(flags: int) -> None:
    """unshare(2): move the calling process into new namespaces."""
    if _libc.unshare(ctypes.c_int(flags)) != 0:
        raise _fail(f"unshare({flags:#x})")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    """mount(2)."""
    ret = _libc.mount(_cstr(source), _cstr(target), _cstr(fstype), ctypes.c_ulong(flags), _cstr(data))
    if ret != 0:
        raise _fail(f"mount({source!r} -> {target!r})")


def umount2(target: str, flags: int) -> None:
    """umount2(2)."""
    if _libc.umount2(_cstr(target), ctypes.c_int(flags)) != 0:
        raise _fail(f"umount2({target!r})")


def pivot_root(new_root: str, put_old: str) -> None:
    """pivot_root(2); glibc has no wrapper."""
    if _libc.syscall(_syscall_number("pivot_root"), _cstr(new_root), _cstr(put_old)) != 0:
        raise _fail("pivot_root")


def sethostname(name: str) -> None:
    """sethostname(2) (inside a private UTS namespace)."""
    raw = name.encode()
    if _libc.sethostname(raw, ctypes.c_size_t(len(raw))) != 0:
        raise _fail("sethostname")


MOUNT_ATTR_RDONLY = 0x1
MOUNT_ATTR_NOSUID = 0x2
MOUNT_ATTR_NODEV = 0x4
_NR_MOUNT_SETATTR = 442  # same number on every architecture
_AT_FDCWD = -100
_AT_RECURSIVE = 0x8000


def mount_setattr_recursive(path: str, attr_set: int) -> None:
    """mount_setattr(2) with AT_RECURSIVE: set MOUNT_ATTR_* flags on a mount and every mount below it.

    Only sets flags (never clears), so it cannot trip over flags locked by a user namespace.
    """
    attr = ctypes.create_string_buffer(struct.pack("=QQQQ", attr_set, 0, 0, 0), 32)
    ret = _libc.syscall(
        _NR_MOUNT_SETATTR, ctypes.c_int(_AT_FDCWD), _cstr(path), ctypes.c_uint(_AT_RECURSIVE), attr, 32
    )
    if ret != 0:
        raise _fail(f"mount_setattr({path!r})")


def mount_flags_of(path: str) -> int:
    """The per-mount flags of the mount holding ``path``, as MS_* bits.

    A bind remount must repeat the "locked" flags of its source (nosuid, noexec, atime mode) or the kernel
    refuses it inside a user namespace, so remounts start from these.
    """
    f_flag = os.statvfs(path).f_flag
    pairs = (
        (os.ST_RDONLY, MS_RDONLY),
        (os.ST_NOSUID, MS_NOSUID),
        (os.ST_NODEV, MS_NODEV),
        (os.ST_NOEXEC, MS_NOEXEC),
        (os.ST_NOATIME, MS_NOATIME),
        (os.ST_NODIRATIME, MS_NODIRATIME),
        (os.ST_RELATIME, MS_RELATIME),
    )
    return sum(ms for st, ms in pairs if f_flag & st)


# ------------------------------------------------------------------------------------------------------ prctl


def _prctl(option: int, arg2: int) -> None:
    if _libc.prctl(ctypes.c_int(option), ctypes.c_ulong(arg2), ctypes.c_ulong(0), ctypes.c_ulong(0), 0) != 0:
        raise _fail(f"prctl({option})")


def set_parent_death_signal(signum: int) -> None:
    """Ask the kernel to send ``signum`` to this process when its parent dies."""
    _prctl(PR_SET_PDEATHSIG, signum)


def set_no_new_privs() -> None:
    """Make execve unable to grant privileges (setuid bits, file capabilities) from now on."""
    _prctl(PR_SET_NO_NEW_PRIVS, 1)


# --------------------------------------------------------------------------------------------------- landlock

LL_FS_EXECUTE = 1 << 0
LL_FS_WRITE_FILE = 1 << 1
LL_FS_READ_FILE = 1 << 2
LL_FS_READ_DIR = 1 << 3
LL_FS_TRUNCATE = 1 << 14  # ABI 3
LL_FS_IOCTL_DEV = 1 << 15  # ABI 5
_LL_FS_V1 = (1 << 13) - 1  # execute .. make_sym
_LL_FS_REFER = 1 << 13  # ABI 2
_LL_NET_TCP = (1 << 0) | (1 << 1)  # bind, connect; ABI 4
_LL_SCOPES = (1 << 0) | (1 << 1)  # abstract unix sockets, signals; ABI 6
_LL_RULE_PATH_BENEATH = 1
_LL_FILE_RIGHTS = LL_FS_EXECUTE | LL_FS_WRITE_FILE | LL_FS_READ_FILE | LL_FS_TRUNCATE | LL_FS_IOCTL_DEV
LL_READ = LL_FS_EXECUTE | LL_FS_READ_FILE | LL_FS_READ_DIR


def landlock_abi() -> int:
    """The landlock ABI version the kernel offers, 0 when landlock is absent or disabled."""
    ret = _libc.syscall(_NR_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    return max(int(ret), 0)


def landlock_fs_rights(abi: int) -> int:
    """Every filesystem right the given ABI knows: the set a ruleset handles, i.e. denies by default."""
    rights = _LL_FS_V1
    if abi >= 2:
        rights |= _LL_FS_REFER
    if abi >= 3:
        rights |= LL_FS_TRUNCATE
    if abi >= 5:
        rights |= LL_FS_IOCTL_DEV
    return rights


def landlock_restrict(rules: Iterable[tuple[str, int]], *, abi: int) -> list[str]:
    """Confine this thread (and what it execs) to ``rules``: (path, allowed rights) pairs.

    Everything the ABI can express and no rule allows is denied: filesystem access outside the rules, TCP
    bind/connect (ABI 4) and, from ABI 6, signals and abstract unix sockets to processes outside the domain.
    Paths that do not exist or cannot be reached are skipped. Returns the names of the extra restrictions applied. Requires
    no_new_privs (or CAP_SYS_ADMIN).
    """
    if abi < 1:
        raise OSError(errno.EOPNOTSUPP, "landlock: not available")
    handled_fs = landlock_fs_rights(abi)
    handled_net = _LL_NET_TCP if abi >= 4 else 0
    scoped = _LL_SCOPES if abi >= 6 else 0
    # struct landlock_ruleset_attr grew a field per ABI; the size we pass tells the kernel which we know.
    attr = struct.pack("=QQQ", handled_fs, handled_net, scoped)
    size = 24 if abi >= 6 else 16 if abi >= 4 else 8
    buf = ctypes.create_string_buffer(attr, len(attr))
    ruleset = int(_libc.syscall(_NR_LANDLOCK_CREATE_RULESET, buf, ctypes.c_size_t(size), ctypes.c_uint32(0)))
    if ruleset < 0:
        raise _fail("landlock_create_ruleset")
    try:
        for path, rights in rules:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except (FileNotFoundError, PermissionError):
                continue  # nothing to allow: the path is absent or out of reach for this uid anyway
            try:
                allowed = rights & handled_fs
                if not stat.S_ISDIR(os.fstat(fd).st_mode):
                    allowed &= _LL_FILE_RIGHTS  # the kernel rejects directory-only rights on files
                rule = ctypes.create_string_buffer(struct.pack("=Qi", allowed, fd), 12)  # packed struct
                if _libc.syscall(_NR_LANDLOCK_ADD_RULE, ctypes.c_int(ruleset), 1, rule, ctypes.c_uint32(0)):
                    raise _fail(f"landlock_add_rule({path!r})")
            finally:
                os.close(fd)
        if _libc.syscall(_NR_LANDLOCK_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0)) != 0:
            raise _fail("landlock_restrict_self")
    finally:
        os.close(ruleset)
    extras = ["filesystem"]
    if handled_net:
        extras.append("tcp")
    if scoped:
        extras.append("signal_and_abstract_unix_scope")
    return extras


# ---------------------------------------------------------------------------------------------------- seccomp

_BPF_LD_W_ABS = 0x20
_BPF_JEQ_K = 0x15
_BPF_JGE_K = 0x35
_BPF_JSET_K = 0x45
_BPF_RET_K = 0x06
_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000
_RET_KILL_PROCESS = 0x80000000
_X32_SYSCALL_BIT = 0x40000000
_SECCOMP_MODE_FILTER = 2
_OFF_NR, _OFF_ARCH, _OFF_ARG0 = 0, 4, 16  # struct seccomp_data, little endian: arg0 low word at 16

# Refused with EPERM: kernel attack surface an unprivileged program does not need (namespaces, mounts,
# keyrings, bpf, io_uring, userfaultfd), and ptrace-like access to other processes of the same uid
# (another concurrent sandbox runs as the same uid).
DENIED_SYSCALLS: tuple[str, ...] = (
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "keyctl", "add_key", "request_key", "bpf",
    "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register", "unshare",
    "setns", "mount", "umount2", "pivot_root", "chroot", "open_tree", "move_mount", "fsopen", "fsconfig",
    "fsmount", "fspick", "mount_setattr", "kexec_load", "kexec_file_load", "init_module", "finit_module",
    "delete_module", "reboot", "swapon", "swapoff", "acct", "syslog", "name_to_handle_at",
    "open_by_handle_at", "quotactl", "lookup_dcookie", "fanotify_init", "vhangup", "iopl", "ioperm", "uselib",
)  # fmt: skip


def _seccomp_program() -> list[tuple[int, int, int, int]]:
    """A deny-list BPF program: wrong arch -> kill; listed syscalls -> EPERM; socket() of any family but
    AF_UNIX -> EACCES; clone() with namespace flags -> EPERM; clone3 -> ENOSYS (its flags live in memory
    BPF cannot read, and libc falls back to clone on ENOSYS); everything else allowed."""
    table = _SYSCALLS.get(ARCH)
    if table is None:
        raise OSError(errno.ENOSYS, f"seccomp: unsupported architecture {ARCH!r}")
    # (opcode, jump-if-true label, jump-if-false label, k); labels resolve to relative offsets below.
    Insn = tuple[int, str | None, str | None, int]
    prog: list[Insn | str] = [
        (_BPF_LD_W_ABS, None, None, _OFF_ARCH),
        (_BPF_JEQ_K, None, "kill", _AUDIT_ARCH[ARCH]),
        (_BPF_LD_W_ABS, None, None, _OFF_NR),
    ]
    if ARCH == "x86_64":
        prog.append((_BPF_JGE_K, "eperm", None, _X32_SYSCALL_BIT))
    for name in DENIED_SYSCALLS:
        if name in table:
            prog.append((_BPF_JEQ_K, "eperm", None, table[name]))
    prog += [
        (_BPF_JEQ_K, "socket", None, table["socket"]),
        (_BPF_JEQ_K, "clone", None, table["clone"]),
        (_BPF_JEQ_K, "enosys", None, table["clone3"]),
        (_BPF_RET_K, None, None, _RET_ALLOW),
        "socket",
        (_BPF_LD_W_ABS, None, None, _OFF_ARG0),
        (_BPF_JEQ_K, "allow", None, socket.AF_UNIX),
        (_BPF_RET_K, None, None, _RET_ERRNO | errno.EACCES),
        "clone",
        (_BPF_LD_W_ABS, None, None, _OFF_ARG0),
        (_BPF_JSET_K, "eperm", None, _ALL_NEW_NAMESPACES),
        "allow",
        (_BPF_RET_K, None, None, _RET_ALLOW),
        "eperm",
        (_BPF_RET_K, None, None, _RET_ERRNO | errno.EPERM),
        "enosys",
        (_BPF_RET_K, None, None, _RET_ERRNO | errno.ENOSYS),
        "kill",
        (_BPF_RET_K, None, None, _RET_KILL_PROCESS),
    ]
    labels: dict[str, int] = {}
    insns: list[Insn] = []
    for item in prog:
        if isinstance(item, str):
            labels[item] = len(insns)
        else:
            insns.append(item)

    def offset(label: str | None, at: int) -> int:
        return 0 if label is None else labels[label] - at - 1

    return [(op, offset(jt, i), offset(jf, i), k) for i, (op, jt, jf, k) in enumerate(insns)]


def install_seccomp_filter() -> None:
    """Install the deny-list filter on this thread; inherited by every child and kept across execve."""
    program = _seccomp_program()
    raw = b"".join(struct.pack("=HBBI", op, jt, jf, k) for op, jt, jf, k in program)
    filters = ctypes.create_string_buffer(raw, len(raw))

    class _SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = _SockFprog(len(program), ctypes.addressof(filters))
    ret = _libc.prctl(
        ctypes.c_int(PR_SET_SECCOMP), ctypes.c_ulong(_SECCOMP_MODE_FILTER), ctypes.byref(fprog), 0, 0
    )
    if ret != 0:
        raise _fail("prctl(PR_SET_SECCOMP)")


def seccomp_supported() -> bool:
    """Whether this module has a syscall table for the running architecture."""
    return ARCH in _SYSCALLS


def close_fds_except(keep: Sequence[int]) -> None:
    """Close every descriptor >= 3 not in ``keep`` (defence in depth: Python opens non-inheritable fds, but
    a C extension or ctypes call may not)."""
    low = 3
    for fd in sorted(k for k in keep if k >= 3):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, 1 << 20)
