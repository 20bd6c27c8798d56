"""A kanban card with a body, worked by the offline model (issue 24): the worker sends the card's title, a
blank line and its body (``worker_prompt``), with its protocol as the turn's instructions; the offline model
does the body (the title names it), and reads the hand-off from the cards it depends on as context. A body it
does not understand still fails the card, with an honest "I can't"."""

from __future__ import annotations

from typing import Any

from minihermes.runtime import Node

from .conftest import ACME, until


async def kb(node: Node, op: str, **payload: Any) -> dict[str, Any]:
    reply: dict[str, Any] = await node.ask("kanban", op, payload, ctx=ACME)
    return reply


async def settled(node: Node, task_id: str) -> dict[str, Any]:
    async def check() -> dict[str, Any] | None:
        card: dict[str, Any] = (await kb(node, "show", task_id=task_id))["task"]
        if card["status"] in ("ready", "in_progress") or not card["comments"]:
            return None
        return card

    found: dict[str, Any] = await until(check, what=f"card {task_id} settled")
    return found


async def test_a_card_whose_body_is_a_request_is_done(app_node: Any) -> None:
    node = await app_node()
    body = "calculate 250 * 4 and remember the result as budget"
    task_id = (await kb(node, "create", title="Weekly budget", body=body, assignee="agent"))["task_id"]
    card = await settled(node, task_id)
    assert card["status"] == "done", card
    assert "1000" in card["summary"] and "budget" in card["summary"]
    remembered = await node.ask("memory", "recall_memory", {"key": "budget"}, ctx=ACME)
    assert remembered["found"] and remembered["value"] == "1000"


async def test_a_card_that_depends_on_another_reads_its_hand_off_as_context(app_node: Any) -> None:
    node = await app_node()
    first = (await kb(node, "create", title="Compute 6 * 7", assignee="agent"))["task_id"]
    second = (
        await kb(
            node,
            "create",
            title="Yearly cost",
            body="calculate 1,250 * 12",
            assignee="agent",
            depends_on=[first],
        )
    )["task_id"]
    assert (await settled(node, first))["status"] == "done"
    card = await settled(node, second)
    assert card["status"] == "done", (card["blocked_reason"], card["comments"])
    assert "15000" in card["summary"]


async def test_a_card_whose_body_is_not_understood_fails_honestly(app_node: Any) -> None:
    node = await app_node()
    task_id = (await kb(node, "create", title="Fun", body="tell me a joke", assignee="agent"))["task_id"]
    card = await settled(node, task_id)
    assert card["status"] == "blocked" and "tell me a joke" in card["blocked_reason"], card
