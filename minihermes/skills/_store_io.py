"""The skill store's reads and writes of host primitives (never the server's disk: see ``_archive.py`` for
the folders the CLI reads and writes on its own machine)."""

from __future__ import annotations

import hashlib
from typing import Any

from minihermes.runtime import Host, NotFound

TEXT_INDEX = "skills"
MAX_IMPORT = 10_000


def record_key(skill_id: str) -> str:
    return f"skill:{skill_id}"


def version_key(skill_id: str, version: int) -> str:
    return f"skill_v:{skill_id}:{version:06d}"


def blob_name(skill_id: str, version: int) -> str:
    return f"skill/{skill_id}/v{version}"


def workflow_key(turn_id: str) -> str:
    """One extraction workflow per turn; turn ids come from the agent, so they are hashed into a key."""
    return "learn-" + hashlib.sha256(turn_id.encode()).hexdigest()[:24]


def learned_key(user_id: str, intent: str, tool_names: list[str]) -> str:
    """The marker of a request already taught: the user, the request's words (case and spacing folded)
    and the tools it took, hashed (no message text is kept)."""
    return (
        learned_prefix(user_id)
        + hashlib.sha256("\x1f".join([" ".join(intent.lower().split()), *tool_names]).encode()).hexdigest()[
            :32
        ]
    )


def learned_prefix(user_id: str) -> str:
    return "learned:" + hashlib.sha256(user_id.encode()).hexdigest()[:16] + ":"


def _owner_of(record: dict[str, Any]) -> str:
    return "" if record["scope"] == "tenant" else str(record["owner"])


async def put_record(host: Host, record: dict[str, Any], old: dict[str, Any] | None) -> None:
    """The record, then the tuples that changed with it: ``["skill_trigger", trigger, id]`` and
    ``["skill_tag", tag, id, name]`` (pattern-readable indexes). Only added or removed entries
    are written or taken: the tuple space indexes the first element only, so a take scans every tuple of
    its kind, which merges (that only add words) never need."""
    await host.kv.put(record_key(record["skill_id"]), record)
    sid = record["skill_id"]
    old_triggers = {t.lower() for t in (old or {}).get("triggers", [])}
    new_triggers = {t.lower() for t in record["triggers"]}
    for trigger in sorted(old_triggers - new_triggers):
        await host.tuples.take_all(["skill_trigger", trigger, sid])
    for trigger in sorted(new_triggers - old_triggers):
        await host.tuples.write(["skill_trigger", trigger, sid])
    old_tags = set((old or {}).get("tags", []))
    renamed = old is not None and old["name"] != record["name"]
    for tag in sorted(old_tags if renamed else old_tags - set(record["tags"])):
        await host.tuples.take_all(["skill_tag", tag, sid, None])
    for tag in record["tags"]:
        if renamed or tag not in old_tags:
            await host.tuples.write(["skill_tag", tag, sid, record["name"]])


async def index_text(host: Host, record: dict[str, Any], procedure: str) -> None:
    fields = {
        "name": record["name"],
        "description": record["description"],
        "triggers": " ".join(record["triggers"] + record["tags"]),
        "procedure": procedure,
    }
    await host.text.upsert(TEXT_INDEX, record["skill_id"], fields, {"owner": _owner_of(record)})


async def put_version(
    host: Host,
    record: dict[str, Any],
    procedure: str,
    reason: str,
    author: str,
    folder: dict[str, Any] | None = None,
) -> None:
    """A version: its procedure (a skill folder's body, verbatim) in a blob, its meta in KV. ``folder``
    (``{head, files}``: the SKILL.md front matter's blob and the files' manifest) is the exact set of
    files the version has; their bytes are content-addressed blobs shared by every version."""
    sid, version = record["skill_id"], record["version"]
    await host.blobs.put(blob_name(sid, version), procedure.encode(), "text/markdown")
    meta: dict[str, Any] = {
        "version": version,
        "reason": reason[:500],
        "author": author,
        "created_at": host.now(),
    }
    if folder:
        meta["head"] = folder.get("head", "")
        meta["files"] = list(folder.get("files") or [])
    await host.kv.put(version_key(sid, version), meta)


async def version_meta(host: Host, skill_id: str, version: int) -> dict[str, Any]:
    meta = await host.kv.get(version_key(skill_id, version))
    return meta if isinstance(meta, dict) else {}


def file_blob(sha256: str) -> str:
    return f"skill_file/{sha256}"


async def put_content(host: Host, data: bytes, content_type: str) -> str:
    """A content-addressed blob (``skill_file/<sha256>``), written once however many versions share it."""
    digest = hashlib.sha256(data).hexdigest()
    name = file_blob(digest)
    if not any(info.name == name for info in await host.blobs.list(name)):
        await host.blobs.put(name, data, content_type)
    return digest


async def get_content(host: Host, sha256: str) -> bytes:
    data = await host.blobs.get(file_blob(sha256))
    if data is None:
        raise NotFound(f"skill file content {sha256[:12]} is missing", field="path")
    return data


async def get_version(host: Host, skill_id: str, version: int) -> str:
    data = await host.blobs.get(blob_name(skill_id, version))
    if data is None:
        raise NotFound(f"skill '{skill_id}' has no stored version {version}", field="version")
    return data.decode()


async def versions(host: Host, skill_id: str) -> list[dict[str, Any]]:
    rows = await host.kv.list(f"skill_v:{skill_id}:")
    return [v for _k, v in rows if isinstance(v, dict)]


async def erase(host: Host, record: dict[str, Any]) -> None:
    """Every trace of a skill in the store (forgetting the person it was learned from): its record, its
    versions' meta and procedures, its text index entry and its tuples. The content-addressed files of an
    imported folder (``skill_file/``) may be shared with other skills and stay."""
    sid = record["skill_id"]
    for key, _ in await host.kv.list(f"skill_v:{sid}:"):
        await host.kv.delete(key)
    for version in range(1, int(record.get("version") or 1) + 1):
        await host.blobs.delete(blob_name(sid, version))
    await host.text.remove(TEXT_INDEX, sid)
    for trigger in {t.lower() for t in record.get("triggers", [])}:
        await host.tuples.take_all(["skill_trigger", trigger, sid])
    for tag in record.get("tags", []):
        await host.tuples.take_all(["skill_tag", tag, sid, None])
    await host.kv.delete(record_key(sid))


async def forget_author(host: Host, skill_id: str, user_id: str) -> None:
    for key, meta in await host.kv.list(f"skill_v:{skill_id}:"):
        if isinstance(meta, dict) and meta.get("author") == user_id:
            await host.kv.put(key, {**meta, "author": "(forgotten)"})
