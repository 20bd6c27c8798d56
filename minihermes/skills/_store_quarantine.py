"""The skill store's quarantine: skills derived from untrusted content, held until a person confirms them.

Every record carries ``provenance.source`` (``agent``: learned from a turn; ``import``; ``user`` / ``admin``:
written through an op by a person; ``tool:<name>``: written by a tool call of a turn that saw untrusted
content) and ``derived_from_untrusted``, stamped by the runtime (``_store_core.request_origin``, and for a
learned skill its turn's ``TurnCompleted.untrusted``), never taken from an argument. A skill derived from
untrusted content is ``quarantined``: never matched, never in a prompt (``view_skill`` shows it as data),
never merged or patched, exported marked as such, until its owner or an admin confirms it
(``confirm_skill``) or discards it (``discard_skill``: archived, never deleted). Confirming keeps
``derived_from_untrusted`` (the record says where it came from) and records ``confirmed_by``.
"""

from __future__ import annotations

from typing import Any

from minihermes.runtime import Conflict, InvalidArgument, NotFound, call, current_context

from . import _access as access
from ._store_core import check_id, quarantined, source_of, view
from ._store_folders import SkillFolderOps


class SkillQuarantineOps(SkillFolderOps):
    """``list_quarantined``, ``confirm_skill``, ``discard_skill`` and the trust bookkeeping of merges."""

    def _may_confirm(self, record: dict[str, Any]) -> bool:
        """A user's own skill: its owner; a tenant's (promoted, imported for the tenant): admins."""
        if access.is_admin():
            return True
        ctx = current_context()
        return record["scope"] == "user" and record["owner"] == ctx.principal and "user" in ctx.roles

    def _held(self, op: str, skill_id: str) -> dict[str, Any]:
        record = self._records.get(check_id(op, skill_id))
        # Another user's skill is "not found", never "forbidden", as everywhere else in the store.
        if record is None or not self._may_confirm(record):
            raise NotFound(f"{op}: no skill '{skill_id}' of yours", op=op, field="skill_id")
        return record

    def _audit_quarantine(self, record: dict[str, Any]) -> None:
        self.host.incr_counter("skills_quarantined_total")
        self._event(
            "skill_quarantined",
            record,
            f"provenance={source_of(record)}",
            extra={"provenance": source_of(record), "untrusted_sources": record.get("untrusted_sources", [])},
        )

    @call(access="read")
    async def list_quarantined(self, user_id: str = "", limit: int = 100) -> dict[str, Any]:
        """The skills held for confirmation (derived from untrusted content) that the caller may confirm:
        a user's own; an admin's, every one of the tenant (or ``user_id``'s). Archived (discarded) ones are
        left out. ``{skills: [view + procedure + quarantined_at...], count, total}``, newest first: what a
        person confirms is the procedure itself."""
        op = "list_quarantined"
        if not 1 <= limit <= 1000:
            raise InvalidArgument(f"{op}: limit must be 1..1000", op=op, field="limit")
        admin = access.is_admin()
        held = [
            r
            for r in self._records.values()
            if quarantined(r)
            and r["status"] != "archived"
            and self._may_confirm(r)
            and (not (admin and user_id) or r["owner"] == user_id)
        ]
        held.sort(key=lambda r: (-float(r.get("quarantined_at") or r["updated_at"]), r["skill_id"]))
        items = [
            {
                **view(r),
                "procedure": await self._procedure(r["skill_id"], r["version"]),
                "quarantined_at": r.get("quarantined_at") or r["updated_at"],
            }
            for r in held[:limit]
        ]
        return {"status": "ok", "skills": items, "count": len(items), "total": len(held)}

    @call(access="write")
    async def confirm_skill(self, skill_id: str) -> dict[str, Any]:
        """Its owner or an admin vouches for a quarantined skill: it is no longer held (matched when its
        status is active or stale; a candidate still waits for its evaluation or approval).
        ``derived_from_untrusted`` stays; ``confirmed_by`` says who. Audited (``skill_confirmed``). Reply:
        ``{skill_id, confirmed: true, changed, skill_status, quarantined: false}``."""
        op = "confirm_skill"
        access.require_writer(op)
        record = dict(self._held(op, skill_id))
        if not quarantined(record):
            if record.get("confirmed_by"):  # confirmed already: the same answer again
                return self._confirmed_reply(record, changed=False)
            raise Conflict(f"{op}: '{skill_id}' is not quarantined", op=op, field="skill_id")
        if record["status"] == "archived":
            raise Conflict(f"{op}: '{skill_id}' was discarded; recover it first", op=op, field="skill_id")
        record["quarantined"] = False
        record["confirmed_by"] = current_context().principal
        record["confirmed_at"] = self.host.now()
        await self._save(record, previous_status=record["status"], reindex=False)
        self._event(
            "skill_confirmed",
            record,
            f"by={record['confirmed_by']} provenance={source_of(record)}",
            extra={"by": record["confirmed_by"], "provenance": source_of(record)},
        )
        return self._confirmed_reply(record, changed=True)

    @staticmethod
    def _confirmed_reply(record: dict[str, Any], *, changed: bool) -> dict[str, Any]:
        return {
            "status": "ok",
            "skill_id": record["skill_id"],
            "confirmed": True,
            "changed": changed,
            "confirmed_by": record.get("confirmed_by", ""),
            "skill_status": record["status"],
            "quarantined": False,
            "provenance": source_of(record),
            "derived_from_untrusted": bool(record.get("derived_from_untrusted")),
        }

    @call(access="write")
    async def discard_skill(self, skill_id: str) -> dict[str, Any]:
        """Its owner or an admin turns a quarantined skill down: it is archived (never deleted; it stays
        quarantined, so even ``recover`` does not put it in use unconfirmed), with ``discarded: {by, at}``.
        Audited (``skill_discarded``). Reply: ``{skill_id, discarded: true, skill_status}``."""
        op = "discard_skill"
        access.require_writer(op)
        record = dict(self._held(op, skill_id))
        if not quarantined(record):
            raise Conflict(
                f"{op}: '{skill_id}' is not quarantined; to retire it use archive", op=op, field="skill_id"
            )
        if record["pinned"]:
            raise Conflict(f"{op}: '{skill_id}' is pinned; unpin it first", op=op, field="skill_id")
        by = current_context().principal
        record["discarded"] = {"by": by, "at": self.host.now()}
        reply = await self._transition(record, "archived", f"discarded by {by}")
        if not reply["changed"]:  # archived already: keep the note anyway
            await self._save(record, previous_status=record["status"], reindex=False)
        self._event("skill_discarded", self._records[skill_id], f"by={by}", extra={"by": by})
        return {"status": "ok", "skill_id": skill_id, "discarded": True, "skill_status": "archived"}

    def _merged_trust(self, op: str, record: dict[str, Any], merged_from: list[str]) -> dict[str, Any]:
        """``record`` as a merge of ``merged_from`` leaves it: never more trusted than any of them (a
        quarantined one is not merged at all)."""
        if not merged_from:
            return record
        record = dict(record)
        if quarantined(record):
            raise Conflict(f"{op}: '{record['skill_id']}' is quarantined; it is merged with nothing", op=op)
        for sid in merged_from:
            other = self._get(op, check_id(op, sid))
            self._require_visible(op, other)
            if quarantined(other):
                raise Conflict(f"{op}: '{sid}' is quarantined; it is merged with nothing", op=op)
            if other.get("derived_from_untrusted"):
                record["derived_from_untrusted"] = True
        return record
