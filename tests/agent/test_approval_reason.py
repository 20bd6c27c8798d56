"""An approval says why review was needed (issue 19): the gate's "review" verdict for the session and tool is
kept on the approval it leads to, and every reader sees it with whether the requester may decide."""

from __future__ import annotations

from typing import Any

from .conftest import ACME, ACME_USER
from .test_guardrails import check, g, specs


async def test_the_review_reason_is_kept_on_the_approval(make_node: Any, tmp_path: Any) -> None:
    node = await make_node(specs())
    await g(node, "set_policy", tool_name="calculator", decision="review")
    verdict = await check(node, "calculator", {"expression": "6 * 7"}, ctx=ACME_USER, session_id="s1")
    assert (verdict["decision"], verdict["reason"]) == ("review", "policy")
    made = await g(
        node,
        "request_approval",
        ctx=ACME_USER,
        tool_name="calculator",
        input={"expression": "6 * 7"},
        session_id="s1",
        turn_id="t1",
    )
    for ctx in (ACME, ACME_USER):
        listed = (await g(node, "list_approvals", ctx=ctx, session_id="s1"))["approvals"]
        assert [(a["approval_id"], a["reason"]) for a in listed] == [(made["approval_id"], "policy")]
        assert listed[0]["reason_message"] == "calculator: policy is review"
        assert listed[0]["requester_may_decide"] is False
    await g(node, "set_approval_policy", tool_name="calculator", self_approve=True)
    one = await g(node, "get_approval", ctx=ACME_USER, approval_id=made["approval_id"])
    assert one["requester_may_decide"] is True and one["reason"] == "policy"


async def test_a_caller_may_give_the_reason_and_an_unknown_one_is_empty(make_node: Any) -> None:
    node = await make_node(specs())
    given = await g(
        node,
        "request_approval",
        tool_name="terminal",
        input={"command": "ls"},
        session_id="s2",
        reason="supervised",
        reason_message="the gate is supervised",
    )
    bare = await g(node, "request_approval", tool_name="terminal", input={"command": "pwd"}, session_id="s3")
    by_id = {a["approval_id"]: a for a in (await g(node, "list_approvals"))["approvals"]}
    assert (by_id[given["approval_id"]]["reason"], by_id[bare["approval_id"]]["reason"]) == ("supervised", "")
