"""Reading a collection of skill folders from a folder, a ``.zip`` / ``.skill`` archive or a tarball, safely;
writing skill folders and zips.

Nothing is ever extracted to disk: members are read into memory, each path checked (no absolute paths, no
``..``, no control characters), links resolved by hand and kept only when they point to a file inside the
collection (a link out is refused), devices and FIFOs refused, and every size capped while reading (the
declared sizes of a zip are not trusted: a zip bomb stops at the cap). Returns ``(entries, refused)``:
``{path: bytes}`` and ``[{path, reason}]``, for ``_folders.group``. An archive's member names are only names:
a folder named like the data dir, or an absolute path, names nothing on the machine.

Folders on disk (``read_folder``, ``write_folder``) are the operator's CLI's (``minihermes skills
import/export``), never a request's: the skill store reads archives only. Both take ``protect``, folders
(the data dir) that are never read or written, whatever links or names lead there.
"""

from __future__ import annotations

import io
import os
import posixpath
import stat
import tarfile
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from minihermes.runtime import InvalidArgument, PermissionDenied

from ._folders import SKILL_MD, Limits, safe_relpath
from ._text import slug

_SKIPPED_DIRS = frozenset({".git", "__pycache__", ".DS_Store", "__MACOSX"})

Read = tuple[dict[str, bytes], list[dict[str, str]], set[str]]
"""What a folder or an archive holds: ``(files by path, refusals, the paths with an executable bit)``."""


class _Budget:
    def __init__(self, op: str, limits: Limits) -> None:
        self.op = op
        self.limits = limits
        self.total = 0
        self.members = 0

    def member(self) -> None:
        self.members += 1
        if self.members > self.limits.max_archive_members:
            raise InvalidArgument(
                f"{self.op}: more than {self.limits.max_archive_members} files in one import", op=self.op
            )

    def take(self, size: int) -> None:
        self.total += size
        if self.total > self.limits.max_archive_bytes:
            raise InvalidArgument(
                f"{self.op}: the import unpacks to more than {self.limits.max_archive_bytes} bytes",
                op=self.op,
            )


def _skipped(path: str) -> bool:
    return any(part in _SKIPPED_DIRS for part in path.split("/"))


def _oversized(path: str, size: int, limits: Limits) -> dict[str, str]:
    return {"path": path, "reason": f"oversized: {size} bytes, the limit is {limits.max_file_bytes}"}


def _resolve_links(
    entries: dict[str, bytes], links: dict[str, str], refused: list[dict[str, str]], executable: set[str]
) -> None:
    """Links whose target (relative to the link's folder) is a file inside the collection become copies
    of it; any other link is refused."""
    for path, target in sorted(links.items()):
        joined = posixpath.normpath(posixpath.join(posixpath.dirname(path), target))
        clean = safe_relpath(joined) if not target.startswith("/") else None
        if clean is None or clean not in entries:
            refused.append({"path": path, "reason": f"a link out of the folder (to {target[:200]})"})
            continue
        entries[path] = entries[clean]
        if clean in executable:
            executable.add(path)


# -------------------------------------------------------------------------------------------- archives


def read_archive(op: str, data: bytes, limits: Limits) -> Read:
    """A ``.zip`` / ``.skill`` archive or a tarball (plain, gz, bz2, xz), recognized by content."""
    if len(data) > limits.max_archive_bytes:
        raise InvalidArgument(f"{op}: the archive is larger than {limits.max_archive_bytes} bytes", op=op)
    buffer = io.BytesIO(data)
    if zipfile.is_zipfile(buffer):
        return _read_zip(op, buffer, limits)
    buffer.seek(0)
    try:
        with tarfile.open(fileobj=buffer, mode="r:*") as tar:
            return _read_tar(op, tar, limits)
    except (tarfile.TarError, EOFError, OSError) as e:
        raise InvalidArgument(f"{op}: not a zip archive or a tarball ({e})", op=op, field="archive") from None


def _read_zip(op: str, buffer: io.BytesIO, limits: Limits) -> Read:
    budget = _Budget(op, limits)
    entries: dict[str, bytes] = {}
    links: dict[str, str] = {}
    refused: list[dict[str, str]] = []
    executable: set[str] = set()
    try:
        with zipfile.ZipFile(buffer) as zf:
            for info in zf.infolist():
                budget.member()
                if info.is_dir() or _skipped(info.filename):
                    continue
                path = safe_relpath(info.filename)
                if path is None:
                    refused.append({"path": info.filename[:300], "reason": "unsafe path (absolute or '..')"})
                    continue
                mode = info.external_attr >> 16
                if stat.S_ISLNK(mode):
                    with zf.open(info) as f:
                        links[path] = f.read(4096).decode("utf-8", "replace")
                    continue
                if mode and not stat.S_ISREG(mode) and stat.S_IFMT(mode):
                    refused.append({"path": path, "reason": "not a regular file"})
                    continue
                if info.file_size > limits.max_file_bytes:
                    refused.append(_oversized(path, info.file_size, limits))
                    continue
                with zf.open(info) as f:  # declared sizes are not trusted: read at most the cap + 1
                    content = f.read(limits.max_file_bytes + 1)
                if len(content) > limits.max_file_bytes:
                    refused.append(_oversized(path, len(content), limits))
                    continue
                budget.take(len(content))
                entries[path] = content
                if mode & 0o111:  # the Unix mode a zip records (0 from tools that record none)
                    executable.add(path)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, EOFError) as e:
        raise InvalidArgument(f"{op}: the zip archive cannot be read ({e})", op=op, field="archive") from None
    _resolve_links(entries, links, refused, executable)
    return entries, refused, executable


def _read_tar(op: str, tar: tarfile.TarFile, limits: Limits) -> Read:
    budget = _Budget(op, limits)
    entries: dict[str, bytes] = {}
    links: dict[str, str] = {}
    refused: list[dict[str, str]] = []
    executable: set[str] = set()
    for member in tar:  # streaming: members are read one by one, never all listed first
        budget.member()
        if member.isdir() or _skipped(member.name):
            continue
        if member.name in ("pax_global_header",):
            continue
        path = safe_relpath(member.name)
        if path is None:
            refused.append({"path": member.name[:300], "reason": "unsafe path (absolute or '..')"})
            continue
        if member.issym():
            links[path] = member.linkname
            continue
        if member.islnk():  # a hard link names another member by its archive path
            links[path] = "/".join([".."] * path.count("/") + [member.linkname])
            continue
        if not member.isreg():
            refused.append({"path": path, "reason": "not a regular file (device, FIFO ...)"})
            continue
        if member.size > limits.max_file_bytes:
            # Skipping it still decompresses it: it counts toward what the import unpacks to (a tar bomb
            # of declared sizes stops here).
            budget.take(member.size)
            refused.append(_oversized(path, member.size, limits))
            continue
        f = tar.extractfile(member)
        content = f.read(limits.max_file_bytes + 1) if f is not None else b""
        budget.take(len(content))
        entries[path] = content
        if member.mode & 0o111:
            executable.add(path)
    _resolve_links(entries, links, refused, executable)
    return entries, refused, executable


# ---------------------------------------------------------------------------------------------- folders


def _inside(real: str, base: str) -> bool:
    """``real`` is ``base`` or below it (both resolved)."""
    return os.path.commonpath([real, base]) == base


def _real_protected(protect: Sequence[str]) -> list[str]:
    return [os.path.realpath(p) for p in protect]


def check_unprotected(op: str, path: str, protect: Sequence[str]) -> None:
    """``PermissionDenied`` when ``path``, links resolved, is one of the ``protect`` folders or below one."""
    real = os.path.realpath(path)
    for guarded in _real_protected(protect):
        if _inside(real, guarded):
            raise PermissionDenied(
                f"{op}: {path} is in the node's data dir ({guarded}), which holds the database, "
                "credential.key and every tenant's workspaces: it is never read or written as skills",
                op=op,
                field="path",
            )


def read_folder(op: str, path: str, limits: Limits, *, protect: Sequence[str] = ()) -> Read:
    """A folder on this machine: a collection (``<name>/SKILL.md`` folders) or one skill folder. Links
    are followed only to files inside the folder; nothing outside it is read, and nothing in a ``protect``
    folder (the data dir: refused when ``path`` is in it, left out with a reason when it is below)."""
    root = Path(path)
    if not root.is_absolute() or not root.is_dir():
        raise InvalidArgument(f"{op}: path must be an existing absolute folder", op=op, field="path")
    check_unprotected(op, path, protect)
    guarded = _real_protected(protect)
    real_root = os.path.realpath(root)
    budget = _Budget(op, limits)
    entries: dict[str, bytes] = {}
    refused: list[dict[str, str]] = []
    executable: set[str] = set()
    for dirpath, dirnames, filenames in os.walk(real_root, followlinks=False):
        rel_dir = os.path.relpath(dirpath, real_root)
        rel_dir = "" if rel_dir == "." else rel_dir.replace(os.sep, "/")
        for name in list(dirnames):
            full = os.path.join(dirpath, name)
            rel = f"{rel_dir}/{name}" if rel_dir else name
            if name in _SKIPPED_DIRS:
                dirnames.remove(name)
            elif any(_inside(os.path.realpath(full), g) for g in guarded):
                dirnames.remove(name)
                refused.append({"path": rel, "reason": "the node's data dir: never read as skills"})
            elif os.path.islink(full):
                dirnames.remove(name)
                target = os.path.realpath(full)
                if os.path.commonpath([target, real_root]) != real_root:
                    refused.append({"path": rel, "reason": "a link out of the folder"})
        for name in sorted(filenames):
            full = os.path.join(dirpath, name)
            rel = f"{rel_dir}/{name}" if rel_dir else name
            if _skipped(rel):
                continue
            budget.member()
            target = os.path.realpath(full)
            if os.path.commonpath([target, real_root]) != real_root:
                refused.append({"path": rel, "reason": "a link out of the folder"})
                continue
            if any(_inside(target, g) for g in guarded):
                refused.append({"path": rel, "reason": "the node's data dir: never read as skills"})
                continue
            try:
                st = os.stat(target)
            except OSError as e:
                refused.append({"path": rel, "reason": f"cannot be read ({e.strerror})"})
                continue
            if not stat.S_ISREG(st.st_mode):
                refused.append({"path": rel, "reason": "not a regular file (device, FIFO ...)"})
                continue
            if st.st_size > limits.max_file_bytes:
                refused.append(_oversized(rel, st.st_size, limits))
                continue
            with open(target, "rb") as f:
                content = f.read(limits.max_file_bytes + 1)
            if len(content) > limits.max_file_bytes:
                refused.append(_oversized(rel, len(content), limits))
                continue
            budget.take(len(content))
            entries[rel] = content
            if st.st_mode & 0o111:
                executable.add(rel)
    return entries, refused, executable


def write_zip(files: dict[str, bytes], executable: set[str] | frozenset[str] = frozenset()) -> bytes:
    """A deterministic zip of ``files`` (sorted, fixed timestamps), as the CLI sends a folder; the paths in
    ``executable`` get mode 0755 in their ``external_attr``, the others 0644."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(files):
            info = zipfile.ZipInfo(path, date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = (stat.S_IFREG | (0o755 if path in executable else 0o644)) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, files[path])
    return out.getvalue()


# ---------------------------------------------------------------------------------------------- writing


def folder_names(docs: list[dict[str, Any]]) -> list[str]:
    """Each exported doc's folder: its own (one clean path component) or its name's slug, made unique."""
    used: set[str] = set()
    out = []
    for doc in docs:
        wanted = str(doc.get("folder") or "")
        clean = safe_relpath(wanted) if wanted else None
        base = clean.rsplit("/", 1)[-1] if clean else slug(doc["name"])
        folder, n = base, 2
        while folder in used:
            folder, n = f"{base}-{n}", n + 1
        used.add(folder)
        out.append(folder)
    return out


def _doc_files(doc: dict[str, Any]) -> tuple[dict[str, bytes], set[str]]:
    """A doc's files other than SKILL.md (``file_bytes``, each path checked again: a doc from elsewhere
    never names a path out of its folder) and the ones its ``files`` entries mark executable."""
    runnable = {str(f.get("path")) for f in doc.get("files") or [] if f.get("executable")}
    files = {
        rel: data
        for rel, data in (doc.get("file_bytes") or {}).items()
        if safe_relpath(rel) == rel and rel != SKILL_MD
    }
    return files, runnable & set(files)


def docs_zip(docs: list[dict[str, Any]]) -> bytes:
    """Exported docs as one zip of ``<folder>/SKILL.md`` plus each file (``file_bytes``), executable bits
    kept: what ``GET /api/v1/skills/export`` downloads, and what an import takes back."""
    files: dict[str, bytes] = {}
    executable: set[str] = set()
    for doc, folder in zip(docs, folder_names(docs), strict=True):
        files[f"{folder}/{SKILL_MD}"] = doc["skill_md"].encode("utf-8")
        own, runnable = _doc_files(doc)
        files.update({f"{folder}/{rel}": data for rel, data in own.items()})
        executable |= {f"{folder}/{rel}" for rel in runnable}
    return write_zip(files, executable)


def _write_file(op: str, folder_real: str, rel: str, data: bytes, mode: int) -> None:
    """``data`` at ``folder_real/rel``: every folder on the way created and checked to be where it was
    asked (no link leads elsewhere), the file opened without following a link."""
    target = os.path.join(folder_real, *rel.split("/"))
    parent = os.path.dirname(target)
    os.makedirs(parent, exist_ok=True)
    if os.path.realpath(parent) != parent:
        raise InvalidArgument(f"{op}: {rel}: a folder on its way is a link; nothing written", op=op)
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(target, flags, mode)
    except OSError as e:
        raise InvalidArgument(f"{op}: {rel} cannot be written ({e.strerror})", op=op) from None
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chmod(target, mode)  # the umask may have taken bits the round trip keeps


def write_folder(op: str, path: str, docs: list[dict[str, Any]], *, protect: Sequence[str] = ()) -> int:
    """Write each doc as ``<path>/<folder>/SKILL.md`` plus its ``file_bytes``; a file its ``files`` entry
    marks ``executable`` gets mode 0755, the others 0644, so a script's bit survives the round trip.
    Confined: nothing is written in a ``protect`` folder (the data dir; a skill folder named like it, next to
    it, is refused too) nor through a link (a skill folder or one on a file's way that is a link, or a file
    that is one, is refused). Every skill folder is checked before anything is written."""
    root = Path(path)
    if not root.is_absolute():
        raise InvalidArgument(f"{op}: path must be absolute", op=op, field="path")
    check_unprotected(op, path, protect)
    names = folder_names(docs)
    root.mkdir(parents=True, exist_ok=True)
    real_root = os.path.realpath(root)
    for folder in names:
        target = os.path.join(real_root, folder)
        check_unprotected(op, target, protect)
        if os.path.islink(target) or os.path.realpath(target) != target:
            raise InvalidArgument(f"{op}: {target} is a link; nothing written", op=op, field="path")
    for doc, folder in zip(docs, names, strict=True):
        folder_real = os.path.join(real_root, folder)
        _write_file(op, folder_real, SKILL_MD, doc["skill_md"].encode("utf-8"), 0o644)
        files, runnable = _doc_files(doc)
        for rel, data in files.items():
            _write_file(op, folder_real, rel, data, 0o755 if rel in runnable else 0o644)
    return len(docs)
