"""The skill store's records, versions, index upkeep and events: what its ops (``skill_store.py``) share."""

from __future__ import annotations

import asyncio
import re
import uuid
from collections import Counter, OrderedDict
from typing import Any, Literal

from minihermes import permissions
from minihermes.audit import fire_audit, scrub_secrets
from minihermes.context.embeddings import Embedder, load_embedder
from minihermes.runtime import Conflict, GenServer, InvalidArgument, NotFound, current_context

from . import _access as access
from . import _store_io as io
from ._index import IndexDoc, SkillIndex, weighted_terms
from ._model import (
    MAX_DESCRIPTION_CHARS,
    MAX_NAME_CHARS,
    MAX_PROCEDURE_CHARS,
    USABLE,
    check_text,
    check_words,
    needs_approval,
    procedure_tools,
)
from ._semantic import skill_text
from ._text import jaccard, term_counts, tokens

Scope = Literal["user", "tenant"]
_SKILL_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$")
_PROC_TERMS = 300
"""Procedure terms kept in the record so activation rebuilds the index without reading every blob."""
DUPLICATE_SIMILARITY = 0.6
_CACHE = 4096
MAX_REASON_CHARS = 500
"""A person's reason for a decision on a skill (``reject_skill``), kept on the record and in the audit."""


def check_id(op: str, skill_id: str) -> str:
    if not _SKILL_ID.match(skill_id):
        raise InvalidArgument(f"{op}: skill_id is not a valid id", op=op, field="skill_id")
    return skill_id


def check_reason(op: str, reason: str) -> str:
    """A required, bounded reason, with anything shaped like a secret replaced by ``[REDACTED]``."""
    return str(scrub_secrets(check_text(op, "reason", reason, MAX_REASON_CHARS)))


def _signature(record: dict[str, Any]) -> list[str]:
    return tokens(" ".join([record["name"], record["description"], *record.get("triggers", [])]))


def view(record: dict[str, Any]) -> dict[str, Any]:
    """A record as replies show it (internal index data left out), with its trust: ``provenance`` (the
    dict of ids, its ``source`` the string: ``agent``, ``import``, ``user``, ``admin``, ``tool:<name>``),
    ``derived_from_untrusted`` and ``quarantined``."""
    out = {k: v for k, v in record.items() if k != "proc_terms"}
    out["provenance"] = {**record["provenance"], "source": source_of(record)}
    out["derived_from_untrusted"] = bool(record.get("derived_from_untrusted"))
    out["quarantined"] = quarantined(record)
    return out


# -- provenance and quarantine --------------------------------------------------------------------------------


def source_of(record: dict[str, Any]) -> str:
    """Where the record's content came from, as the runtime stamped it ("unrecorded" before issue 25)."""
    return str(record["provenance"].get("source") or "unrecorded")


def quarantined(record: dict[str, Any]) -> bool:
    """Derived from untrusted content and not confirmed yet: never matched, injected, merged or
    exported as trusted."""
    return bool(record.get("quarantined"))


def request_origin(*, learned: bool = False) -> tuple[str, bool]:
    """``(source, untrusted)`` of what the current request writes, from the runtime's stamp on the
    context (``permissions.provenance``), never from an argument. ``learned``: the learning workflow's
    proposal, which is the agent's (``agent``) unless the request is stamped otherwise."""
    ctx = current_context()
    source, untrusted = permissions.provenance(ctx)
    if learned and not ctx.provenance:
        source = "agent"
    return source, untrusted


def taint(record: dict[str, Any], source: str, untrusted: bool, now: float) -> bool:
    """Mark ``record`` as written (also) from content derived from untrusted output: trust only goes
    down (``derived_from_untrusted`` is the OR of every write's), and the record is quarantined until
    confirmed again. Returns whether the record became quarantined now."""
    if not untrusted:
        return False
    fresh = not quarantined(record)
    record["provenance"] = {**record["provenance"], "source": source}
    record["derived_from_untrusted"] = True
    record["quarantined"] = True
    record.pop("confirmed_by", None)
    if fresh:
        record["quarantined_at"] = now
    return fresh


class SkillStoreCore(GenServer):
    """State shared by the ops: every record in memory (as in KV), the BM25 index, a procedure cache."""

    async def on_init(self, actor_id: str, args: dict[str, Any]) -> None:
        self.learn_min_tool_calls = int(args.get("learn_min_tool_calls", 3))
        self.duplicate_similarity = float(args.get("duplicate_similarity", DUPLICATE_SIMILARITY))
        self.workflow = str(args.get("workflow", "skill_workflow"))
        self.relearn_after = float(args.get("relearn_after_days", 30)) * 86400.0
        self._learned: OrderedDict[str, float] = OrderedDict()
        """Recently seen learned-request markers (``learned:`` keys in KV) and when they were taught."""
        self.index = SkillIndex(half_life_days=float(args.get("recency_half_life_days", 30)))
        self._records: dict[str, dict[str, Any]] = {}
        """Every record, as in KV: the index's signals and the near-duplicate check read them here."""
        self._procedures: OrderedDict[tuple[str, int], str] = OrderedDict()
        for _key, record in await self.host.kv.list("skill:"):
            if isinstance(record, dict) and "skill_id" in record:
                self._records[record["skill_id"]] = record
                self.index.upsert(self._doc(record))
        self._audit_on = self.host.has_actor("audit_event")
        self.host.join("svc:skill_store")
        if self.host.has_actor("curator"):
            self.host.send("curator", "ensure_scheduled", {})
        self.embedder: Embedder | None = args.get("embedder")
        """Semantic matching: injected (tests), or loaded in the background when the extra is installed."""
        mode = str(args.get("semantic", "auto"))
        if self.embedder is not None or mode != "off":
            self.host.spawn(self._start_semantic(required=mode == "on"))

    # -- semantic matching (optional) ----------------------------------------------------------------------

    async def _start_semantic(self, *, required: bool) -> None:
        if self.embedder is None:
            self.embedder = await asyncio.to_thread(load_embedder)
            if self.embedder is None:
                if required:
                    self.host.log.warning(
                        "skill_store: semantic = 'on' but the semantic extra is not installed"
                    )
                return
        await self._embed(list(self._records))

    async def _embed(self, skill_ids: list[str]) -> None:
        """Vectors for these skills, in a worker thread, in batches (the mailbox never waits on them)."""
        embedder = self.embedder
        if embedder is None:
            return
        for i in range(0, len(skill_ids), 256):
            batch = [sid for sid in skill_ids[i : i + 256] if sid in self._records]
            texts = [skill_text(self._records[sid]) for sid in batch]
            if not texts:
                continue
            vectors = await asyncio.to_thread(embedder.encode, texts)
            for sid, vec in zip(batch, vectors, strict=True):
                self.index.set_vector(sid, vec)

    async def _query_vector(self, query: str) -> Any:
        if self.embedder is None:
            return None
        return (await asyncio.to_thread(self.embedder.encode, [query]))[0]

    # -- helpers ------------------------------------------------------------------------------------------

    def _fields(
        self,
        op: str,
        name: str,
        description: str,
        procedure: str,
        triggers: list[str] | None,
        tags: list[str] | None,
    ) -> dict[str, Any]:
        return {
            "name": check_text(op, "name", name, MAX_NAME_CHARS),
            "description": check_text(op, "description", description, MAX_DESCRIPTION_CHARS),
            "procedure": check_text(op, "procedure", procedure, MAX_PROCEDURE_CHARS),
            "triggers": check_words(op, "triggers", triggers),
            "tags": check_words(op, "tags", tags),
        }

    def _get(self, op: str, skill_id: str) -> dict[str, Any]:
        record = self._records.get(skill_id)
        if record is None:
            raise NotFound(f"{op}: no skill '{skill_id}'", op=op, field="skill_id")
        return record

    def _require_visible(self, op: str, record: dict[str, Any]) -> None:
        if not access.is_admin() and not access.can_see(record, access.acting_user()):
            raise NotFound(f"{op}: no skill '{record['skill_id']}'", op=op, field="skill_id")

    def _near_duplicate(self, probe: dict[str, Any], tools: list[str], owner: str) -> dict[str, Any] | None:
        """The closest skill of this owner (or the tenant) that is the same procedure in other words."""
        words = _signature(probe)
        query = " ".join([probe["name"], probe["description"], *probe["triggers"]])
        best: tuple[float, dict[str, Any]] | None = None
        for sid, _score in self.index.search(query, 10, user_id=owner, usable_only=False):
            record = self._records[sid]
            if record["status"] == "archived" or not access.can_see(record, owner) or quarantined(record):
                continue  # a quarantined skill is merged with nothing (nor patched) until confirmed
            similarity = jaccard(words, _signature(record))
            if record["tools"] == tools:
                similarity = max(similarity, 0.5 + similarity)  # same steps: wording may differ more
            if similarity >= self.duplicate_similarity and (best is None or similarity > best[0]):
                best = (similarity, record)
        return best[1] if best else None

    async def _patch(
        self, record: dict[str, Any], fields: dict[str, Any], *, reason: str, replace_words: bool = False
    ) -> dict[str, Any]:
        record = dict(record)
        source, untrusted = request_origin()
        if taint(record, source, untrusted, self.host.now()):
            self._event("skill_quarantined", record, f"provenance={source} (edited)")
        if not replace_words:
            fields["triggers"] = check_words(
                "propose_skill", "triggers", record["triggers"] + fields["triggers"]
            )[:32]
            fields["tags"] = check_words("propose_skill", "tags", record["tags"] + fields["tags"])[:32]
            fields["description"] = record["description"]
        record.update(description=fields["description"], triggers=fields["triggers"], tags=fields["tags"])
        current = await self._procedure(record["skill_id"], record["version"])
        previous = record["status"]
        if fields["procedure"].strip() != current.strip():
            record["tools"] = procedure_tools(fields["procedure"])
            record["needs_approval"] = needs_approval(record["tools"])
            approved = set(record["tools"]) <= set(record.get("approved_tools", []))
            if "admin" in current_context().roles:  # a person's edit; the skill services act as "system"
                record["approved_by"] = current_context().principal
                record["approved_tools"] = list(record["tools"])
            elif record["needs_approval"] and not approved and record["status"] in USABLE:
                record["status"] = "candidate"
                record["was_usable"] = True
            await self._write_version(record, fields["procedure"], reason)
            self._event("skill_versioned", record, f"version={record['version']} reason={reason}")
        record["updated_at"] = self.host.now()
        await self._save(record, previous_status=previous)
        return record

    def _new_record(
        self,
        fields: dict[str, Any],
        *,
        owner: str,
        provenance: dict[str, str],
        source: str,
        untrusted: bool,
        skill_id: str = "",
    ) -> dict[str, Any]:
        """A new candidate. ``provenance`` holds the ids erasure finds it by; ``source`` and ``untrusted``
        are the runtime's stamp (``request_origin``): an untrusted one is quarantined from the start."""
        now = self.host.now()
        tools = procedure_tools(fields["procedure"])
        return {
            "skill_id": skill_id or f"skill-{uuid.uuid4().hex[:16]}",
            "name": fields["name"],
            "description": fields["description"],
            "triggers": fields["triggers"],
            "tags": fields["tags"],
            "tools": tools,
            "status": "candidate",
            "pinned": False,
            "scope": "user",
            "owner": owner,
            "version": 1,
            "versions": 1,
            "provenance": {**provenance, "source": source},
            "derived_from_untrusted": untrusted,
            "quarantined": untrusted,
            **({"quarantined_at": now} if untrusted else {}),
            "needs_approval": needs_approval(tools),
            "approved_by": "",
            "evaluation": None,
            "created_at": now,
            "updated_at": now,
            "status_changed_at": now,
            "last_used_at": 0.0,
            "uses": 0,
            "successes": 0,
            "failures": 0,
        }

    async def _write_version(
        self,
        record: dict[str, Any],
        procedure: str,
        reason: str,
        *,
        first: bool = False,
        folder: dict[str, Any] | None = None,
    ) -> None:
        """Store a new version's procedure (blob first: a record never points at a missing version).
        ``folder`` (``{head, files}``) is the version's exact files; None keeps the current version's."""
        if folder is None and not first:
            meta = await io.version_meta(self.host, record["skill_id"], record["version"])
            folder = {"head": meta.get("head", ""), "files": meta.get("files") or []}
        record["versions"] = 1 if first else record["versions"] + 1
        record["version"] = record["versions"]
        record["proc_terms"] = dict(term_counts(procedure).most_common(_PROC_TERMS))
        record["tools"] = procedure_tools(procedure)
        if folder is not None and "origin" in record:
            record["file_count"] = len(folder.get("files") or [])
        await io.put_version(self.host, record, procedure, reason, current_context().principal, folder)
        self._procedures[(record["skill_id"], record["version"])] = procedure

    async def _procedure(self, skill_id: str, version: int) -> str:
        key = (skill_id, version)
        text = self._procedures.get(key)
        if text is None:
            text = await io.get_version(self.host, skill_id, version)
            self._procedures[key] = text
            if len(self._procedures) > _CACHE:
                self._procedures.popitem(last=False)
        else:
            self._procedures.move_to_end(key)
        return text

    async def _save(
        self, record: dict[str, Any], *, previous_status: str | None, reindex: bool = True
    ) -> None:
        """KV first (the source of truth), then the indexes."""
        old = self._records.get(record["skill_id"])
        await io.put_record(self.host, record, old)
        self._records[record["skill_id"]] = record
        if reindex or old is None:
            self.index.upsert(self._doc(record))
            await io.index_text(
                self.host, record, await self._procedure(record["skill_id"], record["version"])
            )
            if self.embedder is not None:
                self.host.spawn(self._embed([record["skill_id"]]))
        else:
            self.index.update_signals(self._doc(record, with_terms=False))

    def _doc(self, record: dict[str, Any], *, with_terms: bool = True) -> IndexDoc:
        terms: dict[str, float] = {}
        if with_terms:
            fields = {
                "name": record["name"].replace("-", " "),
                "description": record["description"],
                "triggers": " ".join(record["triggers"] + record["tags"]),
            }
            terms = weighted_terms(fields, Counter(record.get("proc_terms") or {}))
        return IndexDoc(
            skill_id=record["skill_id"],
            terms=terms,
            owner="" if record["scope"] == "tenant" else record["owner"],
            usable=record["status"] in USABLE and not quarantined(record),
            stale=record["status"] == "stale",
            pinned=record["pinned"],
            uses=record["uses"],
            successes=record["successes"],
            last_used_at=record["last_used_at"] or record["created_at"],
        )

    async def _transition(self, record: dict[str, Any], status: str, reason: str) -> dict[str, Any]:
        record = dict(record)
        previous = record["status"]
        if previous == status:
            return {"status": "ok", "skill_id": record["skill_id"], "skill_status": status, "changed": False}
        if status == "archived":
            record["was_usable"] = previous in USABLE
        record["status"] = status
        record["status_changed_at"] = self.host.now()
        await self._save(record, previous_status=previous, reindex=False)
        self._event("skill_status_changed", record, f"from={previous} to={status} reason={reason}")
        return {"status": "ok", "skill_id": record["skill_id"], "skill_status": status, "changed": True}

    async def _set_pinned(self, op: str, skill_id: str, pinned: bool) -> dict[str, Any]:
        record = dict(self._get(op, skill_id))
        access.require_owner(op, record)
        if pinned and record["status"] not in USABLE:
            raise Conflict(f"{op}: only an active or stale skill can be pinned", op=op, field="skill_id")
        record["pinned"] = pinned
        await self._save(record, previous_status=record["status"], reindex=False)
        self._event("skill_pinned" if pinned else "skill_unpinned", record, "")
        return {"status": "ok", "skill_id": skill_id, "pinned": pinned}

    def _proposal_reply(self, record: dict[str, Any], *, created: bool, patched: bool) -> dict[str, Any]:
        return {
            "status": "ok",
            "skill_id": record["skill_id"],
            "created": created,
            "patched": patched,
            "version": record["version"],
            "skill_status": record["status"],
        }

    def _event(
        self,
        event_type: str,
        record: dict[str, Any],
        detail: str,
        *,
        session_id: str = "",
        extra: dict[str, Any] | None = None,
    ) -> None:
        if self._audit_on:
            data = {"skill_id": record["skill_id"], "status": record["status"], "version": record["version"]}
            data.update(extra or {})
            fire_audit(
                self.host,
                event_type,
                f"skill={record['skill_id']} {detail}".strip(),
                session_id=session_id or record["provenance"].get("session_id", ""),
                data=data,
            )
