"""Skill folders as the ecosystem writes them (agentskills.io: ``<name>/SKILL.md`` plus references, scripts,
templates, assets, a license), read leniently and kept byte for byte.

A ``SKILL.md`` is split, without re-serializing anything, into its *head* (the front matter with its
``---`` lines, exactly as written) and its *body* (everything after). The store keeps both verbatim, so an
export writes the same bytes back; the only thing an export adds is one line of our own keys,
``minihermes: {...}`` (JSON, valid YAML), under ``metadata:`` (or at the top level when ``metadata`` is not
a block mapping), which an import strips again: import -> export -> import is the identity.

Leniency: what real skills contain is accepted with a warning (a description over 1,024 characters, a body
over 20,000, unknown front-matter keys, ``allowed-tools`` naming tools we do not have, front matter that is
not strict YAML). Only what is unsafe is refused, per file with a reason: paths that climb out or are
absolute, links out of the folder, files over the size limits.
"""

from __future__ import annotations

import hashlib
import json
import mimetypes
import re
from dataclasses import dataclass, field
from typing import Any

import yaml  # type: ignore[import-untyped]

from minihermes.context.redact import may_hold_secret, secret_kinds

from ._model import MAX_DESCRIPTION_CHARS, MAX_NAME_CHARS, MAX_TRIGGER_CHARS, MAX_TRIGGERS

SKILL_MD = "SKILL.md"
OUR_KEY = "minihermes"
KNOWN_KEYS = frozenset(
    {"name", "description", "license", "allowed-tools", "metadata", "compatibility", OUR_KEY}
)
ALLOWED_TOOLS = {
    "bash": "terminal",
    "read": "read_file",
    "write": "write_file",
    "edit": "write_file",
    "multiedit": "write_file",
    "glob": "list_files",
    "ls": "list_files",
    "webfetch": "http_request",
}
"""``allowed-tools`` names (Claude Code's) -> our tools; anything else is kept and reported."""

_FRONT = re.compile(
    r"\A(?P<open>\ufeff?---[ \t]*\r?\n)(?P<yaml>.*?)(?P<close>\r?\n---[ \t]*(?:\r?\n|\Z))", re.S
)
_OUR_LINE = re.compile(r"^[ \t]*minihermes:[ \t]*\{.*\}[ \t]*\r?$")
_TOP_KEY = re.compile(r"^(?P<key>[A-Za-z_][\w.-]*)[ \t]*:(?P<rest>.*)$")


@dataclass(frozen=True)
class Limits:
    """Size limits of one skill (``skill_store`` args; docs/configuration.md)."""

    max_file_bytes: int = 10 * 1024 * 1024
    max_skill_bytes: int = 50 * 1024 * 1024
    max_skill_files: int = 1000
    max_archive_bytes: int = 200 * 1024 * 1024
    """An upload or archive: compressed size, and (separately) everything it unpacks to."""
    max_archive_members: int = 20_000


@dataclass
class SkillFolder:
    """One skill's files as found (``folder``: its directory in the collection, "" for a lone SKILL.md)."""

    folder: str
    skill_md: bytes
    files: dict[str, bytes] = field(default_factory=dict)
    refused: list[dict[str, str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    executable: set[str] = field(default_factory=set)
    """The files (paths as in ``files``) that had an executable bit where they came from."""


@dataclass
class ParsedSkill:
    """What the store keeps of a skill folder: ``head`` and ``body`` verbatim, the files, and the fields
    the index needs (``description`` is the bounded excerpt; ``full_description`` the whole)."""

    folder: str
    name: str
    description: str
    full_description: str
    head: str
    body: str
    files: dict[str, bytes]
    triggers: list[str]
    tags: list[str]
    allowed_tools: list[str]
    license: str
    refused: list[dict[str, str]]
    warnings: list[str]
    executable: set[str] = field(default_factory=set)
    ours: dict[str, Any] = field(default_factory=dict)
    """Our keys as the file had them (``minihermes: {...}``): hints only, never trusted (see the store)."""


class Refused(Exception):
    """A whole skill cannot be read (no name, not UTF-8 text): ``reason``."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


# ------------------------------------------------------------------------------------------- paths


def safe_relpath(raw: str) -> str | None:
    """A member path as a clean relative POSIX path, or None when it is unsafe (absolute, a drive, ``..``
    anywhere, NUL or control characters, over-long components)."""
    if not raw or "\0" in raw or "\\" in raw or any(ord(c) < 32 for c in raw):
        return None
    if raw.startswith("/") or re.match(r"^[A-Za-z]:", raw):
        return None
    parts = [p for p in raw.split("/") if p not in ("", ".")]
    if not parts or any(p == ".." or len(p.encode()) > 255 for p in parts) or len(parts) > 32:
        return None
    return "/".join(parts)


def media_type(path: str) -> str:
    guessed, _ = mimetypes.guess_type(path)
    if guessed:
        return guessed
    if path.endswith((".md", ".markdown")):
        return "text/markdown"
    return "application/octet-stream"


def is_text(data: bytes) -> bool:
    if b"\0" in data[:8192]:
        return False
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def group(
    entries: dict[str, bytes],
    refused: list[dict[str, str]],
    unowned: list[dict[str, str]],
    *,
    lone_name: str = "",
    executable: set[str] | frozenset[str] = frozenset(),
) -> tuple[list[SkillFolder], list[str]]:
    """Split a collection's files into skills: every folder holding a ``SKILL.md`` is one, owning the
    files below it (the deepest such folder wins). Returns the skills and warnings for stray files;
    refusals outside every skill go to ``unowned`` (``skill: ""``). ``executable``: the collection's
    paths that had an executable bit (kept per skill, relative to its folder)."""
    roots = sorted(
        {p.rsplit("/", 1)[0] if "/" in p else "" for p in entries if p.rsplit("/", 1)[-1] == SKILL_MD},
        key=lambda r: (-r.count("/"), r),
    )
    by_root: dict[str, SkillFolder] = {
        r: SkillFolder(folder=r or lone_name, skill_md=entries[f"{r}/{SKILL_MD}" if r else SKILL_MD])
        for r in roots
    }
    stray: list[str] = []
    for path, data in sorted(entries.items()):
        root = next((r for r in roots if r == "" or path.startswith(r + "/")), None)
        if root is None:
            stray.append(path)
            continue
        rel = path[len(root) + 1 :] if root else path
        if rel != SKILL_MD:
            by_root[root].files[rel] = data
            if path in executable:
                by_root[root].executable.add(rel)
    for item in refused:
        path = item["path"]
        root = next((r for r in roots if r == "" or path.startswith(r + "/")), None)
        if root is not None:
            by_root[root].refused.append({**item, "path": path[len(root) + 1 :] if root else path})
        else:
            unowned.append({"skill": "", **item})
    warnings = [f"{p}: not inside a skill folder (no SKILL.md above it); left out" for p in stray[:50]]
    return [by_root[r] for r in sorted(by_root)], warnings


# -------------------------------------------------------------------------------------------- SKILL.md


def split(text: str) -> tuple[str, str, str]:
    """(head, yaml text, body) of a SKILL.md; head is "" when there is no front matter."""
    m = _FRONT.match(text)
    if m is None:
        return "", "", text
    return text[: m.end()], m.group("yaml"), text[m.end() :]


def _loose_yaml(text: str) -> dict[str, Any]:
    """Top-level ``key: value`` pairs of front matter that strict YAML refuses (an unquoted ``: `` in a
    description is the usual case); indented lines continue the previous value."""
    out: dict[str, Any] = {}
    key = ""
    for line in text.splitlines():
        m = _TOP_KEY.match(line)
        if m and not line[:1].isspace():
            key = m.group("key")
            out[key] = m.group("rest").strip().strip("\"'")
        elif key and line.strip():
            previous = out.get(key)
            out[key] = f"{previous} {line.strip()}".strip() if isinstance(previous, str) else previous
    return out


def _front(yaml_text: str, warnings: list[str]) -> dict[str, Any]:
    if not yaml_text.strip():
        return {}
    try:
        front = yaml.safe_load(yaml_text)
    except yaml.YAMLError:
        warnings.append("front matter is not strict YAML; read leniently as key: value lines")
        return _loose_yaml(yaml_text)
    if not isinstance(front, dict):
        warnings.append("front matter is not a mapping; ignored")
        return {}
    return front


def strip_ours(head: str) -> tuple[str, dict[str, Any]]:
    """The head without our line (and a ``metadata:`` line left empty by its removal), and our keys."""
    if not head:
        return head, {}
    lines = head.splitlines(keepends=True)
    ours: dict[str, Any] = {}
    out: list[str] = []
    for i, line in enumerate(lines):
        if _OUR_LINE.match(line.rstrip("\n")):
            try:
                value = json.loads(line.split(":", 1)[1].strip())
            except ValueError:
                out.append(line)
                continue
            ours = value if isinstance(value, dict) else {}
            # A "metadata:" line we added has nothing else under it: drop it too.
            if (
                line[:1].isspace()
                and out
                and out[-1].rstrip("\r\n") == "metadata:"
                and (i + 1 >= len(lines) or not lines[i + 1][:1].isspace() or lines[i + 1].startswith("---"))
            ):
                out.pop()
            continue
        out.append(line)
    return "".join(out), ours


def inject_ours(head: str, ours: dict[str, Any], newline: str = "\n") -> str:
    """``head`` with our keys as one line: under a block ``metadata:`` mapping when there is one, else
    a new ``metadata:`` block when there is no ``metadata`` key, else at the top level."""
    line = f"{OUR_KEY}: {json.dumps(ours, ensure_ascii=False, sort_keys=True)}"
    m = _FRONT.match(head)
    assert m is not None, "inject_ours needs a head with front matter"
    body_lines = m.group("yaml").split("\n") if m.group("yaml") else []
    meta_at = next((i for i, ln in enumerate(body_lines) if ln.rstrip("\r") == "metadata:"), -1)
    has_meta = any(ln.startswith("metadata:") for ln in body_lines)
    if meta_at >= 0:
        child = next((ln for ln in body_lines[meta_at + 1 :] if ln.strip()), "")
        indent = child[: len(child) - len(child.lstrip())] if child[:1].isspace() else "  "
        cr = "\r" if body_lines[meta_at].endswith("\r") else ""
        body_lines.insert(meta_at + 1, f"{indent}{line}{cr}")
    elif not has_meta:
        cr = "\r" if body_lines and body_lines[-1].endswith("\r") else ""
        body_lines += [f"metadata:{cr}", f"  {line}{cr}"]
    else:
        cr = "\r" if body_lines and body_lines[-1].endswith("\r") else ""
        body_lines.append(f"{line}{cr}")
    return m.group("open") + "\n".join(body_lines) + m.group("close") + head[m.end() :]


def excerpt(text: str, limit: int = MAX_DESCRIPTION_CHARS) -> str:
    """At most ``limit`` characters, cut at a word with an ellipsis."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = text[: limit - 1].rsplit(" ", 1)[0]
    return cut + "…"


def _words(value: Any, what: str, warnings: list[str]) -> list[str]:
    raw = value if isinstance(value, list) else []
    out: list[str] = []
    for item in raw:
        word = " ".join(str(item).split())
        if word and len(word) <= MAX_TRIGGER_CHARS and word.lower() not in {w.lower() for w in out}:
            out.append(word)
    if len(out) > MAX_TRIGGERS:
        warnings.append(f"{what}: only the first {MAX_TRIGGERS} are used")
    return out[:MAX_TRIGGERS]


def map_allowed_tools(value: Any, warnings: list[str]) -> list[str]:
    """``allowed-tools`` (a list, or a space/comma separated string; ``Bash(git:*)`` style scopes are
    dropped) mapped to our tool names; names without a counterpart are reported."""
    items = value if isinstance(value, list) else re.split(r"[,\s]+(?![^()]*\))", str(value or ""))
    out: list[str] = []
    unknown: list[str] = []
    for item in items:
        name = str(item).strip().split("(", 1)[0].strip()
        if not name:
            continue
        ours = ALLOWED_TOOLS.get(name.lower()) or (name if re.fullmatch(r"[a-z][a-z0-9_]*", name) else "")
        if ours and ours not in out:
            out.append(ours)
        elif not ours:
            unknown.append(name)
    if unknown:
        warnings.append(
            f"allowed-tools: no counterpart here for {', '.join(unknown[:10])} (kept in the file)"
        )
    return out


def parse(found: SkillFolder) -> ParsedSkill:
    """Read a skill folder leniently. Raises ``Refused`` only when there is no usable skill at all."""
    warnings = list(found.warnings)
    try:
        text = found.skill_md.decode("utf-8")
    except UnicodeDecodeError:
        raise Refused("SKILL.md is not UTF-8 text") from None
    head, yaml_text, body = split(text)
    clean_head, ours = strip_ours(head)
    if clean_head != head:
        _, yaml_text, _ = split(clean_head + body)
    front = _front(yaml_text, warnings) if clean_head else {}
    if not clean_head:
        warnings.append("SKILL.md has no front matter")
    folder_name = found.folder.rsplit("/", 1)[-1]
    name = front.get("name")
    if not isinstance(name, str) or not name.strip():
        if not folder_name:
            raise Refused("no name: SKILL.md needs front matter with a name")
        warnings.append(f"no name in the front matter; the folder's name '{folder_name}' is used")
        name = folder_name
    name = " ".join(name.split())
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        raise Refused("name has control characters")
    if len(name) > MAX_NAME_CHARS:
        raise Refused(f"name is longer than {MAX_NAME_CHARS} characters")
    if not re.fullmatch(r"[a-z0-9]+(?:-[a-z0-9]+)*", name):
        warnings.append(f"name '{name}' is not lower-case letters, digits and hyphens (kept as written)")
    description = front.get("description")
    if not isinstance(description, str) or not description.strip():
        first = next(
            (p.strip() for p in body.split("\n\n") if p.strip() and not p.lstrip().startswith("#")), ""
        )
        description = first or name
        warnings.append("no description in the front matter; the body's first paragraph is used")
    if len(description) > MAX_DESCRIPTION_CHARS:
        warnings.append(
            f"description is {len(description)} characters; kept whole, the index and the prompt use "
            f"the first {MAX_DESCRIPTION_CHARS}"
        )
    if not body.strip():
        warnings.append("SKILL.md has no body")
    unknown = sorted(str(k) for k in front if k not in KNOWN_KEYS)
    if unknown:
        warnings.append(f"front-matter keys kept as written (not used here): {', '.join(unknown[:20])}")
    meta = front.get("metadata") if isinstance(front.get("metadata"), dict) else {}
    assert isinstance(meta, dict)
    triggers = _words(ours.get("triggers", meta.get("triggers", front.get("triggers"))), "triggers", warnings)
    tags = _words(ours.get("tags", meta.get("tags", front.get("tags"))), "tags", warnings)
    allowed = map_allowed_tools(front.get("allowed-tools"), warnings) if "allowed-tools" in front else []
    license_ = front.get("license")
    if not clean_head:  # given one now, so that an export imports back to the same bytes
        clean_head = learned_head(name, description.strip(), blank_line=False)
    return ParsedSkill(
        folder=found.folder,
        name=name,
        description=excerpt(description),
        full_description=description.strip(),
        head=clean_head,
        body=body,
        files=dict(found.files),
        triggers=triggers,
        tags=tags,
        allowed_tools=allowed,
        license=str(license_) if isinstance(license_, str | int | float) else "",
        refused=list(found.refused),
        warnings=warnings,
        executable={p for p in found.executable if p in found.files},
        ours=ours,
    )


def check_files(parsed: ParsedSkill, limits: Limits) -> None:
    """Drop (and report) files over the per-file, per-skill size and count limits."""
    total = len(parsed.head.encode()) + len(parsed.body.encode())
    kept: dict[str, bytes] = {}
    for path in sorted(parsed.files):
        data = parsed.files[path]
        if len(data) > limits.max_file_bytes:
            parsed.refused.append(
                {
                    "path": path,
                    "reason": f"oversized: {len(data)} bytes, the limit is {limits.max_file_bytes}",
                }
            )
        elif total + len(data) > limits.max_skill_bytes:
            parsed.refused.append(
                {"path": path, "reason": f"oversized: the skill would exceed {limits.max_skill_bytes} bytes"}
            )
        elif len(kept) >= limits.max_skill_files:
            parsed.refused.append(
                {"path": path, "reason": f"too many files: at most {limits.max_skill_files} per skill"}
            )
        else:
            kept[path] = data
            total += len(data)
    parsed.files = kept
    parsed.executable &= set(kept)


MAX_SECRET_FINDINGS = 50
"""Secret-shaped findings reported per imported skill (enough to send the admin looking; more are not listed)."""


def find_secrets(parsed: ParsedSkill) -> list[dict[str, Any]]:
    """Where an imported skill carries something shaped like a secret (the detectors that redact chat,
    ``minihermes.context.redact``): ``[{path, line, kind}]`` over its SKILL.md and its text files, at most
    ``MAX_SECRET_FINDINGS``. Names the file, the line and the kind of secret, never the secret: the approving
    admin is told to look, the content is kept byte for byte (an import is lossless)."""
    texts = [(SKILL_MD, parsed.head + parsed.body)]
    texts += [(path, data.decode("utf-8")) for path, data in sorted(parsed.files.items()) if is_text(data)]
    found: list[dict[str, Any]] = []
    for path, text in texts:
        if not may_hold_secret(text):
            continue
        for number, line in enumerate(text.splitlines(), 1):
            for kind in secret_kinds(line):
                if len(found) == MAX_SECRET_FINDINGS:
                    return found
                found.append({"path": path, "line": number, "kind": kind})
    return found


def content_hash(head: str, body: str, files: list[dict[str, Any]]) -> str:
    """What makes two versions of a skill the same: its SKILL.md as kept (without our keys) and each file's
    path, content and executable bit. Exported as our ``hash`` key (informational: an import recomputes it)."""
    text = (head + body).encode()  # the whole SKILL.md: where the head ends is not content
    h = hashlib.sha256(len(text).to_bytes(8, "big") + text)
    for f in sorted(files, key=lambda f: str(f["path"])):
        h.update(f"\0{f['path']}\0{f['sha256']}\0{int(bool(f.get('executable')))}".encode())
    return h.hexdigest()


def learned_head(name: str, description: str, *, blank_line: bool = True) -> str:
    """The front matter of a skill that came without one (a learned skill, a SKILL.md without front
    matter): name and description."""
    text = yaml.safe_dump({"name": name, "description": description}, sort_keys=False, allow_unicode=True)
    return f"---\n{text}---\n" + ("\n" if blank_line else "")


def render(head: str, body: str, ours: dict[str, Any]) -> str:
    """A SKILL.md: the head with our keys injected, then the body, both as kept."""
    return inject_ours(head, ours) + body
