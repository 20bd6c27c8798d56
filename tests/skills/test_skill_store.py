"""skill_store: proposals, versions, matching, visibility, lifecycle, SKILL.md import/export."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from minihermes.runtime import ActorError, ActorSpec, NotFound, PermissionDenied
from minihermes.skills import SkillStore

from .collection import export_folder, folder_archive
from .conftest import ACME, ACME_USER, ACME_VIEWER, GLOBEX, skills_tree

CALC = "1. calculator: evaluate each arithmetic expression from the request"
CALC_STORE = CALC + "\n2. memory_store: store the result under key last_calc"
ACME_CAROL = replace(ACME_USER, principal="carol")


async def _propose(node: Any, ctx: Any = ACME_USER, **kw: Any) -> dict[str, Any]:
    payload = {
        "name": "sum-numbers",
        "description": "Add up several arithmetic expressions",
        "procedure": CALC,
        "triggers": ["sum", "arithmetic"],
        "tags": ["math"],
        "session_id": "s1",
        "turn_id": "t1",
        **kw,
    }
    reply: dict[str, Any] = await node.ask("skill_store", "propose_skill", payload, ctx=ctx)
    return reply


async def _activate(node: Any, skill_id: str) -> None:
    got = await node.ask("skill_store", "get_skill", {"skill_id": skill_id}, ctx=ACME)
    version = got["skill"]["version"]
    out = await node.ask(
        "skill_store",
        "record_evaluation",
        {"skill_id": skill_id, "version": version, "passed": True},
        ctx=ACME,
    )
    assert out["skill_status"] == "active"


async def _match(node: Any, query: str, ctx: Any = ACME_USER, **kw: Any) -> list[dict[str, Any]]:
    reply = await node.ask("skill_store", "match_skills", {"query": query, **kw}, ctx=ctx)
    assert reply["status"] == "ok"
    return list(reply["skills"])


async def test_a_candidate_is_never_matched_until_its_evaluation_passes(make_node):
    node = await make_node(skills_tree())
    p = await _propose(node)
    assert p["created"] and p["skill_status"] == "candidate" and p["version"] == 1
    assert await _match(node, "sum these arithmetic expressions") == []
    await _activate(node, p["skill_id"])
    [hit] = await _match(node, "sum these arithmetic expressions")
    assert set(hit) == {
        "skill_id",
        "name",
        "description",
        "procedure",
        "score",
        "coverage",
        "version",
        "status",
    }
    assert hit["skill_id"] == p["skill_id"] and hit["procedure"] == CALC and hit["status"] == "active"
    got = await node.ask("skill_store", "get_skill", {"skill_id": p["skill_id"]}, ctx=ACME_USER)
    assert got["skill"]["provenance"] == {
        "session_id": "s1",
        "user_id": "bob",
        "turn_id": "t1",
        "source": "agent",
    }
    assert got["skill"]["derived_from_untrusted"] is False and got["skill"]["quarantined"] is False


async def test_a_user_cannot_pass_their_own_skill(make_node):
    node = await make_node(skills_tree())
    p = await _propose(node)
    with pytest.raises(ActorError) as e:
        await node.ask(
            "skill_store",
            "record_evaluation",
            {"skill_id": p["skill_id"], "version": 1, "passed": True},
            ctx=ACME_USER,
        )
    assert e.value.code == "permission_denied"


async def test_a_failed_evaluation_keeps_a_candidate_out(make_node):
    node = await make_node(skills_tree())
    p = await _propose(node)
    out = await node.ask(
        "skill_store",
        "record_evaluation",
        {"skill_id": p["skill_id"], "version": 1, "passed": False},
        ctx=ACME,
    )
    assert out["skill_status"] == "candidate"
    assert await _match(node, "sum arithmetic") == []


async def test_effectful_procedures_also_need_an_admins_approval(make_node):
    node = await make_node(skills_tree())
    p = await _propose(
        node,
        name="save-report",
        procedure="1. calculator: total\n2. write_file: save it",
        triggers=["report"],
    )
    out = await node.ask(
        "skill_store",
        "record_evaluation",
        {"skill_id": p["skill_id"], "version": 1, "passed": True},
        ctx=ACME,
    )
    assert out["skill_status"] == "candidate" and out["approved"] is False
    assert await _match(node, "save the report") == []
    with pytest.raises(ActorError) as e:
        await node.ask("skill_store", "approve_skill", {"skill_id": p["skill_id"]}, ctx=ACME_USER)
    assert e.value.code == "permission_denied"
    out = await node.ask("skill_store", "approve_skill", {"skill_id": p["skill_id"]}, ctx=ACME)
    assert out["skill_status"] == "active"
    assert [s["skill_id"] for s in await _match(node, "save the report")] == [p["skill_id"]]


async def test_a_near_duplicate_proposal_patches_the_existing_skill(make_node):
    node = await make_node(skills_tree())
    first = await _propose(node)
    await _activate(node, first["skill_id"])
    again = await _propose(
        node,
        name="sum-numbers",
        description="Add up several arithmetic expressions quickly",
        procedure=CALC_STORE,
        triggers=["total"],
        turn_id="t2",
    )
    assert again["patched"] and not again["created"]
    assert again["skill_id"] == first["skill_id"] and again["version"] == 2
    got = await node.ask("skill_store", "get_skill", {"skill_id": first["skill_id"]}, ctx=ACME_USER)
    assert got["skill"]["triggers"] == ["sum", "arithmetic", "total"]
    assert [v["version"] for v in got["versions"]] == [1, 2]
    listed = await node.ask("skill_store", "list_skills", {}, ctx=ACME)
    assert listed["count"] == 1
    # Same words, different steps: a different skill.
    other = await _propose(
        node,
        name="weather-report",
        description="Look up the weather",
        procedure="1. http_request: get it",
        triggers=["weather"],
    )
    assert other["created"]


async def test_update_and_rollback_keep_every_version(make_node):
    node = await make_node(skills_tree())
    p = await _propose(node)
    await _activate(node, p["skill_id"])
    up = await node.ask(
        "skill_store",
        "update_skill",
        {"skill_id": p["skill_id"], "procedure": CALC_STORE, "reason": "also store"},
        ctx=ACME_USER,
    )
    assert up["version"] == 2
    [hit] = await _match(node, "sum arithmetic")
    assert hit["procedure"] == CALC_STORE and hit["version"] == 2
    back = await node.ask("skill_store", "rollback", {"skill_id": p["skill_id"], "version": 1}, ctx=ACME_USER)
    assert back == {"status": "ok", "skill_id": p["skill_id"], "version": 3, "restored": 1}
    [hit] = await _match(node, "sum arithmetic")
    assert hit["procedure"] == CALC and hit["version"] == 3
    v2 = await node.ask("skill_store", "get_skill", {"skill_id": p["skill_id"], "version": 2}, ctx=ACME_USER)
    assert v2["skill"]["procedure"] == CALC_STORE
    with pytest.raises(ActorError) as e:
        await node.ask("skill_store", "rollback", {"skill_id": p["skill_id"], "version": 9}, ctx=ACME_USER)
    assert e.value.code == "invalid_argument"
    with pytest.raises(ActorError) as e:
        await node.ask("skill_store", "rollback", {"skill_id": p["skill_id"], "version": 1}, ctx=ACME_CAROL)
    assert e.value.code == "permission_denied"


async def test_a_users_skill_serves_only_that_user_until_promoted(make_node):
    node = await make_node(skills_tree())
    p = await _propose(node)
    await _activate(node, p["skill_id"])
    assert len(await _match(node, "sum arithmetic")) == 1
    assert await _match(node, "sum arithmetic", ctx=ACME_CAROL) == []
    # The agent passes the user explicitly (as a service it may): same rule.
    assert await _match(node, "sum arithmetic", ctx=ACME, user_id="carol") == []
    assert len(await _match(node, "sum arithmetic", ctx=ACME, user_id="bob")) == 1
    # A plain user cannot speak for someone else.
    assert len(await _match(node, "sum arithmetic", ctx=ACME_CAROL, user_id="bob")) == 0
    with pytest.raises(ActorError):
        await node.ask("skill_store", "get_skill", {"skill_id": p["skill_id"]}, ctx=ACME_CAROL)
    await node.ask("skill_store", "promote_skill", {"skill_id": p["skill_id"]}, ctx=ACME)
    assert len(await _match(node, "sum arithmetic", ctx=ACME_CAROL)) == 1
    # Another tenant never sees it.
    assert await _match(node, "sum arithmetic", ctx=GLOBEX) == []


async def test_pin_archive_recover_and_usage(make_node):
    node = await make_node(skills_tree())
    p = await _propose(node)
    sid = p["skill_id"]
    await _activate(node, sid)
    await node.ask("skill_store", "pin", {"skill_id": sid}, ctx=ACME_USER)
    with pytest.raises(ActorError) as e:
        await node.ask("skill_store", "archive", {"skill_id": sid}, ctx=ACME_USER)
    assert e.value.code == "conflict"
    pinned = await node.ask("skill_store", "list_skills", {"status": "pinned"}, ctx=ACME_USER)
    assert [s["skill_id"] for s in pinned["skills"]] == [sid]
    await node.ask("skill_store", "unpin", {"skill_id": sid}, ctx=ACME_USER)
    await node.ask("skill_store", "archive", {"skill_id": sid}, ctx=ACME_USER)
    assert await _match(node, "sum arithmetic") == []
    archived = await node.ask("skill_store", "list_skills", {"status": "archived"}, ctx=ACME_USER)
    assert archived["count"] == 1
    await node.ask("skill_store", "recover", {"skill_id": sid}, ctx=ACME_USER)
    assert len(await _match(node, "sum arithmetic")) == 1
    used = await node.ask("skill_store", "record_usage", {"skill_id": sid, "session_id": "s9"}, ctx=ACME_USER)
    assert used["uses"] == 1
    node.send("skill_store", "record_usage", {"skill_id": sid, "success": False}, ctx=ACME_USER)
    got = await node.ask("skill_store", "get_skill", {"skill_id": sid}, ctx=ACME_USER)
    assert (got["skill"]["uses"], got["skill"]["successes"], got["skill"]["failures"]) == (2, 1, 1)
    with pytest.raises(ActorError) as e:
        await node.ask("skill_store", "pin", {"skill_id": sid}, ctx=ACME_VIEWER)
    assert e.value.code == "permission_denied"


async def test_ranking_prefers_the_relevant_skill_and_usage_breaks_ties(make_node):
    node = await make_node(skills_tree())
    ids = {}
    for name, desc, proc, trig in [
        ("sum-numbers", "Add up arithmetic expressions", CALC, ["sum"]),
        ("remember-fact", "Store a fact the user tells", "1. memory_store: store the fact", ["remember"]),
        ("recall-fact", "Recall a stored fact", "1. memory_recall: recall it", ["recall"]),
    ]:
        p = await _propose(node, name=name, description=desc, procedure=proc, triggers=trig)
        await _activate(node, p["skill_id"])
        ids[name] = p["skill_id"]
    assert (await _match(node, "please remember that my dog is Rex"))[0]["skill_id"] == ids["remember-fact"]
    assert (await _match(node, "recall my dog's name"))[0]["skill_id"] == ids["recall-fact"]
    hits = await _match(node, "sum 2+2", limit=1)
    assert len(hits) == 1 and hits[0]["skill_id"] == ids["sum-numbers"]
    with pytest.raises(ActorError):
        await node.ask("skill_store", "match_skills", {"query": "x", "limit": 0}, ctx=ACME_USER)


async def test_the_index_is_rebuilt_from_the_store_after_a_restart(make_node, tmp_path):
    data = tmp_path / "d"
    node = await make_node(skills_tree(), data_dir=data)
    p = await _propose(node)
    await _activate(node, p["skill_id"])
    await node.ask(
        "skill_store", "update_skill", {"skill_id": p["skill_id"], "procedure": CALC_STORE}, ctx=ACME_USER
    )
    await node.stop(deadline=5)
    again = await make_node(skills_tree(), data_dir=data)
    [hit] = await _match(again, "sum arithmetic")
    assert hit["skill_id"] == p["skill_id"] and hit["version"] == 2 and hit["procedure"] == CALC_STORE
    found = await again.ask("skill_store", "search_skills", {"query": "arithmetic"}, ctx=ACME_USER)
    assert [s["skill_id"] for s in found["skills"]] == [p["skill_id"]]
    tuples = await again.ask("skill_store", "list_skills", {"status": "active"}, ctx=ACME_USER)
    assert tuples["count"] == 1


async def test_skill_md_import_and_export_round_trip(make_node, tmp_path):
    node = await make_node(skills_tree())
    folder = tmp_path / "in" / "calc-and-remember"
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text(
        "---\nname: calc-and-remember\ndescription: Calculate an expression and keep the result.\n"
        "metadata:\n  triggers: [calculate, remember]\n---\n\n" + CALC_STORE + "\n"
    )
    out = await node.ask(
        "skill_store",
        "import_skills",
        {"archive": folder_archive(tmp_path / "in"), "approve": True},
        ctx=ACME,
    )
    assert out["count"] == 1
    # An admin's approved import serves the whole tenant at once.
    [hit] = await _match(node, "calculate 3*4 and remember it", ctx=ACME_CAROL)
    assert hit["name"] == "calc-and-remember" and hit["procedure"] == CALC_STORE
    exported = await export_folder(node, tmp_path / "out", ACME)
    text = (tmp_path / "out" / "calc-and-remember" / "SKILL.md").read_text()
    assert exported["written"] == 1 and text.startswith("---\nname: calc-and-remember\n")
    again = await node.ask("skill_store", "import_skills", {"documents": [text]}, ctx=ACME)
    assert again["imported"][0]["skill_id"] == out["imported"][0]["skill_id"]
    long_name = "---\nname: " + "x" * 65 + "\ndescription: d\n---\n1. calculator: x\n"
    with pytest.raises(ActorError) as e:
        await node.ask("skill_store", "import_skills", {"documents": [long_name]}, ctx=ACME)
    assert e.value.code == "invalid_argument"
    with pytest.raises(ActorError) as e:
        await node.ask("skill_store", "import_skills", {"documents": ["no front matter"]}, ctx=ACME)
    assert e.value.code == "invalid_argument"
    with pytest.raises(ActorError) as e:
        await node.ask("skill_store", "import_skills", {"path": str(tmp_path / "in")}, ctx=ACME_USER)
    assert e.value.code == "permission_denied"


async def test_bad_input_is_a_structured_error(make_node):
    node = await make_node([ActorSpec("skill_store", SkillStore, per_tenant=True, args={"semantic": "off"})])
    for bad in ({"name": ""}, {"name": "x" * 65}, {"description": "d" * 1025}, {"procedure": " "}):
        with pytest.raises(ActorError) as e:
            await _propose(node, **bad)
        assert e.value.code == "invalid_argument"
    with pytest.raises(ActorError) as e:
        await node.ask("skill_store", "get_skill", {"skill_id": "nope"}, ctx=ACME)
    assert e.value.code == "not_found"


async def test_the_agent_may_send_the_turns_calls_instead_of_a_count(make_node):
    node = await make_node(skills_tree())
    calls = [{"name": "calculator", "input": {}, "is_error": False}] * 2
    node.send(
        "skill_store",
        "evaluate_for_learning",
        {"session_id": "s", "turn_id": "t", "user_intent": "x", "tool_calls": calls},
        ctx=ACME_USER,
    )
    stats = await node.ask("skill_store", "get_stats", {}, ctx=ACME)  # handled after the cast
    assert stats["skills"] == 0  # two calls: under the threshold, and the cast was accepted


async def test_forgetting_a_user_clears_provenance_and_erases_their_own_skills(make_node):
    node = await make_node(skills_tree())
    own = await _propose(node)
    await _activate(node, own["skill_id"])
    shared = await _propose(
        node,
        name="weather",
        description="Weather",
        procedure="1. calculator: x",
        triggers=["weather"],
        session_id="s2",
    )
    await _activate(node, shared["skill_id"])
    await node.ask("skill_store", "promote_skill", {"skill_id": shared["skill_id"]}, ctx=ACME)
    out = await node.ask("skill_store", "forget_subject", {"user_id": "bob"}, ctx=ACME)
    assert out["cleared"] == {"skills": 1, "skill_provenance": 1}
    with pytest.raises(NotFound):  # their own skill: record, procedure and index entries erased
        await node.ask("skill_store", "get_skill", {"skill_id": own["skill_id"]}, ctx=ACME)
    assert own["skill_id"] not in str(await node.ask("skill_store", "list_skills", {}, ctx=ACME))
    b = (await node.ask("skill_store", "get_skill", {"skill_id": shared["skill_id"]}, ctx=ACME))["skill"]
    assert b["status"] == "active" and b["provenance"]["session_id"] == "" and b["scope"] == "tenant"
    assert "bob" not in str(await node.ask("skill_store", "search_skills", {"query": "weather"}, ctx=ACME))


async def test_a_user_forgets_only_their_own_skills(make_node):
    node = await make_node(skills_tree())
    own = await _propose(node)
    with pytest.raises(PermissionDenied):
        await node.ask("skill_store", "forget_subject", {"user_id": "carol"}, ctx=ACME_USER)
    with pytest.raises(PermissionDenied):
        await node.ask("skill_store", "forget_subject", {"tenant": True}, ctx=ACME_USER)
    out = await node.ask("skill_store", "forget_subject", {"session_id": "s1"}, ctx=ACME_CAROL)
    assert out["cleared"] == {"skills": 0, "skill_provenance": 0}  # bob's session: not carol's to forget
    await node.ask("skill_store", "get_skill", {"skill_id": own["skill_id"]}, ctx=ACME)


async def test_a_users_proposal_never_rewrites_a_tenant_skill(make_node):
    node = await make_node(skills_tree())
    p = await _propose(node)
    await _activate(node, p["skill_id"])
    await node.ask("skill_store", "promote_skill", {"skill_id": p["skill_id"]}, ctx=ACME)
    again = await _propose(node, ctx=ACME_CAROL, procedure=CALC_STORE, turn_id="t9")
    assert again == {
        "status": "ok",
        "skill_id": p["skill_id"],
        "created": False,
        "patched": False,
        "version": 1,
        "skill_status": "active",
    }
    got = await node.ask("skill_store", "get_skill", {"skill_id": p["skill_id"]}, ctx=ACME)
    assert got["skill"]["procedure"] == CALC and got["skill"]["versions"] == 1


async def test_a_patched_version_that_fails_its_evaluation_is_rolled_back(make_node):
    node = await make_node(skills_tree())
    p = await _propose(node)
    await _activate(node, p["skill_id"])
    twin = await _propose(node, procedure=CALC_STORE, turn_id="t2")
    assert twin["patched"] and twin["version"] == 2
    out = await node.ask(
        "skill_store",
        "record_evaluation",
        {"skill_id": p["skill_id"], "version": 2, "passed": False},
        ctx=ACME,
    )
    assert out["rolled_back"] is True
    got = await node.ask("skill_store", "get_skill", {"skill_id": p["skill_id"]}, ctx=ACME_USER)
    assert (
        got["skill"]["version"] == 3
        and got["skill"]["procedure"] == CALC
        and got["skill"]["status"] == "active"
    )
    assert [v["reason"] for v in got["versions"]][-1] == "rollback to v1"
