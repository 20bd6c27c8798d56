"""read_file / write_file / list_files confined to one session's workspace folder.

These run in the server process (as root, possibly) on a tree the sandboxed programs write to, so the tree
is hostile: it may hold symlinks to /etc/shadow, hard links, FIFOs, or change while we look at it. Paths
are therefore never resolved by the kernel in one go: every component is opened relative to its parent's
descriptor with O_NOFOLLOW, starting from the workspace root. A symlink anywhere on the way is refused, not
followed (also ones pointing inside: telling them apart would need a second, racy resolution), ``..`` may
not climb above the root, and there is no window between a check and the use of its result.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import secrets
import shutil
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from .errors import ToolError

MAX_PATH_CHARS = 1024
MAX_DEPTH = 64
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_BINARY_SNIFF = 8192


class WorkspaceError(ToolError):
    """A refused or failed workspace operation.

    Codes: invalid_path, path_escape (absolute path outside, ``..`` above the root, a symlink or hard link),
    not_found, is_directory, not_a_directory, not_a_file (FIFO, socket, device), too_large, binary,
    exists, io_error, quota_exceeded (``QuotaExceeded``), read_only (a path under one of ``readonly_dirs``).
    """

    details: dict[str, Any] = {}  # read-only here; QuotaExceeded sets its own


@dataclass(frozen=True, slots=True)
class Usage:
    """What a workspace holds: ``bytes`` in its regular files (apparent size, a hard-linked file once) and
    ``files``, its entries of any kind (files, folders, links) below the root."""

    bytes: int
    files: int
    complete: bool = True
    """False: the walk stopped early (far more entries than the quota allows, or deeper than
    ``MAX_WALK_DEPTH``), so the counts are a lower bound and the workspace is over its quota."""


@dataclass(frozen=True, slots=True)
class Quota:
    """A workspace's quota: at most ``max_bytes`` in regular files and ``max_files`` entries."""

    max_bytes: int
    max_files: int

    @property
    def walk_limit(self) -> int:
        """Entries a measurement visits at most: past this many the workspace is over quota anyway."""
        return 4 * self.max_files + 1000

    def over(self, usage: Usage) -> bool:
        return not usage.complete or usage.bytes > self.max_bytes or usage.files > self.max_files

    def measure(self, root: str) -> Usage:
        return measure_usage(root, max_entries=self.walk_limit)

    def exceeded(self, usage: Usage, what: str) -> QuotaExceeded:
        return QuotaExceeded(self, usage, what)


class QuotaExceeded(WorkspaceError):
    """``quota_exceeded``: what was asked would take (or took) the workspace over its quota. ``what`` reads
    on with the usage ("... would take the session workspace to"); ``details`` gives usage and limits."""

    def __init__(self, quota: Quota, usage: Usage, what: str) -> None:
        at_least = "" if usage.complete else "at least "
        super().__init__(
            "quota_exceeded",
            f"{what} {at_least}{usage.bytes} bytes in {at_least}{usage.files} entries, over its quota of "
            f"{quota.max_bytes} bytes and {quota.max_files} entries; writes are refused until files are "
            "deleted (for example with rm in the terminal)",
        )
        self.details = {
            "usage_bytes": usage.bytes,
            "usage_files": usage.files,
            "limit_bytes": quota.max_bytes,
            "limit_files": quota.max_files,
        }


MAX_WALK_DEPTH = 256


def measure_usage(root: str, *, max_entries: int) -> Usage:
    """The usage of the tree below ``root``, never following a link (one descriptor per level, so the tree
    may change under us but cannot send us elsewhere). Entries that vanish meanwhile are skipped; a folder or
    file we may not look into (a program can ``chmod 000`` its own folder) makes the usage incomplete, which
    is over quota: hiding data from the count must not pay."""
    size = 0
    count = 0
    complete = True
    linked: set[tuple[int, int]] = set()

    def scan(fd: int) -> list[str]:
        nonlocal size, count, complete
        subdirs: list[str] = []
        with os.scandir(fd) as it:
            for entry in it:
                count += 1
                if count > max_entries:
                    raise _Stop
                try:
                    if entry.is_dir(follow_symlinks=False):
                        subdirs.append(entry.name)
                        continue
                    if not entry.is_file(follow_symlinks=False):
                        continue
                    st = entry.stat(follow_symlinks=False)
                except PermissionError:
                    complete = False
                    continue
                except OSError:
                    continue
                if st.st_nlink > 1:
                    if (st.st_dev, st.st_ino) in linked:
                        continue
                    linked.add((st.st_dev, st.st_ino))
                size += st.st_size
        return subdirs

    try:
        top = os.open(root, _DIR_FLAGS)
    except OSError:
        return Usage(0, 0)
    stack: list[tuple[int, Iterator[str]]] = [(top, iter(()))]
    try:
        stack[-1] = (top, iter(scan(top)))
        while stack:
            fd, pending = stack[-1]
            name = next(pending, None)
            if name is None:
                os.close(fd)
                stack.pop()
                continue
            if len(stack) >= MAX_WALK_DEPTH:
                complete = False
                continue
            try:
                child = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except PermissionError:
                complete = False
                continue
            except OSError:
                continue  # removed or swapped for a link since the listing
            stack.append((child, iter(())))  # closed by the finally below if scanning it fails
            stack[-1] = (child, iter(scan(child)))
    except _Stop:
        complete = False
    except PermissionError:
        complete = False
    finally:
        for fd, _ in stack:
            os.close(fd)
    return Usage(size, count, complete)


class _Stop(Exception):
    pass


@dataclass(frozen=True, slots=True)
class FileEntry:
    """One listed entry; ``path`` is relative to the workspace root, with ``/`` separators."""

    path: str
    type: Literal["file", "directory", "symlink", "other"]
    size: int


@dataclass(frozen=True, slots=True)
class FileContent:
    """A text file read from the workspace; ``size`` in bytes."""

    path: str
    content: str
    size: int


@dataclass(frozen=True, slots=True)
class WriteResult:
    """``created`` is False when an existing file was replaced."""

    path: str
    size: int
    created: bool


@dataclass(frozen=True, slots=True)
class Listing:
    """A directory listing, sorted by path."""

    entries: list[FileEntry]
    truncated: bool
    """More entries existed than ``max_list_entries``."""


def _is_binary(data: bytes) -> bool:
    if b"\0" in data[:_BINARY_SNIFF]:
        return True
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


class Workspace:
    """File operations confined to ``root`` (an existing directory, trusted; everything below it is not)."""

    def __init__(
        self,
        root: Path | str,
        *,
        max_read_bytes: int = 1024 * 1024,
        max_write_bytes: int = 10 * 1024 * 1024,
        max_list_entries: int = 1000,
        quota: Quota | None = None,
        readonly_dirs: tuple[str, ...] = (),
    ) -> None:
        resolved = os.path.realpath(root)
        if not os.path.isdir(resolved):
            raise WorkspaceError("not_found", f"workspace root is not a directory: {root}")
        self.root = resolved
        self.max_read_bytes = max_read_bytes
        self.max_write_bytes = max_write_bytes
        self.max_list_entries = max_list_entries
        self.quota = quota
        """Checked by ``write_file`` (None: no quota)."""
        self.readonly_dirs = frozenset(readonly_dirs)
        """Top-level folders ``write_file`` refuses (``skills``: the skills' files, which the sandbox mounts
        read-only too; their writer is ``skill_view``, through a workspace without this)."""

    # ------------------------------------------------------------------------------------------ paths

    def _parts(self, path: str) -> list[str]:
        """Lexically normalised components of ``path`` below the root. Lexical is exact here because no
        symlink is ever followed."""
        if not isinstance(path, str) or "\0" in path:
            raise WorkspaceError("invalid_path", "path must be a string without NUL bytes")
        if len(path) > MAX_PATH_CHARS:
            raise WorkspaceError("invalid_path", f"path is longer than {MAX_PATH_CHARS} characters")
        if os.path.isabs(path):
            root = self.root.rstrip("/") + "/"
            normal = os.path.normpath(path)
            if normal != self.root and not normal.startswith(root):
                raise WorkspaceError("path_escape", f"{path} is outside the workspace")
            path = normal[len(root) :] if normal != self.root else ""
        parts: list[str] = []
        for part in path.split("/"):
            if part in ("", "."):
                continue
            if part == "..":
                if not parts:
                    raise WorkspaceError("path_escape", f"{path} climbs above the workspace root")
                parts.pop()
            elif len(part.encode()) > 255:
                raise WorkspaceError("invalid_path", "a path component is longer than 255 bytes")
            else:
                parts.append(part)
        if len(parts) > MAX_DEPTH:
            raise WorkspaceError("invalid_path", f"path is deeper than {MAX_DEPTH} levels")
        return parts

    def _open_dir(self, parts: list[str], *, create: bool = False) -> int:
        """An O_NOFOLLOW-walked descriptor for the directory ``parts`` (created on the way if asked)."""
        fd = os.open(self.root, _DIR_FLAGS)
        try:
            for depth, part in enumerate(parts):
                rel = "/".join(parts[: depth + 1])
                try:
                    next_fd = self._open_child_dir(fd, part, rel)
                except FileNotFoundError:
                    if not create:
                        raise WorkspaceError("not_found", f"{rel} does not exist") from None
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(part, 0o755, dir_fd=fd)
                    # Through O_NOFOLLOW again: the new directory may have been swapped for a link already.
                    next_fd = self._open_child_dir(fd, part, rel)
                    self._give_to_owner(next_fd)
                os.close(fd)
                fd = next_fd
            return fd
        except BaseException:
            os.close(fd)
            raise

    def _open_child_dir(self, fd: int, name: str, rel: str) -> int:
        """Open directory ``name`` below ``fd`` without following a link; FileNotFoundError passes through."""
        try:
            return os.open(name, _DIR_FLAGS, dir_fd=fd)
        except FileNotFoundError:
            raise
        except OSError as e:
            raise self._classify(e, rel, fd, name, want_dir=True) from None

    def _classify(self, e: OSError, rel: str, dir_fd: int, name: str, *, want_dir: bool) -> WorkspaceError:
        """Turn an open failure into a precise error (a symlink shows up as ELOOP or ENOTDIR)."""
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except OSError:
            st = None
        if st is not None and stat.S_ISLNK(st.st_mode):
            return WorkspaceError("path_escape", f"{rel} is a symbolic link; links are not followed")
        if e.errno == errno.ENOTDIR or (want_dir and st is not None and not stat.S_ISDIR(st.st_mode)):
            return WorkspaceError("not_a_directory", f"{rel} is not a directory")
        if e.errno == errno.EISDIR:
            return WorkspaceError("is_directory", f"{rel} is a directory")
        if e.errno in (errno.ENXIO, errno.ENODEV):
            return WorkspaceError("not_a_file", f"{rel} is not a regular file")
        return WorkspaceError("io_error", f"{rel}: {e.strerror}")

    def _give_to_owner(self, fd: int) -> None:
        # As root, files we create must stay usable by the sandbox uid that owns the workspace.
        if os.geteuid() != 0:
            return
        owner = os.stat(self.root)
        st = os.fstat(fd)
        if (st.st_uid, st.st_gid) != (owner.st_uid, owner.st_gid):
            os.fchown(fd, owner.st_uid, owner.st_gid)

    # ------------------------------------------------------------------------------------------ read

    def read_bytes(self, path: str, *, max_bytes: int | None = None) -> bytes:
        """The content of a regular file, refused over ``max_bytes`` (default ``max_read_bytes``)."""
        limit = self.max_read_bytes if max_bytes is None else max_bytes
        parts = self._parts(path)
        if not parts:
            raise WorkspaceError("is_directory", "the workspace root is a directory")
        rel = "/".join(parts)
        dir_fd = self._open_dir(parts[:-1])
        try:
            try:
                # O_NONBLOCK: opening a FIFO planted by the program must not hang the server.
                flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
                fd = os.open(parts[-1], flags, dir_fd=dir_fd)
            except FileNotFoundError:
                raise WorkspaceError("not_found", f"{rel} does not exist") from None
            except OSError as e:
                raise self._classify(e, rel, dir_fd, parts[-1], want_dir=False) from None
        finally:
            os.close(dir_fd)
        try:
            st = os.fstat(fd)
            if stat.S_ISDIR(st.st_mode):
                raise WorkspaceError("is_directory", f"{rel} is a directory")
            if not stat.S_ISREG(st.st_mode):
                raise WorkspaceError("not_a_file", f"{rel} is not a regular file")
            if st.st_nlink > 1:
                # A hard link may alias a file outside the workspace; we cannot tell, so we refuse.
                raise WorkspaceError("path_escape", f"{rel} is a hard link; refused")
            if st.st_size > limit:
                raise WorkspaceError("too_large", f"{rel} is {st.st_size} bytes, the limit is {limit}")
            chunks: list[bytes] = []
            size = 0
            while size <= limit and (chunk := os.read(fd, min(1 << 20, limit + 1 - size))):
                chunks.append(chunk)
                size += len(chunk)
            if size > limit:  # it grew while we read
                raise WorkspaceError("too_large", f"{rel} is over {limit} bytes")
            return b"".join(chunks)
        finally:
            os.close(fd)

    def read_file(self, path: str, *, max_bytes: int | None = None) -> FileContent:
        """A text file's content (UTF-8). Binary files are refused with code ``binary``."""
        data = self.read_bytes(path, max_bytes=max_bytes)
        rel = "/".join(self._parts(path))
        if _is_binary(data):
            raise WorkspaceError("binary", f"{rel} is a binary file ({len(data)} bytes)")
        return FileContent(rel, data.decode("utf-8"), len(data))

    # ----------------------------------------------------------------------------------------- write

    def write_file(
        self,
        path: str,
        content: str | bytes,
        *,
        create_dirs: bool = True,
        overwrite: bool = True,
        readonly: bool = False,
        executable: bool | None = None,
    ) -> WriteResult:
        """Write ``content`` atomically (temp file + rename: readers never see half a file, and the rename
        cannot be redirected through a symlink planted meanwhile). Refused over ``max_write_bytes``.
        ``readonly``: mode 0444 (0555 when ``executable``, or, not given, for a ``#!`` script), and, as
        root, left to root (a copy the sandbox's programs read and run but cannot change in place)."""
        data = content.encode("utf-8") if isinstance(content, str) else content
        if not isinstance(data, bytes):
            raise WorkspaceError("invalid_path", "content must be str or bytes")
        parts = self._parts(path)
        if not parts:
            raise WorkspaceError("is_directory", "the workspace root is a directory")
        rel = "/".join(parts)
        if parts[0] in self.readonly_dirs:
            raise WorkspaceError(
                "read_only",
                f"{rel}: {parts[0]}/ is read-only (the skills' files); write elsewhere in the workspace",
            )
        if len(data) > self.max_write_bytes:
            raise WorkspaceError("too_large", f"{len(data)} bytes, the write limit is {self.max_write_bytes}")
        if self.quota is not None:
            self._check_quota(parts, len(data))
        dir_fd = self._open_dir(parts[:-1], create=create_dirs)
        name = parts[-1]
        try:
            try:
                existing = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            except FileNotFoundError:
                existing = None
            if existing is not None:
                if stat.S_ISLNK(existing.st_mode):
                    raise WorkspaceError("path_escape", f"{rel} is a symbolic link; links are not followed")
                if stat.S_ISDIR(existing.st_mode):
                    raise WorkspaceError("is_directory", f"{rel} is a directory")
                if not overwrite:
                    raise WorkspaceError("exists", f"{rel} already exists")
            tmp = f".{name[:200]}.{secrets.token_hex(6)}.tmp"
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            fd = os.open(tmp, flags, 0o644, dir_fd=dir_fd)
            try:
                try:
                    view = memoryview(data)
                    while view:
                        view = view[os.write(fd, view) :]
                    if readonly:
                        runnable = data.startswith(b"#!") if executable is None else executable
                        os.fchmod(fd, 0o555 if runnable else 0o444)
                    else:
                        if existing is not None:
                            os.fchmod(fd, stat.S_IMODE(existing.st_mode) & 0o777)  # keep e.g. a script's +x
                        self._give_to_owner(fd)
                finally:
                    os.close(fd)
                if overwrite:
                    os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
                else:
                    os.link(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
            except OSError as e:
                if e.errno == errno.EEXIST:
                    raise WorkspaceError("exists", f"{rel} already exists") from None
                if e.errno in (errno.EISDIR, errno.ENOTEMPTY):
                    raise WorkspaceError("is_directory", f"{rel} is a directory") from None
                if e.errno == errno.EFBIG or e.errno == errno.ENOSPC:
                    raise WorkspaceError("too_large", f"{rel}: {e.strerror}") from None
                raise WorkspaceError("io_error", f"{rel}: {e.strerror}") from None
            finally:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp, dir_fd=dir_fd)
        finally:
            os.close(dir_fd)
        return WriteResult(rel, len(data), existing is None)

    def _check_quota(self, parts: list[str], size: int) -> None:
        """Refuse a write that would take the workspace over its quota (a replaced file's old size is freed).
        Checked before the write: two writes at once may each pass (tool calls of a session run one by one)."""
        assert self.quota is not None
        usage = self.quota.measure(self.root)
        old_size, exists = 0, False
        try:
            dir_fd = self._open_dir(parts[:-1])
        except WorkspaceError:
            pass  # a folder to create (or a bad path, which the write itself reports precisely)
        else:
            try:
                st = os.stat(parts[-1], dir_fd=dir_fd, follow_symlinks=False)
                exists = True
                old_size = st.st_size if stat.S_ISREG(st.st_mode) and st.st_nlink == 1 else 0
            except OSError:
                pass
            finally:
                os.close(dir_fd)
        after = Usage(usage.bytes - old_size + size, usage.files + (0 if exists else 1), usage.complete)
        if self.quota.over(after):
            what = f"refused: writing {size} bytes to {'/'.join(parts)} would take the session workspace to"
            raise self.quota.exceeded(after, what)

    def usage(self) -> Usage:
        """What the workspace holds now (bounded by the quota's walk limit when there is a quota)."""
        limit = self.quota.walk_limit if self.quota is not None else 1_000_000
        return measure_usage(self.root, max_entries=limit)

    # ------------------------------------------------------------------------------------------ list

    def list_files(self, path: str = ".", *, recursive: bool = False) -> Listing:
        """Entries of a directory (recursively: of its subtree), sorted. Symlinks are listed, not entered."""
        parts = self._parts(path)
        fd = self._open_dir(parts)
        entries: list[FileEntry] = []
        truncated = False
        try:
            for entry in self._walk(fd, "/".join(parts), recursive, depth=len(parts)):
                if len(entries) >= self.max_list_entries:
                    truncated = True
                    break
                entries.append(entry)
        finally:
            os.close(fd)
        entries.sort(key=lambda e: e.path)
        return Listing(entries, truncated)

    def _walk(self, fd: int, prefix: str, recursive: bool, depth: int) -> Iterator[FileEntry]:
        with os.scandir(fd) as it:
            items = sorted(it, key=lambda e: e.name)
        for item in items:
            rel = f"{prefix}/{item.name}" if prefix else item.name
            try:
                st = item.stat(follow_symlinks=False)
            except OSError:
                continue  # vanished meanwhile
            kind: Literal["file", "directory", "symlink", "other"]
            if stat.S_ISLNK(st.st_mode):
                kind = "symlink"
            elif stat.S_ISDIR(st.st_mode):
                kind = "directory"
            elif stat.S_ISREG(st.st_mode):
                kind = "file"
            else:
                kind = "other"
            yield FileEntry(rel, kind, st.st_size if kind == "file" else 0)
            if recursive and kind == "directory" and depth < MAX_DEPTH:
                try:
                    child = os.open(item.name, _DIR_FLAGS, dir_fd=fd)
                except OSError:
                    continue  # swapped for a symlink or removed since scandir: skip it
                try:
                    yield from self._walk(child, rel, recursive, depth + 1)
                finally:
                    os.close(child)


# ------------------------------------------------------------------------------------ workspace folders

_SAFE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$")


def safe_component(raw: str) -> str:
    """A folder name for an id: the id itself when harmless, else a readable prefix and a hash (never '..')."""
    if _SAFE_ID.match(raw):
        return raw
    cleaned = re.sub(r"[^A-Za-z0-9_.\-]", "_", raw).lstrip(".")[:40] or "id"
    return f"{cleaned}~{hashlib.sha256(raw.encode()).hexdigest()[:16]}"


def workspace_path(root: Path, tenant: str, namespace: str, session_id: str) -> Path:
    """``<root>/<tenant>/<session>`` (the tenant folder carries the namespace when it is not the default)."""
    tenant_dir = tenant if namespace == "default" else f"{tenant}~{safe_component(namespace)}"
    return root / safe_component(tenant_dir) / safe_component(session_id)


def erase_workspaces(root: Path, tenant: str, namespace: str, session_ids: Iterable[str] | None) -> int:
    """Delete the workspace folders of these sessions of a tenant (``None``: the tenant's whole folder, every
    session's), for forgetting; returns how many files and folders went. Blocking (run it in a thread).
    Links are removed, never followed (``shutil.rmtree`` works relative to each folder's descriptor here), so
    a link a sandboxed program left cannot send the deletion outside the workspace."""
    tenant_dir = workspace_path(root, tenant, namespace, "_").parent
    folders = [tenant_dir] if session_ids is None else [tenant_dir / safe_component(s) for s in session_ids]
    removed = 0
    for folder in folders:
        if not folder.is_dir() or folder.is_symlink():
            continue
        entries = sum(len(dirs) + len(files) for _, dirs, files in os.walk(folder, followlinks=False))

        def failed(_fn: Any, path: str, exc: Any) -> None:
            raise WorkspaceError("io_error", f"could not delete {path}: {exc[1]}") from None

        shutil.rmtree(folder, onerror=failed)
        removed += entries
    return removed
