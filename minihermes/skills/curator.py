"""``curator`` (one per tenant): ages skills out and consolidates near-duplicates, never deleting one.

A durable daily reminder (``host.set_reminder``, so it survives restarts) runs ``curate``:

- ``active`` skills unused for ``stale_after_days`` (30) become ``stale``; ``stale`` ones still unused
  ``archive_after_days`` (90) later become ``archived``. Pinned skills are never touched; nothing is
  deleted (``recover`` brings an archived skill back).
- Usable skills of one owner with the same tool steps and close wording are consolidated: the one with
  more successful uses survives, gets the other's triggers and tags (and, with an auxiliary LLM configured,
  a merged procedure), and the other is archived with a pointer to it. The auxiliary LLM is a separate
  gateway provider (``aux_provider``, e.g. a small cheap model) pinned on the curator's own session, so the
  main configuration is untouched; without one the merge is deterministic.
- A merge never raises trust: a quarantined skill (derived from untrusted content, not confirmed) is merged
  with nothing, and the kept skill's ``derived_from_untrusted`` becomes the OR of both (``update_skill``'s
  ``merged_from``: the store reads both records' trust itself).

Every transition is made by ``skill_store.set_status``, which audits it; each run is audited too.
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

from minihermes.audit import fire_audit
from minihermes.llm.protocol import CompletionReply
from minihermes.runtime import ActorArgs, ActorError, GenServer, call, cast, state

from . import _access as access
from ._extract import _json
from ._model import procedure_tools
from ._text import jaccard, tokens

DAY = 86_400.0
REMINDER = "curate"
AUX_SESSION = "curator-aux"
_MAX_GROUP = 200
"""Pairs are compared within a group of skills with the same steps; huge groups are compared in part."""


def _words(record: dict[str, Any]) -> list[str]:
    return tokens(" ".join([record["name"].replace("-", " "), record["description"], *record["triggers"]]))


class Curator(GenServer):
    """Args: ``stale_after_days`` (30), ``archive_after_days`` (90), ``interval`` seconds (86400),
    ``similarity`` (0.6), ``aux_provider`` / ``aux_model`` (auxiliary LLM; empty: deterministic merge)."""

    class Args(ActorArgs):
        stale_after_days: float = 30
        archive_after_days: float = 90
        interval: float = DAY
        similarity: float = 0.6
        aux_provider: str = ""
        aux_model: str = ""

    state_version = 1
    scheduled: bool = state(default=False)
    last_run: dict[str, Any] | None = state(default=None)

    async def on_init(self, actor_id: str, args: dict[str, Any]) -> None:
        self.stale_after = float(args.get("stale_after_days", 30)) * DAY
        self.archive_after = float(args.get("archive_after_days", 90)) * DAY
        self.interval = float(args.get("interval", DAY))
        self.similarity = float(args.get("similarity", 0.6))
        self.aux_provider = str(args.get("aux_provider", ""))
        self.aux_model = str(args.get("aux_model", ""))

    @cast
    async def ensure_scheduled(self) -> None:
        """Sent by the skill store on activation: arm the daily reminder once per tenant."""
        if not self.scheduled:
            with access.as_service("curator"):
                await self.host.set_reminder(REMINDER, "tick", every=self.interval)
            self.scheduled = True

    @cast
    async def tick(self) -> None:
        await self._curate()

    @call
    async def curate(self) -> dict[str, Any]:
        """Run a curation now (admin): ``{staled, archived, merged: [{kept, archived}], by}``."""
        access.require_admin("curate")
        return await self._curate()

    @call
    def get_status(self) -> dict[str, Any]:
        return {"status": "ok", "scheduled": self.scheduled, "last_run": self.last_run}

    async def _curate(self) -> dict[str, Any]:
        with access.as_service("curator"):
            listing = await self.host.ask("skill_store", "list_skills", {"limit": 100_000})
            records = [r for r in listing["skills"] if not r["pinned"]]
            now = self.host.now()
            staled, archived = [], []
            for r in records:
                idle_since = max(r["last_used_at"], r["status_changed_at"])
                if r["status"] == "active" and now - idle_since >= self.stale_after:
                    await self._move(r, "stale", f"unused for {int((now - idle_since) // DAY)} days")
                    staled.append(r["skill_id"])
                elif r["status"] == "stale" and now - idle_since >= self.archive_after:
                    await self._move(
                        r, "archived", f"stale and unused for {int((now - idle_since) // DAY)} days"
                    )
                    archived.append(r["skill_id"])
            usable = [
                r
                for r in listing["skills"]
                if r["status"] in ("active", "stale")
                and r["skill_id"] not in staled
                and not r.get("quarantined")  # held until confirmed: merged with nothing
            ]
            merged, by = await self._consolidate(usable)
        summary = {
            "status": "ok",
            "staled": staled,
            "archived": archived,
            "merged": merged,
            "by": by,
            "at": now,
        }
        self.last_run = {k: (len(v) if isinstance(v, list) else v) for k, v in summary.items()}
        if self.host.has_actor("audit_event"):
            fire_audit(
                self.host,
                "curator_run",
                f"staled={len(staled)} archived={len(archived)} merged={len(merged)} by={by}",
                data={"staled": len(staled), "archived": len(archived), "merged": len(merged)},
            )
        return summary

    async def _move(self, record: dict[str, Any], status: str, reason: str) -> None:
        await self.host.ask(
            "skill_store", "set_status", {"skill_id": record["skill_id"], "status": status, "reason": reason}
        )

    async def _consolidate(self, records: list[dict[str, Any]]) -> tuple[list[dict[str, str]], str]:
        groups: dict[tuple[str, str, tuple[str, ...]], list[dict[str, Any]]] = defaultdict(list)
        for r in records:
            groups[(r["scope"], r["owner"] if r["scope"] == "user" else "", tuple(r["tools"]))].append(r)
        merged: list[dict[str, str]] = []
        by = "llm" if self.aux_provider else "deterministic"
        gone: set[str] = set()
        for group in groups.values():
            group = sorted(group, key=lambda r: (-r["successes"], -r["uses"], r["created_at"]))[:_MAX_GROUP]
            for i, keep in enumerate(group):
                if keep["skill_id"] in gone:
                    continue
                for other in group[i + 1 :]:
                    if other["skill_id"] in gone or other["pinned"]:
                        continue
                    if jaccard(_words(keep), _words(other)) < self.similarity:
                        continue
                    used = await self._merge(keep, other)
                    by = used if used == "deterministic" else by
                    gone.add(other["skill_id"])
                    merged.append({"kept": keep["skill_id"], "archived": other["skill_id"]})
        return merged, by

    async def _merge(self, keep: dict[str, Any], other: dict[str, Any]) -> str:
        kept = (await self.host.ask("skill_store", "get_skill", {"skill_id": keep["skill_id"]}))["skill"]
        gone = (await self.host.ask("skill_store", "get_skill", {"skill_id": other["skill_id"]}))["skill"]
        procedure, used = kept["procedure"], "deterministic"
        if self.aux_provider:
            suggestion = await self._aux_merge(kept, gone)
            if suggestion is not None:
                procedure, used = suggestion, "llm"
        await self.host.ask(
            "skill_store",
            "update_skill",
            {
                "skill_id": keep["skill_id"],
                "procedure": procedure,
                "triggers": list(dict.fromkeys(kept["triggers"] + gone["triggers"]))[:32],
                "tags": list(dict.fromkeys(kept["tags"] + gone["tags"]))[:32],
                "reason": f"consolidated with {other['skill_id']}",
                "merged_from": [other["skill_id"]],  # the kept one is no more trusted than the other
            },
        )
        await self._move(other, "archived", f"merged into {keep['skill_id']}")
        return used

    async def _aux_merge(self, a: dict[str, Any], b: dict[str, Any]) -> str | None:
        """A merged procedure from the auxiliary model, if it answers one true to the shared steps."""
        try:
            await self.host.ask(
                "llm_gateway",
                "switch_provider",
                {"provider": self.aux_provider, "model": self.aux_model, "session_id": AUX_SESSION},
            )
            prompt = (
                "Merge these two procedures for the same task into one, keeping numbered lines "
                '"N. tool_name: what to do" and the same tools in the same order. Answer with JSON '
                '{"procedure": "..."} only.\n\nA:\n' + a["procedure"] + "\n\nB:\n" + b["procedure"]
            )
            reply: CompletionReply = await self.host.ask(
                "llm_gateway",
                "completion",
                {"messages": [{"role": "user", "content": prompt}], "session_id": AUX_SESSION},
                timeout=120,
            )
        except ActorError as e:
            self.host.log.info("curator merges deterministically: auxiliary LLM unavailable: %s", e.message)
            return None
        data = _json(str((reply.get("response") or {}).get("content") or ""))
        text = data.get("procedure") if data else None
        if isinstance(text, str) and procedure_tools(text) == procedure_tools(a["procedure"]):
            return text
        self.host.log.info("curator ignores the auxiliary merge: %s", json.dumps(text)[:200])
        return None
