"""``skill_store.reject_skill``: an admin turns a candidate down. It is archived (never deleted, never matched)
with who rejected it and why on the record and in the audit trail; ``recover`` or ``set_status`` brings it
back, and the curator leaves it alone like any archived skill."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from minihermes.runtime import ActorError
from minihermes.skills import SkillStore

from .conftest import ACME, ACME_USER, ACME_VIEWER, skills_tree

DAY = 86_400.0
CALC = "1. calculator: evaluate each arithmetic expression from the request"
QUERY = "sum these arithmetic expressions"


async def _candidate(node: Any, **kw: Any) -> str:
    made = await node.ask(
        "skill_store",
        "propose_skill",
        {
            "name": "sum-numbers",
            "description": "Add up several arithmetic expressions",
            "procedure": CALC,
            "triggers": ["sum", "arithmetic"],
            "session_id": "s1",
            **kw,
        },
        ctx=ACME_USER,
    )
    assert made["created"] and made["skill_status"] == "candidate"
    return str(made["skill_id"])


async def _skill(node: Any, skill_id: str) -> dict[str, Any]:
    got = await node.ask("skill_store", "get_skill", {"skill_id": skill_id}, ctx=ACME)
    return dict(got["skill"])


async def _reject(node: Any, skill_id: str, reason: str, ctx: Any = ACME) -> dict[str, Any]:
    reply: dict[str, Any] = await node.ask(
        "skill_store", "reject_skill", {"skill_id": skill_id, "reason": reason}, ctx=ctx
    )
    return reply


async def _refused(node: Any, payload: dict[str, Any], ctx: Any = ACME) -> ActorError:
    with pytest.raises(ActorError) as e:
        await node.ask("skill_store", "reject_skill", payload, ctx=ctx)
    return e.value


async def _matched(node: Any, ctx: Any = ACME_USER, query: str = QUERY) -> list[str]:
    reply = await node.ask("skill_store", "match_skills", {"query": query}, ctx=ctx)
    return [s["skill_id"] for s in reply["skills"]]


async def _events(node: Any, event_type: str) -> list[dict[str, Any]]:
    reply = await node.ask("audit_event", "query_events", {"event_type": event_type, "limit": 100}, ctx=ACME)
    return list(reply["events"])


def test_reject_skill_is_declared_an_admins_op() -> None:
    assert SkillStore._handlers["reject_skill"].access == "admin"


async def test_a_rejected_candidate_is_archived_with_who_and_why_and_audited(
    make_node: Any, clock: Any
) -> None:
    node = await make_node(skills_tree())
    sid = await _candidate(node)
    reply = await _reject(node, sid, "  answers differ from the baseline  ")
    assert reply["status"] == "ok" and reply["skill_status"] == "archived" and reply["changed"] is True
    assert reply["rejected"] == {
        "by": "alice",
        "at": clock.time(),
        "reason": "answers differ from the baseline",
    }
    skill = await _skill(node, sid)
    assert skill["status"] == "archived" and skill["rejected"] == reply["rejected"]
    archived = await node.ask("skill_store", "list_skills", {"status": "archived"}, ctx=ACME)
    assert [s["skill_id"] for s in archived["skills"]] == [sid]  # kept, never deleted

    [event] = await _events(node, "skill_rejected")
    assert event["principal"] == "alice"
    assert event["data"] == {
        "skill_id": sid,
        "status": "archived",
        "version": 1,
        "by": "alice",
        "reason": "answers differ from the baseline",
    }
    assert f"skill={sid}" in event["detail"] and "answers differ" in event["detail"]
    moves = [e["detail"] for e in await _events(node, "skill_status_changed")]
    assert any(f"skill={sid} from=candidate to=archived reason=rejected: answers" in d for d in moves)


async def test_a_rejected_skill_is_never_matched_even_when_its_evaluation_passes_later(
    make_node: Any,
) -> None:
    node = await make_node(skills_tree())
    sid = await _candidate(node)
    await _reject(node, sid, "not wanted here")
    # The learning workflow's verdict may arrive after the admin's decision: it does not bring the skill to life.
    out = await node.ask(
        "skill_store", "record_evaluation", {"skill_id": sid, "version": 1, "passed": True}, ctx=ACME
    )
    assert out["skill_status"] == "archived"
    assert await _matched(node) == [] and await _matched(node, ACME) == []
    found = await node.ask("skill_store", "search_skills", {"query": "arithmetic"}, ctx=ACME)
    assert [s["skill_id"] for s in found["skills"]] == [sid]  # still findable by an admin, as archived


async def test_recover_or_set_status_brings_a_rejected_skill_back(make_node: Any) -> None:
    node = await make_node(skills_tree())
    sid = await _candidate(node)
    await _reject(node, sid, "premature")
    back = await node.ask("skill_store", "recover", {"skill_id": sid}, ctx=ACME)
    assert back["skill_status"] == "candidate"  # never evaluated: a candidate again, still not matched
    assert await _matched(node) == []
    assert (await _skill(node, sid))["rejected"]["reason"] == "premature"  # the history stays on the record

    other = await _candidate(
        node,
        name="total-invoices",
        description="Total the amounts of a batch of invoices",
        procedure="1. calculator: add up the invoice amounts",
        triggers=["invoice", "total"],
    )
    await _reject(node, other, "premature too")
    live = await node.ask(
        "skill_store",
        "set_status",
        {"skill_id": other, "status": "active", "reason": "reviewed again"},
        ctx=ACME,
    )
    assert live["skill_status"] == "active"
    assert await _matched(node, query="total these invoices") == [other]


async def test_the_curator_treats_a_rejected_skill_as_archived(make_node: Any, clock: Any) -> None:
    node = await make_node(skills_tree())
    rejected = await _candidate(node)
    await _reject(node, rejected, "duplicate of a better one")
    await clock.advance(400 * DAY)
    summary = await node.ask("curator", "curate", {}, ctx=ACME)
    assert rejected not in summary["staled"] + summary["archived"]
    assert not any(rejected in m.values() for m in summary["merged"])
    skill = await _skill(node, rejected)
    assert skill["status"] == "archived" and skill["rejected"]["reason"] == "duplicate of a better one"


async def test_only_an_admin_rejects_not_even_the_skills_owner(make_node: Any) -> None:
    node = await make_node(skills_tree())
    sid = await _candidate(node)  # bob's own candidate
    for ctx in (ACME_USER, ACME_VIEWER):
        err = await _refused(node, {"skill_id": sid, "reason": "mine"}, ctx=ctx)
        assert err.code == "permission_denied" and "reject_skill" in err.message
    assert (await _skill(node, sid))["status"] == "candidate"
    assert await _events(node, "skill_rejected") == []


async def test_only_a_candidate_is_rejected_anything_else_is_archived(make_node: Any) -> None:
    node = await make_node(skills_tree())
    sid = await _candidate(node)
    await node.ask(
        "skill_store", "record_evaluation", {"skill_id": sid, "version": 1, "passed": True}, ctx=ACME
    )
    assert (await _skill(node, sid))["status"] == "active"
    err = await _refused(node, {"skill_id": sid, "reason": "too late"})
    assert err.code == "conflict" and err.details.get("field") == "skill_id"
    assert "is active, not a candidate" in err.message
    assert "archive" in err.message and "set_status" in err.message
    assert (await _skill(node, sid))["status"] == "active"

    await node.ask("skill_store", "archive", {"skill_id": sid}, ctx=ACME)
    err = await _refused(node, {"skill_id": sid, "reason": "again"})
    assert err.code == "conflict" and "is archived" in err.message
    assert "rejected" not in await _skill(node, sid)


async def test_bad_input_is_a_structured_error(make_node: Any) -> None:
    node = await make_node(skills_tree())
    sid = await _candidate(node)
    cases: list[tuple[dict[str, Any], str, str]] = [
        ({"skill_id": sid, "reason": ""}, "invalid_argument", "reason"),
        ({"skill_id": sid, "reason": "   \n "}, "invalid_argument", "reason"),
        ({"skill_id": sid, "reason": "x" * 501}, "invalid_argument", "reason"),
        ({"skill_id": sid, "reason": "bad\x00byte"}, "invalid_argument", "reason"),
        ({"skill_id": sid}, "invalid_argument", ""),  # reason missing altogether
        ({"skill_id": "../etc", "reason": "why"}, "invalid_argument", "skill_id"),
        ({"skill_id": "skill-nope", "reason": "why"}, "not_found", "skill_id"),
    ]
    for payload, code, field in cases:
        err = await _refused(node, payload)
        assert err.code == code, (payload, err)
        if field:
            assert err.details.get("field") == field, (payload, err.details)
    assert (await _skill(node, sid))["status"] == "candidate"
    assert (await _reject(node, sid, "y" * 500))["skill_status"] == "archived"  # the bound itself is fine


async def test_a_secret_in_the_reason_is_redacted_everywhere(make_node: Any) -> None:
    node = await make_node(skills_tree())
    sid = await _candidate(node)
    key = "sk-" + "A1b2C3d4" * 4
    reply = await _reject(node, sid, f"it leaks the key {key} into the prompt; password: hunter22")
    skill = await _skill(node, sid)
    events = await _events(node, "skill_rejected") + await _events(node, "skill_status_changed")
    for seen in (reply, skill, events):
        text = json.dumps(seen)
        assert key not in text and "hunter22" not in text
    assert skill["rejected"]["reason"].startswith("it leaks the key [REDACTED] into the prompt")


async def test_the_rejection_survives_a_restart(make_node: Any, tmp_path: Path) -> None:
    data = tmp_path / "data"
    node = await make_node(skills_tree(), data_dir=data)
    sid = await _candidate(node)
    await _reject(node, sid, "kept across restarts")
    await node.stop(deadline=5)
    again = await make_node(skills_tree(), data_dir=data)
    skill = await _skill(again, sid)
    assert skill["status"] == "archived" and skill["rejected"]["reason"] == "kept across restarts"
    assert await _matched(again) == []
