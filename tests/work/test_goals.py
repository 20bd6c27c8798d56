"""goals: set/list/complete/clear, persistence, judged after each agent turn, budgets, audit."""

from __future__ import annotations

import pytest

from minihermes.runtime import ActorError, Node
from minihermes.work.goals import judge_deterministic, parse_judgement, parse_verdict, relates

from . import doubles
from .conftest import ACME, GLOBEX, until


async def goals(node: Node, op: str, ctx=ACME, **payload):
    return await node.ask("goals", op, payload, ctx=ctx)


def test_the_deterministic_judge():
    assert judge_deterministic("find the capital of France", "The capital of France is Paris.")[0]
    assert not judge_deterministic("find the capital of France", "France is in Europe.")[0]
    assert judge_deterministic("ship it", "[GOAL DONE] shipped")[0]
    assert parse_verdict('sure: {"done": true, "reason": "ok"}') == (True, "ok")
    assert parse_verdict("yes it is done")[0] is False
    assert parse_verdict('{"done": "yes"}')[0] is False
    # relatedness: a content word of the goal in the message or the answer (by a crude stem)
    assert relates("water the plants", "did I water them?", "")
    assert relates("water the plants", "go on", "Planting is done.")
    assert not relates("plan a trip to Lisbon", "what is 2 + 2?", "2 + 2 = 4")
    assert parse_judgement('{"done": false, "related": false, "reason": "about lunch"}') == (
        False,
        False,
        "about lunch",
    )
    assert parse_judgement('{"done": true, "related": false}')[:2] == (True, True)  # done is related
    assert parse_judgement('{"done": false}')[1] is True  # not asked: counts, as before


async def test_goals_persist_and_are_scoped(app_node, tmp_path):
    node = await app_node(scripted=True)
    made = await goals(node, "set_goal", session_id="s1", text="deploy the MVP")
    await goals(node, "set_goal", session_id="*", text="keep answers short")
    await goals(node, "set_goal", session_id="s2", text="other session")
    with pytest.raises(ActorError) as e:
        await goals(node, "set_goal", session_id="s1", text=" ")
    assert e.value.details["field"] == "text"
    await node.stop()
    node = await app_node(scripted=True)  # a restart keeps them
    listed = (await goals(node, "list_goals", session_id="s1"))["goals"]
    assert sorted(g["text"] for g in listed) == ["deploy the MVP", "keep answers short"]
    mine = next(g for g in listed if g["session_id"] == "s1")
    assert mine["goal_id"] == made["goal_id"] and mine["status"] == "active"
    assert (await goals(node, "list_goals", ctx=GLOBEX, session_id="s1"))["goals"] == []
    await goals(node, "complete_goal", goal_id=made["goal_id"], reason="shipped")
    assert [g["text"] for g in (await goals(node, "list_goals", session_id="s1"))["goals"]] == [
        "keep answers short"
    ]
    done = (await goals(node, "list_goals", session_id="s1", status="completed"))["goals"]
    assert done[0]["completed_by"] == "request" and done[0]["reason"] == "shipped"
    assert (await goals(node, "clear_goal", session_id="s2"))["cleared"] == 1
    with pytest.raises(ActorError) as e:
        await goals(node, "complete_goal", goal_id="nope")
    assert e.value.code == "not_found"


async def test_a_turn_that_reaches_the_goal_completes_it_and_is_audited(app_node):
    node = await app_node()  # the simulated provider: the deterministic judge
    g = await goals(node, "set_goal", session_id="s1", text="remember the colour teal")
    other = await goals(node, "set_goal", session_id="s1", text="book a flight to Lisbon")
    message = "remember that my colour is teal"
    reply = await node.ask("agent", "chat", {"message": message, "session_id": "s1"}, ctx=ACME)
    assert "teal" in reply["response"]

    await until(lambda: _status(node, "s1", "completed"))
    by_id = {x["goal_id"]: x for x in (await goals(node, "list_goals", session_id="s1", status=""))["goals"]}
    assert by_id[g["goal_id"]]["status"] == "completed" and by_id[g["goal_id"]]["completed_by"] == "judge"
    # the other goal: not reached, and the turn was about something else, so none of its turns used
    assert (by_id[other["goal_id"]]["status"], by_id[other["goal_id"]]["turns_used"]) == ("active", 0)
    events = await node.ask("audit_event", "query_events", {"event_type": "goal_completed"}, ctx=ACME)
    assert events["count"] == 1 and g["goal_id"] in events["events"][0]["detail"]


async def test_the_llm_judge_and_the_turn_budget(app_node):
    node = await app_node(scripted=True)
    verdicts = {"s1": '{"done": false, "reason": "not yet"}'}
    doubles.SCRIPT.answer = lambda s, m: (
        verdicts.get(s, "working on it") if "judge" in m[0]["content"] else "ok"
    )
    a = await goals(node, "set_goal", session_id="s1", text="write the report", max_turns=2)
    for turn in ("t1", "t1", "t2"):  # the repeated notice of t1 is judged once
        await node.ask(
            "goals",
            "turn_completed",
            {"session_id": "s1", "turn_id": turn, "user_message": "go", "response": "drafting"},
            ctx=ACME,
        )
    exhausted = (await until(lambda: _status(node, "s1", "exhausted")))[0]
    assert exhausted["goal_id"] == a["goal_id"] and exhausted["turns_used"] == 2
    b = await goals(node, "set_goal", session_id="s1", text="write the summary")
    verdicts["s1"] = '{"done": true, "reason": "the summary is written"}'
    await node.ask(
        "goals",
        "turn_completed",
        {"session_id": "s1", "turn_id": "t3", "user_message": "go", "response": "done"},
        ctx=ACME,
    )
    done = (await until(lambda: _status(node, "s1", "completed")))[0]
    assert done["goal_id"] == b["goal_id"] and done["reason"] == "the summary is written"
    assert done["completed_by"] == "judge"


async def _status(node: Node, session: str, status: str):
    return (await goals(node, "list_goals", session_id=session, status=status))["goals"]


async def test_sessions_with_active_goals_are_marked_and_goals_written_before_the_markers_are_found(
    app_node,
):
    node = await app_node(scripted=True)
    kv = node.store.kv
    scope = ACME.scope
    # A goal written before the markers existed (no marker, no index flag): found after a restart.
    old = {
        "goal_id": "old1",
        "session_id": "s9",
        "text": "migrate me",
        "status": "active",
        "max_turns": 5,
        "turns_used": 0,
        "created_at": 1.0,
        "completed_at": None,
        "reason": "",
        "judged_turns": [],
    }
    await kv.put(scope, "goal:s9:old1", old)
    await node.stop()
    node = await app_node(scripted=True)
    kv = node.store.kv
    assert [g["text"] for g in (await goals(node, "list_goals", session_id="s9"))["goals"]] == ["migrate me"]
    assert await kv.get(scope, "goal_active:s9") is True
    assert (await goals(node, "list_goals", session_id="s1"))["goals"] == []  # unmarked: no goals
    made = await goals(node, "set_goal", session_id="s1", text="ship it")
    assert await kv.get(scope, "goal_active:s1") is True  # marked before the goal was written
    listed = (await goals(node, "list_goals", session_id="s1"))["goals"]
    assert [g["goal_id"] for g in listed] == [made["goal_id"]]
    await goals(node, "complete_goal", goal_id=made["goal_id"])
    assert (await goals(node, "list_goals", session_id="s1"))["goals"] == []
    assert await kv.get(scope, "goal_active:s1") is None  # its last goal is done: the marker goes
    await goals(node, "set_goal", session_id="*", text="be brief")  # a tenant goal reaches every session
    assert [g["text"] for g in (await goals(node, "list_goals", session_id="s7"))["goals"]] == ["be brief"]
    await node.stop()
    node = await app_node(scripted=True)  # the markers are what a restart reads
    assert [g["text"] for g in (await goals(node, "list_goals", session_id="s7"))["goals"]] == ["be brief"]
    assert [g["text"] for g in (await goals(node, "list_goals", session_id="s9"))["goals"]] == [
        "migrate me",  # oldest first
        "be brief",
    ]


async def test_a_turn_that_fell_short_completes_no_goal(app_node):
    node = await app_node(scripted=True)
    doubles.SCRIPT.answer = lambda s, m: (
        '{"done": true, "reason": "the report is written"}' if "judge" in m[0]["content"] else "ok"
    )
    g = await goals(node, "set_goal", session_id="s1", text="write the report", max_turns=5)
    await node.ask(
        "goals",
        "turn_completed",
        {
            "session_id": "s1",
            "turn_id": "t1",
            "user_message": "write the report",
            "response": "The report is written.",
            "success": False,
            "fell_short": "write_file failed",
        },
        ctx=ACME,
    )

    async def judged():
        got = (await goals(node, "list_goals", session_id="s1", status=""))["goals"]
        return got if got and got[0]["turns_used"] else None

    goal = (await until(judged))[0]
    assert goal["status"] == "active" and "write_file failed" in goal["reason"]
    await node.ask(
        "goals",
        "turn_completed",
        {
            "session_id": "s1",
            "turn_id": "t2",
            "user_message": "again",
            "response": "Written.",
            "success": True,
        },
        ctx=ACME,
    )
    done = (await until(lambda: _status(node, "s1", "completed")))[0]
    assert done["goal_id"] == g["goal_id"] and done["turns_used"] == 2


async def test_a_turn_that_manages_goals_judges_none(app_node):
    node = await app_node(scripted=True)
    doubles.SCRIPT.answer = lambda s, m: (
        '{"done": true, "reason": "covered"}' if "judge" in m[0]["content"] else "ok"
    )
    g = await goals(node, "set_goal", session_id="s1", text="water the plants", max_turns=5)
    listing = {"name": "goal_list", "input": {}, "is_error": False, "result": "water the plants"}
    await node.ask(
        "goals",
        "turn_completed",
        {
            "session_id": "s1",
            "turn_id": "t1",
            "user_message": "list my goals",
            "response": "Your active goals: water the plants.",  # every word of the goal: not a sign it is done
            "tool_calls": [listing],
        },
        ctx=ACME,
    )
    await node.ask(
        "goals",
        "turn_completed",
        {"session_id": "s1", "turn_id": "t2", "user_message": "go", "response": "I watered the plants."},
        ctx=ACME,
    )
    done = (await until(lambda: _status(node, "s1", "completed")))[0]
    assert done["goal_id"] == g["goal_id"] and done["turns_used"] == 1  # t1 was not counted
    events = await node.ask("audit_event", "query_events", {"event_type": "goal_completed"}, ctx=ACME)
    assert [e["detail"].endswith("turn=t2") for e in events["events"]] == [True]  # not by the listing turn


async def test_only_turns_that_relate_to_a_goal_use_its_turns(app_node):
    """Issue 24: a goal counted every turn of its session. An unrelated turn (the judge says so) uses none of
    its turns and leaves its last verdict; a related one that does not reach it uses one."""
    node = await app_node(scripted=True)
    doubles.SCRIPT.answer = lambda s, m: (
        (
            '{"done": false, "related": false, "reason": "a sum, not the trip"}'
            if "2 + 2" in m[1]["content"]
            else '{"done": false, "related": true, "reason": "hotels compared, none booked"}'
        )
        if "judge" in m[0]["content"]
        else "ok"
    )
    g = await goals(node, "set_goal", session_id="s1", text="plan a trip to Lisbon", max_turns=2)

    async def turn(turn_id: str, message: str, response: str, **kw) -> None:
        record = {"session_id": "s1", "turn_id": turn_id, "user_message": message, "response": response}
        await node.ask("goals", "turn_completed", record | kw, ctx=ACME)

    for i in range(3):  # more unrelated turns than the budget: the goal stays active, untouched
        await turn(f"u{i}", "what is 2 + 2?", "4")
    await turn(
        "f1", "what is 2 + 2?", "", success=False, fell_short="calculator failed"
    )  # fell short, unrelated
    got = (await _status(node, "s1", "active"))[0]
    assert (got["turns_used"], got["reason"]) == (0, "")
    await turn("r1", "compare hotels in Lisbon", "Three hotels compared.")
    got = (await _status(node, "s1", "active"))[0]
    assert (got["turns_used"], got["reason"]) == (1, "hotels compared, none booked")
    await turn("u9", "what is 2 + 2?", "4")
    assert (await _status(node, "s1", "active"))[0]["turns_used"] == 1
    await turn("r2", "and flights to Lisbon?", "Flights listed.")
    exhausted = (await _status(node, "s1", "exhausted"))[0]
    assert exhausted["goal_id"] == g["goal_id"] and exhausted["turns_used"] == 2


async def test_the_deterministic_judge_counts_only_related_turns(app_node):
    node = await app_node()  # the simulated provider: the deterministic judge
    g = await goals(node, "set_goal", session_id="s1", text="remember the colour teal", max_turns=3)
    for turn_id, message, response in (
        ("t1", "calculate 6 * 7", "6 * 7 = 42"),
        ("t2", "what is my colour?", "I don't have that stored yet."),
        ("t3", "and 2 + 2?", "4"),
    ):
        record = {"session_id": "s1", "turn_id": turn_id, "user_message": message, "response": response}
        await node.ask("goals", "turn_completed", record, ctx=ACME)  # queued before the next ask: in order
    got = (await _status(node, "s1", "active"))[0]
    assert got["goal_id"] == g["goal_id"]
    assert got["turns_used"] == 1  # "what is my colour?" related; the sums did not
