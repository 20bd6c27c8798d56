"""``skill_store`` (one per tenant): learned and imported procedures, their versions, matching and lifecycle.

Storage, one primitive per access pattern: the record (metadata, status,
usage, provenance) in KV under ``skill:<id>``; every version's procedure in a Blob ``skill/<id>/v<n>`` (never
deleted, so ``rollback`` can restore any of them); tuples ``["skill_trigger", trigger, id]`` and
``["skill_tag", tag, id, name]`` for pattern reads; the FTS5 text
index ``skills`` for ``search_skills``. ``match_skills`` runs on an in-memory BM25 index (``_index.py``)
rebuilt from the KV records on activation: a store query per match would not meet 10 ms at 100k skills.

Lifecycle: ``candidate`` (learned, not yet evaluated or approved: never matched) -> ``active`` -> ``stale``
(unused for a while; a use makes it active again) -> ``archived`` (``recover`` brings it back). An admin's
``reject_skill`` archives a candidate, noting who rejected it and why. Nothing is ever deleted, except
what forgetting a person erases (``forget_subject``). ``pinned`` skills are left alone by the curator. A skill learned in a user's sessions serves
only that user (``scope: user``) until an admin promotes it to the tenant. Every transition is audited.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable
from typing import Any, Literal

from pydantic import Field

from minihermes.context import prompt
from minihermes.context.assembly import context_part
from minihermes.context.embeddings import fuse
from minihermes.context.forget import may_forget, subject
from minihermes.runtime import (
    ActorArgs,
    ActorError,
    Conflict,
    InvalidArgument,
    NotFound,
    call,
    cast,
    current_context,
)

from . import _access as access
from . import _extract as extract
from . import _store_io as io
from ._model import (
    MAX_QUERY_CHARS,
    STATUSES,
    USABLE,
    check_text,
    procedure_tools,
)
from ._store_core import DUPLICATE_SIMILARITY, Scope, check_id, check_reason, request_origin, view
from ._store_folders import refuse_host_path, trusted
from ._store_quarantine import SkillQuarantineOps

_LEARNED_CACHE = 4096
"""Learned-request markers kept in memory (the rest are read from KV when a request repeats)."""
CORRECTED = "corrected by the user"
"""The reason a skill learned from a turn the user corrected is archived (``turn_completed``)."""
SKILLS_PRIORITY = 300
"""The matched skills' place in a turn's per-turn section (``turn_context``): first, before memories (200)."""
_RETRACTED = "retracted:"
"""KV: ``retracted:<workflow key>`` marks a turn the user corrected; a proposal from it is refused."""
MIN_MATCH_COVERAGE = 0.3
"""The least coverage of a request (``SkillIndex.match``) at which a skill matches it. ``bench/skills.py``
measures what it costs (docs/benchmarks.md): an unrelated request that shares a word or two with a skill
("the result", "a file") stays under it; a request of the skill's kind covers 0.4-1."""

StatusFilter = Literal["", "candidate", "active", "stale", "archived", "pinned"]


def _turn_marker(user: str, turn_id: str) -> str:
    """KV: the learned-request marker ``turn_id`` set (``{key}``), under the user's ``learned:`` prefix."""
    return io.learned_prefix(user) + "turn-" + io.workflow_key(turn_id)


class SkillStore(SkillQuarantineOps):
    """Per-tenant skill store; see the module docstring. Args: ``learn_min_tool_calls`` (3),
    ``min_match_coverage`` (0.3), ``duplicate_similarity`` (0.6), ``workflow`` (the extraction workflow's
    actor name), ``relearn_after_days`` (30: how long a taught request is not taught again)."""

    class Args(ActorArgs):
        """Read by ``SkillStoreCore.on_init``."""

        learn_min_tool_calls: int = 3
        min_match_coverage: float = Field(default=MIN_MATCH_COVERAGE, ge=0, le=1)
        """``match_skills`` returns no skill covering less of the request (``SkillIndex.match``)."""
        duplicate_similarity: float = DUPLICATE_SIMILARITY
        workflow: str = "skill_workflow"
        relearn_after_days: float = 30
        recency_half_life_days: float = 30
        semantic: Literal["auto", "on", "off"] = "auto"
        embedder: Any = None
        """A model object (tests); None: the semantic extra's, when installed."""
        max_file_bytes: int = 10 * 1024 * 1024
        """A skill folder's file (imports refuse a larger one, with the reason)."""
        max_skill_bytes: int = 50 * 1024 * 1024
        """All of one skill's files together."""
        max_skill_files: int = 1000
        max_import_bytes: int = 200 * 1024 * 1024
        """One import (an archive, and what it unpacks to)."""

    state_version = 1

    async def on_init(self, actor_id: str, args: dict[str, Any]) -> None:
        await super().on_init(actor_id, args)
        self.min_match_coverage = float(args.get("min_match_coverage", MIN_MATCH_COVERAGE))

    # -- proposals and versions ---------------------------------------------------------------------------

    @call
    async def propose_skill(
        self,
        name: str,
        description: str,
        procedure: str,
        triggers: list[str] | None = None,
        tags: list[str] | None = None,
        session_id: str = "",
        user_id: str = "",
        turn_id: str = "",
        skill_id: str = "",
    ) -> dict[str, Any]:
        """A learned procedure. A new skill starts as ``candidate`` (the evaluation decides); a proposal
        close to a skill the same user already has patches that skill with a new version instead.
        Reply: ``{skill_id, created, patched, version, skill_status}``. Idempotent for a given skill_id."""
        op = "propose_skill"
        access.require_writer(op)
        fields = self._fields(op, name, description, procedure, triggers, tags)
        owner = access.acting_user(user_id)
        if skill_id:
            existing = self._records.get(check_id(op, skill_id))
            if existing is not None:
                return self._proposal_reply(existing, created=False, patched=False)
        if turn_id and await self.host.kv.get(_RETRACTED + io.workflow_key(turn_id)) is not None:
            # The user said the turn was wrong: nothing is learned from it, however late the proposal.
            return {"status": "ok", "skill_id": "", "created": False, "patched": False, "retracted": True}
        source, untrusted, sources = await self._proposal_origin(owner, turn_id)
        probe = {"name": fields["name"], "description": fields["description"], "triggers": fields["triggers"]}
        # Derived from untrusted content: a skill of its own, held; it never rewrites a trusted one.
        twin = None if untrusted else self._near_duplicate(probe, procedure_tools(fields["procedure"]), owner)
        if twin is not None and twin["scope"] == "tenant":
            # A tenant-wide skill already covers it; a user's proposal never rewrites what everyone uses.
            return self._proposal_reply(twin, created=False, patched=False)
        if twin is not None:
            record = await self._patch(twin, fields, reason=f"merged proposal from session {session_id}")
            if turn_id and record["version"] > twin["version"]:
                # The version a correction of that turn takes back (``_retract``).
                record = {**record, "patched_by_turn": {"turn_id": turn_id, "version": record["version"]}}
                await self._save(record, previous_status=record["status"], reindex=False)
            return self._proposal_reply(record, created=False, patched=True)
        record = self._new_record(
            fields,
            owner=owner,
            provenance={"session_id": session_id, "user_id": owner, "turn_id": turn_id},
            source=source,
            untrusted=untrusted,
            skill_id=skill_id,
        )
        if sources:
            record["untrusted_sources"] = sources
        await self._write_version(record, fields["procedure"], "proposed", first=True)
        await self._save(record, previous_status=None)
        self._event("skill_proposed", record, f"name={record['name']} tools={','.join(record['tools'])}")
        if untrusted:
            self._audit_quarantine(record)
        self.host.incr_counter("skills_created_total")
        return self._proposal_reply(record, created=True, patched=False)

    async def _proposal_origin(self, owner: str, turn_id: str) -> tuple[str, bool, list[str]]:
        """``(source, untrusted, untrusted sources)`` of a proposal: the request's stamp, and for one learned
        from a turn (``turn_id``) what that turn's ``TurnCompleted`` said, as ``turn_completed`` kept it
        with the turn's learning marker. Never an argument of the proposal."""
        source, untrusted = request_origin(learned=bool(turn_id))
        if not turn_id:
            return source, untrusted, []
        marker = await self.host.kv.get(_turn_marker(owner, turn_id))
        if not isinstance(marker, dict):
            return source, untrusted, []
        sources = [str(x) for x in marker.get("untrusted_sources") or []][:8]
        return source, untrusted or bool(marker.get("untrusted")), sources

    @call
    async def update_skill(
        self,
        skill_id: str,
        procedure: str,
        description: str = "",
        triggers: list[str] | None = None,
        tags: list[str] | None = None,
        reason: str = "",
        merged_from: list[str] | None = None,
    ) -> dict[str, Any]:
        """A new version of the procedure (versions count from 1; all are kept). ``merged_from``: the
        skills this version consolidates (the curator's merge): it can only lower trust (the skill's
        ``derived_from_untrusted`` becomes the OR of theirs), and a quarantined one is refused."""
        op = "update_skill"
        record = self._get(op, skill_id)
        access.require_owner(op, record)
        record = self._merged_trust(op, record, merged_from or [])
        fields = self._fields(
            op,
            record["name"],
            description or record["description"],
            procedure,
            triggers if triggers is not None else record["triggers"],
            tags if tags is not None else record["tags"],
        )
        record = await self._patch(record, fields, reason=reason or "updated", replace_words=True)
        return {"status": "ok", "skill_id": skill_id, "version": record["version"], "skill": view(record)}

    @call(access="admin")
    async def rollback(self, skill_id: str, version: int) -> dict[str, Any]:
        """Make an earlier version current again (as a new version, so the history only grows)."""
        op = "rollback"
        record = self._get(op, skill_id)
        access.require_owner(op, record)
        if not 1 <= version <= record["versions"]:
            raise InvalidArgument(f"{op}: version must be 1..{record['versions']}", op=op, field="version")
        text = await self._procedure(skill_id, version)
        record = dict(record)
        folder = await self._folder(skill_id, version)  # the files that version had come back with it
        await self._write_version(record, text, f"rollback to v{version}", folder=folder)
        await self._save(record, previous_status=record["status"])
        self._event("skill_rolled_back", record, f"to=v{version} now=v{record['version']}")
        return {"status": "ok", "skill_id": skill_id, "version": record["version"], "restored": version}

    # -- reads --------------------------------------------------------------------------------------------

    @call(access="read")
    async def get_skill(self, skill_id: str, version: int = 0) -> dict[str, Any]:
        """``{skill: {...record, procedure}, versions: [{version, reason, created_at}]}``; ``version``
        picks an older procedure."""
        op = "get_skill"
        record = self._get(op, skill_id)
        self._require_visible(op, record)
        wanted = version or record["version"]
        if not 1 <= wanted <= record["versions"]:
            raise InvalidArgument(f"{op}: no version {version}", op=op, field="version")
        procedure = await self._procedure(skill_id, wanted)
        history = [
            {k: v for k, v in meta.items() if k not in ("files", "head")}
            for meta in await io.versions(self.host, skill_id)
        ]
        files = [  # "executable": true only on a file that had the bit (a script the sandbox runs)
            {"path": f["path"], "size": f["size"], "sha256": f["sha256"]}
            | ({"executable": True} if f.get("executable") else {})
            for f in (await self._folder(skill_id, wanted))["files"]
        ]
        skill = {**view(record), "procedure": procedure, "files": files, "trusted": trusted(record)}
        return {"status": "ok", "skill": skill, "versions": history}

    @call(access="read")
    async def match_skills(
        self, query: str, limit: int = 3, user_id: str = "", session_id: str = ""
    ) -> dict[str, Any]:
        """The usable skills (active or stale) best matching ``query`` that the user may use:
        ``skills: [{skill_id, name, description, procedure, score, coverage, version, status}]``, best
        first. A skill whose words cover less of the request than ``min_match_coverage`` is not a match
        (``coverage``: ``SkillIndex.match``; 0 for a skill found by meaning alone), so a request that only
        shares a word or two with every skill ("the result", "a file") gets none."""
        op = "match_skills"
        if len(query) > MAX_QUERY_CHARS:
            query = query[:MAX_QUERY_CHARS]  # the agent passes the user's message; its head says enough
        if not 1 <= limit <= 20:
            raise InvalidArgument(f"{op}: limit must be 1..20", op=op, field="limit")
        user = access.acting_user(user_id)
        query_vec = await self._query_vector(query)
        floor = self.min_match_coverage
        wide = self.index.match(
            query,
            limit if query_vec is None else max(limit, 10),
            user_id=user,
            now=self.host.now(),
            min_coverage=floor,
        )
        coverage = {sid: cov for sid, _score, cov in wide}
        if query_vec is None:
            hits = [(sid, score) for sid, score, _cov in wide]
        else:
            # Semantic fusion: skills that mean the same without sharing words join the ranking.
            close = self.index.semantic_search(query_vec, max(limit, 10), user_id=user)
            hits = fuse([(sid, score) for sid, score, _cov in wide], close, limit)
        skills = []
        for sid, score in hits:
            record = self._records[sid]
            skills.append(
                {
                    "skill_id": sid,
                    "name": record["name"],
                    "description": record["description"],
                    "procedure": await self._prompt_procedure(record),
                    "score": score,
                    "coverage": coverage.get(sid, 0.0),
                    "version": record["version"],
                    "status": record["status"],
                }
            )
        self.host.incr_counter("skill_matches_total", float(len(skills)))
        return {"status": "ok", "skills": skills}

    @call(access="read")
    async def turn_context(
        self, message: str, session_id: str = "", user_id: str = "", limits: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """The skill store's part of a turn's prompt (``minihermes.context.assembly``): the skills matching
        the message (``match_skills``, at most ``skills_limit``), as ``## Relevant Skills`` within
        ``skills_tokens``; its ``ids`` are the skills given, which the turn's record names (``skill_ids``).
        Reply: ``parts``."""
        lim = limits or {}
        limit = int(lim.get("skills_limit", 3))
        if limit <= 0:
            return {"status": "ok", "parts": []}
        found = await self.match_skills(message, min(limit, 20), user_id=user_id, session_id=session_id)
        text, ids = prompt.skills_section(found["skills"], int(lim.get("skills_tokens", 1_500)))
        part = context_part("skills", text, priority=SKILLS_PRIORITY, ids=ids)
        return {"status": "ok", "parts": [part] if text else []}

    @call(access="read")
    async def search_skills(self, query: str, limit: int = 10) -> dict[str, Any]:
        """Full-text search (FTS5) over every skill the caller may see, any status, with snippets."""
        op = "search_skills"
        check_text(op, "query", query, MAX_QUERY_CHARS)
        if not 1 <= limit <= 100:
            raise InvalidArgument(f"{op}: limit must be 1..100", op=op, field="limit")
        user = access.acting_user()
        found = []
        for hit in await self.host.text.search(io.TEXT_INDEX, query, limit=limit * 5):
            record = self._records.get(hit.doc_id)
            if record is None or not (access.is_admin() or access.can_see(record, user)):
                continue
            found.append({**view(record), "score": round(hit.score, 6), "snippet": hit.snippet})
            if len(found) == limit:
                break
        return {"status": "ok", "skills": found, "count": len(found)}

    @call(access="read")
    def list_skills(self, status: StatusFilter = "", user_id: str = "", limit: int = 1000) -> dict[str, Any]:
        """Skills with a status (``pinned``: the pinned ones; empty: all) the caller may see, newest
        first. Admins see every user's skills (or one user's, with ``user_id``)."""
        if not 1 <= limit <= 100_000:
            raise InvalidArgument("list_skills: limit must be 1..100000", op="list_skills", field="limit")
        admin = access.is_admin()
        user = access.acting_user(user_id)
        chosen = [
            r
            for r in self._records.values()
            if (not status or (r["pinned"] if status == "pinned" else r["status"] == status))
            and ((admin and not user_id) or access.can_see(r, user))
        ]
        chosen.sort(key=lambda r: (-r["created_at"], r["skill_id"]))
        return {
            "status": "ok",
            "skills": [view(r) for r in chosen[:limit]],
            "count": min(len(chosen), limit),
            "truncated": len(chosen) > limit,
        }

    @call(access="read")
    def get_stats(self) -> dict[str, Any]:
        by_status = Counter(r["status"] for r in self._records.values())
        return {
            "status": "ok",
            "skills": len(self._records),
            "by_status": {s: by_status.get(s, 0) for s in STATUSES},
            "pinned": sum(1 for r in self._records.values() if r["pinned"]),
            "semantic": self.embedder is not None,
            "embedded": self.index.vector_count(),
        }

    # -- usage and lifecycle ------------------------------------------------------------------------------

    @call
    async def record_usage(
        self, skill_id: str, session_id: str = "", success: bool = True, followed: bool = True
    ) -> dict[str, Any]:
        """A matched skill was given to a turn (call or cast). ``followed`` (the turn's tool calls were the
        skill's steps, ``turn_completed``): a use, a success or a failure with the turn, and a stale skill
        in use is active again. Not followed: only ``ignored`` grows (the turn's outcome says nothing about a
        skill it did not use, and an ignored match is no use: it keeps no skill from going stale); the
        turns a skill was matched in are ``uses + ignored``."""
        record = self._records.get(skill_id)
        if record is None:
            raise NotFound(f"no skill '{skill_id}'", op="record_usage", field="skill_id")
        record = dict(record)
        if not followed:
            record["ignored"] = int(record.get("ignored", 0)) + 1
            await self._save(record, previous_status=record["status"], reindex=False)
            return {
                "status": "ok",
                "skill_id": skill_id,
                "uses": record["uses"],
                "ignored": record["ignored"],
                "skill_status": record["status"],
            }
        record["uses"] += 1
        record["successes" if success else "failures"] += 1
        record["last_used_at"] = self.host.now()
        previous = record["status"]
        if previous == "stale":
            record["status"] = "active"
        await self._save(record, previous_status=previous, reindex=False)
        if previous == "stale":
            self._event("skill_reactivated", record, "used while stale", session_id=session_id)
        return {
            "status": "ok",
            "skill_id": skill_id,
            "uses": record["uses"],
            "ignored": int(record.get("ignored", 0)),
            "skill_status": record["status"],
        }

    @call(access="admin")
    async def pin(self, skill_id: str) -> dict[str, Any]:
        return await self._set_pinned("pin", skill_id, True)

    @call(access="admin")
    async def unpin(self, skill_id: str) -> dict[str, Any]:
        return await self._set_pinned("unpin", skill_id, False)

    @call(access="admin")
    async def archive(self, skill_id: str, reason: str = "") -> dict[str, Any]:
        op = "archive"
        record = self._get(op, skill_id)
        access.require_owner(op, record)
        if record["pinned"]:
            raise Conflict(f"{op}: '{skill_id}' is pinned; unpin it first", op=op, field="skill_id")
        return await self._transition(
            record, "archived", reason or f"archived by {current_context().principal}"
        )

    @call(access="admin")
    async def recover(self, skill_id: str) -> dict[str, Any]:
        """Bring an archived (or stale) skill back into use; a never-evaluated candidate stays one."""
        op = "recover"
        record = self._get(op, skill_id)
        access.require_owner(op, record)
        if record["status"] not in ("archived", "stale"):
            raise Conflict(f"{op}: '{skill_id}' is {record['status']}", op=op, field="skill_id")
        target = "active" if record.get("was_usable", True) else "candidate"
        return await self._transition(record, target, f"recovered by {current_context().principal}")

    @call
    async def set_status(self, skill_id: str, status: str, reason: str) -> dict[str, Any]:
        """The curator's move (admin/system): active -> stale -> archived. Pinned skills are refused."""
        op = "set_status"
        access.require_admin(op)
        record = self._get(op, skill_id)
        if status not in ("stale", "archived", "active"):
            raise InvalidArgument(f"{op}: status must be stale, archived or active", op=op, field="status")
        if record["pinned"] and status != "active":
            raise Conflict(f"{op}: '{skill_id}' is pinned", op=op, field="skill_id")
        return await self._transition(record, status, reason)

    @call
    async def approve_skill(self, skill_id: str) -> dict[str, Any]:
        """An admin approves a procedure with outside effects; it goes live if its evaluation passed."""
        op = "approve_skill"
        access.require_admin(op)
        record = dict(self._get(op, skill_id))
        record["approved_by"] = current_context().principal
        record["approved_tools"] = list(record["tools"])
        self._event("skill_approved", record, f"by={record['approved_by']}")
        imported = record.get("origin") == "import"  # an admin's review is what an import waits for
        if record["status"] == "candidate" and (imported or (record.get("evaluation") or {}).get("passed")):
            return await self._transition(record, "active", "approved after a passed evaluation")
        await self._save(record, previous_status=record["status"], reindex=False)
        return {"status": "ok", "skill_id": skill_id, "skill_status": record["status"]}

    @call(access="admin")
    async def reject_skill(self, skill_id: str, reason: str) -> dict[str, Any]:
        """An admin turns a candidate down: it is archived (never deleted, never matched; ``recover`` or
        ``set_status`` brings it back) with ``rejected: {by, at, reason}`` on the record. Only a candidate: a
        live skill is retired with ``archive`` or ``set_status``. ``reason`` is required (at most 500
        characters; anything shaped like a secret is redacted). Reply: ``{skill_id, skill_status, rejected}``."""
        op = "reject_skill"
        access.require_admin(op)
        why = check_reason(op, reason)
        record = dict(self._get(op, check_id(op, skill_id)))
        if record["status"] != "candidate":
            raise Conflict(
                f"{op}: '{skill_id}' is {record['status']}, not a candidate; to retire it use archive "
                "(or set_status with status archived)",
                op=op,
                field="skill_id",
            )
        record["rejected"] = {"by": current_context().principal, "at": self.host.now(), "reason": why}
        reply = await self._transition(record, "archived", f"rejected: {why}")
        self._event(
            "skill_rejected",
            self._records[skill_id],
            f"by={record['rejected']['by']} reason={why}",
            extra={"by": record["rejected"]["by"], "reason": why},
        )
        return {**reply, "rejected": record["rejected"]}

    @call
    async def promote_skill(self, skill_id: str) -> dict[str, Any]:
        """An admin makes a user's skill serve the whole tenant."""
        op = "promote_skill"
        access.require_admin(op)
        record = dict(self._get(op, skill_id))
        record["scope"] = "tenant"
        await self._save(record, previous_status=record["status"], reindex=False)
        self._event("skill_promoted", record, f"from_user={record['owner']}")
        return {"status": "ok", "skill_id": skill_id, "scope": "tenant"}

    @call
    async def record_evaluation(
        self, skill_id: str, version: int, passed: bool, details: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """The evaluation's verdict on a version (sent by the skill workflow). Passed: a candidate goes
        live unless it still needs an admin's approval. Failed: a patched version is rolled back."""
        op = "record_evaluation"
        access.require_admin(op)  # a user must not pass their own skill
        record = dict(self._get(op, skill_id))
        if version != record["version"]:
            return {"status": "ok", "skill_id": skill_id, "skill_status": record["status"], "stale": True}
        record["evaluation"] = {
            "version": version,
            "passed": passed,
            **(details or {}),
            "at": self.host.now(),
        }
        self._event("skill_evaluated", record, f"version={version} passed={passed}")
        if not passed and version > 1 and record["status"] in USABLE:
            await self._save(record, previous_status=record["status"], reindex=False)
            await self.rollback(skill_id, version - 1)
            return {
                "status": "ok",
                "skill_id": skill_id,
                "skill_status": record["status"],
                "rolled_back": True,
            }
        approved = not record["needs_approval"] or set(record["tools"]) <= set(
            record.get("approved_tools", [])
        )
        if passed and record["status"] == "candidate" and approved:
            return await self._transition(record, "active", "passed its evaluation")
        if passed and not approved:
            self._event("skill_awaiting_approval", record, f"tools={','.join(record['tools'])}")
        await self._save(record, previous_status=record["status"], reindex=False)
        return {"status": "ok", "skill_id": skill_id, "skill_status": record["status"], "approved": approved}

    # -- learning -----------------------------------------------------------------------------------------

    @cast
    async def evaluate_for_learning(
        self,
        session_id: str,
        turn_id: str,
        user_intent: str,
        user_id: str = "",
        tool_calls: int | list[dict[str, Any]] = 0,
        skill_ids: list[str] | None = None,
        success: bool = True,
    ) -> None:
        """After every finished turn (from the agent, never awaited): a turn with enough tool calls starts
        the extraction workflow for it (one workflow per turn, so a repeated cast starts nothing new).
        ``tool_calls`` is the turn's count of calls, or the calls themselves. Nothing new is learned from
        a turn that a matched skill (``skill_ids``, injected into its prompt) carried to success, nor from
        a request the same user already taught with the same tools (within ``relearn_after_days``): each
        extraction costs several model calls, and a repeat teaches nothing the first one did not. A matched
        skill carried the turn only when the turn followed it (``_followed``: its calls were the skill's
        steps); a turn that was given a skill and did something else is learned as any other (given only a
        count of calls, a matched skill is taken as followed). Nothing is learned from a turn that fell
        short (``success`` false: a failed tool call, the step limit, an answer contradicting its tool
        results). A skill learned here is quarantined when the request is stamped untrusted."""
        await self._consider_for_learning(
            session_id,
            turn_id,
            user_intent,
            user_id,
            tool_calls,
            skill_ids,
            success,
            untrusted=request_origin()[1],
            untrusted_sources=[],
        )

    async def _consider_for_learning(
        self,
        session_id: str,
        turn_id: str,
        user_intent: str,
        user_id: str,
        tool_calls: int | list[dict[str, Any]],
        skill_ids: list[str] | None,
        success: bool,
        *,
        untrusted: bool,
        untrusted_sources: list[str],
    ) -> None:
        count = len(tool_calls) if isinstance(tool_calls, list) else tool_calls
        if count < self.learn_min_tool_calls or not self.host.has_actor(self.workflow):
            return
        if not success:
            self.host.incr_counter("skill_extractions_skipped_total", reason="fell_short")
            return
        user = access.acting_user(user_id)
        given = [sid for sid in skill_ids or [] if sid in self._records]
        if isinstance(tool_calls, list):
            given = self._followed(given, tool_calls)
        if given:
            self.host.incr_counter("skill_extractions_skipped_total", reason="skill_used")
            return
        names = (
            [str(c.get("name", "")) for c in tool_calls if isinstance(c, dict)]
            if isinstance(tool_calls, list)
            else []
        )
        # A turn that saw untrusted content teaches apart: its (held) skill never stops a trusted turn of
        # the same request from teaching one that can be used.
        key = io.learned_key(user, user_intent, [*names, "(untrusted)"] if untrusted else names)
        if await self._learned_recently(key):
            self.host.incr_counter("skill_extractions_skipped_total", reason="repeat")
            return
        await self.host.kv.put(key, {"turn_id": turn_id, "at": self.host.now()})
        # Which marker the turn set, for a correction to take back (under the user's prefix: forgotten with them).
        # And whether the turn saw untrusted content: the proposal's trust (``_proposal_origin``).
        marker = {"key": key, "untrusted": untrusted, "untrusted_sources": untrusted_sources[:8]}
        await self.host.kv.put(_turn_marker(user, turn_id), marker)
        self._learned[key] = self.host.now()
        args = {"session_id": session_id, "turn_id": turn_id, "user_intent": user_intent, "user_id": user}
        self.host.send(f"{self.workflow}/{io.workflow_key(turn_id)}", "start", args)
        self.host.incr_counter("skill_extractions_started_total")

    def _followed(self, skill_ids: list[str], tool_calls: list[dict[str, Any]]) -> list[str]:
        """The skills of ``skill_ids`` the turn whose calls were ``tool_calls`` followed: for a skill with
        tool steps, ``extract.followed`` (its steps a subsequence of the turn's calls, no tool outside its
        tools; ``find_tools`` and ``skill_view`` aside); for one without (instructions only), the turn read
        it with ``skill_view``."""
        calls = [c for c in tool_calls if isinstance(c, dict)]
        names = [str(c.get("name", "")) for c in calls]
        out = []
        for sid in skill_ids:
            record = self._records.get(sid)
            if record is None:
                continue
            if record["tools"]:
                if extract.followed(record["tools"], names):
                    out.append(sid)
            elif any(
                c.get("name") == "skill_view"
                and isinstance(c.get("input"), dict)
                and c["input"].get("name") in (record["name"], sid)
                for c in calls
            ):
                out.append(sid)
        return out

    async def _learned_recently(self, key: str) -> bool:
        at = self._learned.get(key)
        if at is None:
            entry = await self.host.kv.get(key)
            at = float(entry.get("at", 0.0)) if isinstance(entry, dict) else None
        if at is None or self.host.now() - at > self.relearn_after:
            self._learned.pop(key, None)
            return False
        self._learned[key] = at
        self._learned.move_to_end(key)
        while len(self._learned) > _LEARNED_CACHE:
            self._learned.popitem(last=False)
        return True

    @cast
    async def turn_completed(
        self,
        turn_id: str,
        session_id: str,
        user_id: str,
        user_message: str,
        tool_calls: list[dict[str, Any]] | None = None,
        skill_ids: list[str] | None = None,
        success: bool = True,
        corrects_turn: str = "",
        untrusted: bool = False,
        untrusted_sources: list[str] | None = None,
        **_record: Any,
    ) -> None:
        """A finished turn (the turn listener, ``minihermes.turn_event``; published by the agent, never
        awaited): when it corrects the session's previous turn (``corrects_turn``), what was learned from
        that turn is taken back (``_retract``); each skill the turn was given is counted (``record_usage``):
        as used, a success when the turn is one (ok, no failed tool call, a truthful answer), when the turn
        followed it (``_followed``), else as ignored; then the turn is considered for learning
        (``evaluate_for_learning``). A step that fails (a skill deleted since) is logged and the next runs."""
        if corrects_turn:
            await self._turn_step("retract", self._retract(corrects_turn, user_id))
        given = [sid for sid in skill_ids or [] if isinstance(sid, str) and sid]
        used = set(self._followed(given, list(tool_calls or [])))
        for skill_id in given:
            if skill_id not in used:
                self.host.incr_counter("skill_matches_ignored_total")
            await self._turn_step(
                "record_usage",
                self.record_usage(
                    skill_id=skill_id, session_id=session_id, success=success, followed=skill_id in used
                ),
            )
        await self._turn_step(
            "evaluate_for_learning",
            self._consider_for_learning(
                session_id=session_id,
                turn_id=turn_id,
                user_intent=user_message,
                user_id=user_id,
                tool_calls=list(tool_calls or []),
                skill_ids=given,
                success=success,
                # The turn's own record says whether it saw untrusted content: a skill learned from it is
                # quarantined (``_proposal_origin`` reads this back from the turn's marker).
                untrusted=bool(untrusted) or current_context().untrusted,
                untrusted_sources=[str(x) for x in untrusted_sources or []],
            ),
        )

    async def _retract(self, turn_id: str, user_id: str) -> None:
        """The user said ``turn_id`` was wrong: no skill from it stays in use. The turn is marked (a proposal
        its extraction makes later is refused), the extraction is cancelled, its request may be taught
        again, a skill created from it is archived and a version it added to a skill is replaced by the
        one before (skills are never deleted). Each is audited with the reason ``CORRECTED``."""
        user = access.acting_user(user_id)
        wkey = io.workflow_key(turn_id)
        await self.host.kv.put(_RETRACTED + wkey, {"at": self.host.now(), "reason": CORRECTED})
        started = await self.host.kv.get(_turn_marker(user, turn_id))
        if isinstance(started, dict):
            learned = str(started.get("key") or "")
            if learned:
                await self.host.kv.delete(learned)
                self._learned.pop(learned, None)
            await self.host.kv.delete(_turn_marker(user, turn_id))
            self.host.send(f"{self.workflow}/{wkey}", "signal", {"name": "cancel", "payload": CORRECTED})
        for record in list(self._records.values()):
            patched = record.get("patched_by_turn") or {}
            if record["provenance"].get("turn_id") == turn_id and record["status"] != "archived":
                if record["pinned"]:
                    continue  # an admin pinned it: theirs to decide
                await self._transition(record, "archived", CORRECTED)
                self.host.incr_counter("skills_retracted_total")
            elif patched.get("turn_id") == turn_id and patched.get("version") == record["version"] > 1:
                record = {k: v for k, v in record.items() if k != "patched_by_turn"}
                text = await self._procedure(record["skill_id"], record["version"] - 1)
                await self._write_version(record, text, CORRECTED)
                if record["status"] == "candidate" and record.get("was_usable"):
                    record["status"] = "active"  # the patch had put it back for approval
                await self._save(record, previous_status=self._records[record["skill_id"]]["status"])
                self._event("skill_rolled_back", record, f"reason={CORRECTED} now=v{record['version']}")
                self.host.incr_counter("skills_retracted_total")

    async def _turn_step(self, op: str, step: Awaitable[Any]) -> None:
        try:
            await step
        except ActorError as e:
            self.host.log.info("turn_completed: %s not done: %s", op, e.message)

    @cast
    async def forget(self, session_id: str = "", user_id: str = "") -> None:
        """``forget_subject`` told, not asked (kept for callers from before it)."""
        if user_id and not access.is_admin() and user_id != current_context().principal:
            self.host.log.warning("forget: %s may not forget user %s", current_context().principal, user_id)
            return
        if session_id or user_id:
            await self._forget(session_id if session_id else "", "" if session_id else user_id, False)

    @call(access="write")
    async def forget_subject(
        self, user_id: str = "", session_id: str = "", tenant: bool = False
    ) -> dict[str, Any]:
        """Forgetting a session, a user or (admin) the tenant (asked by ``memory.forget``). A user's own
        skills (``scope: user``), learned from or written in what is forgotten, are erased: record,
        every version's procedure, index entries. Skills of the tenant (promoted or imported: an admin
        adopted them) stay, with the forgotten ids gone from their provenance and history. ``cleared:
        {skills, skill_provenance}``."""
        who = subject("forget_subject", user_id=user_id, session_id=session_id, tenant=tenant)
        erased, cleared = await self._forget(who.session_id, who.user_id, who.tenant)
        return {"status": "ok", "cleared": {"skills": erased, "skill_provenance": cleared}}

    async def _forget(self, session_id: str, user_id: str, tenant: bool) -> tuple[int, int]:
        erased = cleared = 0
        workflows: set[str] = set()
        if user_id or tenant:
            prefix = io.learned_prefix(user_id) if user_id else "learned:"
            for key, _ in await self.host.kv.list(prefix):
                if ":turn-" in key:  # a turn's marker: the extraction workflow that learned from it
                    workflows.add(key.rsplit(":turn-", 1)[1])
                await self.host.kv.delete(key)
            for key in [k for k in self._learned if k.startswith(prefix)]:
                del self._learned[key]
        for record in list(self._records.values()):
            prov = record["provenance"]
            by_session = bool(session_id) and prov.get("session_id") == session_id
            by_user = bool(user_id) and (prov.get("user_id") == user_id or record["owner"] == user_id)
            if not (by_session or by_user or tenant):
                continue
            if by_session and not may_forget(str(prov.get("user_id") or record["owner"])):
                continue  # a session is forgotten by its owner: another's skill learned there is theirs
            if prov.get("turn_id"):
                workflows.add(io.workflow_key(str(prov["turn_id"])))
            if record["scope"] == "user" and (tenant or by_session or record["owner"] == user_id):
                await self._erase(record)
                erased += 1
                continue
            if tenant:
                continue  # the tenant's own skills: what it imported or adopted, nobody's words
            cleared += 1
            record = dict(record)
            record["provenance"] = {
                "session_id": "",
                "user_id": "",
                "turn_id": "",
                "forgotten": True,
                "source": record["provenance"].get("source", ""),
            }
            previous = record["status"]
            if by_user:
                if record["owner"] == user_id or record["scope"] == "user":
                    record["owner"] = "(forgotten)"
                if record["approved_by"] == user_id:
                    record["approved_by"] = "(forgotten)"
                await io.forget_author(self.host, record["skill_id"], user_id)
                if record["scope"] == "user" and not record["pinned"]:
                    record["status"] = "archived"
            await self._save(record, previous_status=previous, reindex=False)
            self._event("skill_provenance_forgotten", record, f"from={previous} to={record['status']}")
        if erased:
            await self.host.text.compact(io.TEXT_INDEX)
        for wkey in sorted(workflows):
            # A proposal still on its way from one of these runs is refused, as after a correction.
            await self.host.kv.put(_RETRACTED + wkey, {"at": self.host.now(), "reason": "forgotten"})
            if self.host.has_actor(self.workflow):  # its checkpoint holds the turn's request and calls
                self.host.send(f"{self.workflow}/{wkey}", "forget", {})
        return erased, cleared

    async def _erase(self, record: dict[str, Any]) -> None:
        sid = record["skill_id"]
        await io.erase(self.host, record)
        self._records.pop(sid, None)
        self.index.remove(sid)
        for key in [k for k in self._procedures if k[0] == sid]:
            del self._procedures[key]
        self.host.incr_counter("skills_forgotten_total")

    # -- import / export ----------------------------------------------------------------------------------

    @call(access="write")
    async def import_skills(
        self,
        path: str = "",
        documents: list[str] | None = None,
        scope: Scope = "tenant",
        archive: str = "",
        approve: bool = False,
    ) -> dict[str, Any]:
        """Skill folders (``SKILL.md`` with its files) in ``archive`` (base64 of a .zip / .skill archive or a
        tarball) and/or as SKILL.md texts. ``path`` (a folder on the server) is always refused with
        ``permission_denied``: the server's disk is the operator's (``minihermes skills import`` reads a
        folder on its own machine and sends archives). Lenient and lossless (see ``_folders.py``):
        ``warnings`` for what is odd, ``refused: [{skill, path, reason}]`` only for what is unsafe, and
        ``secret_warnings: [{path, line, kind}]`` on a skill carrying something shaped like a secret. Imported
        skills are candidates until an admin approves them (``approve``: an admin's import approves at
        once); a user's import is their own (``scope: user``). A name that exists gets a new version (none
        when nothing changed: ``unchanged``)."""
        return await self._import_folders("import_skills", path, documents or [], archive, scope, approve)

    @call
    async def export_skills(
        self, path: str = "", status: StatusFilter = "", with_files: bool = False
    ) -> dict[str, Any]:
        """Skills as their SKILL.md, byte for byte as imported plus one line of our keys (``documents:
        [{name, folder, skill_md, files?}]``; ``with_files``: each file as ``{path, size, sha256, executable,
        data}``, data in base64). ``path`` (a folder on the server) is always refused with
        ``permission_denied``: ``GET /api/v1/skills/export`` downloads a zip, and ``minihermes skills export
        DIR`` writes folders on the operator's machine. ``written`` is always 0 (kept for old clients)."""
        op = "export_skills"
        refuse_host_path(op, path)
        listed = self.list_skills(status=status)["skills"]
        docs = await self._export_docs(listed, with_files)
        for doc in docs:
            doc.pop("file_bytes", None)
        return {"status": "ok", "documents": docs, "count": len(docs), "written": 0}
