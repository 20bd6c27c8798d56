"""The offline (simulated) model on a labelled corpus of ordinary requests: right, "I can't", or wrong.

    .venv/bin/python bench/offline_corpus.py            # the table, per category and in total
    .venv/bin/python bench/offline_corpus.py --show wrong,cannot   # and those answers

Every request in ``bench/data/offline_corpus.jsonl`` goes through the real agent loop: a node built by
``build_agent_node(default_config(...))`` (agent, gateway with the simulated provider, tool executor,
memory, kanban, cron, goals, ...), one session and one user per item so items do not see each other's
memories or learned skills. An item's ``setup`` messages are sent first in the same session. A paused call
(a write needs approval) is approved by an admin, as a person would. Each answer is then classified:

- ``correct``: not a "cannot", and it has every expected value (``answer``: substrings of the reply) and
  leaves the expected state (``memory``: key -> value, read back with memory_recall; ``file``: path ->
  content, read back with read_file; ``tool``: tool -> substrings of what that tool returns now;
  ``forgotten``: keys memory_recall no longer finds; ``quarantined``: key -> value held for confirmation
  because it came from untrusted content, then found once the user confirms it);
  for an item labelled ``"cannot"``, an answer that says it cannot.
- ``cannot``: the answer starts with "I can't"/"I cannot"/"I couldn't" (an honest refusal or failure).
- ``wrong``: anything else: an answer that is not a "cannot" and misses the expected value or state, or a
  confident answer to a request labelled ``"cannot"``. The goal is 0.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from minihermes.app import build_agent_node, default_config
from minihermes.runtime import ManualClock, Node, RequestContext

CORPUS = Path(__file__).parent / "data" / "offline_corpus.jsonl"
ADMIN = RequestContext(tenant="corpus", principal="corpus-admin", roles=frozenset({"admin"}))
_CANNOT = ("i can't", "i cannot", "i couldn't")
OUTCOMES = ("correct", "cannot", "wrong")


@dataclass
class Result:
    item: dict[str, Any]
    answer: str
    outcome: str
    why: str = ""


def load(path: Path = CORPUS) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def is_cannot(answer: str) -> bool:
    return answer.strip().lower().replace("\u2019", "'").startswith(_CANNOT)


async def start_node(data_dir: Path) -> Node:
    config = default_config(data_dir)
    for spec in config.tree.walk():
        # Embedding models off (their load takes minutes on a busy machine): keyword search only.
        if spec.name == "skill_store":
            spec.args["semantic"] = "off"
        elif spec.name == "memory":
            spec.args["semantic"] = False
    node = build_agent_node(config, clock=ManualClock())
    await node.start()
    return node


def user(item: dict[str, Any]) -> RequestContext:
    return RequestContext(tenant="corpus", principal=f"u-{item['id']}", roles=frozenset({"user"}))


async def chat(node: Node, ctx: RequestContext, session: str, message: str) -> str:
    reply = await node.ask(
        "agent", "chat", {"message": message, "session_id": session, "user_id": ctx.principal}, ctx=ctx
    )
    while reply.get("status") == "paused":  # an admin approves the reviewed call, as a person would
        decided = await node.ask("guardrails", "approve", {"approval_id": reply["approval_id"]}, ctx=ADMIN)
        reply = decided["turn"]
    return str(reply.get("response") or "")


async def run_item(node: Node, item: dict[str, Any]) -> Result:
    ctx, session = user(item), f"corpus-{item['id']}"
    for message in item.get("setup", []):
        await chat(node, ctx, session, message)
    answer = await chat(node, ctx, session, item["request"])
    expect = item["expect"]
    if expect == "cannot":
        if is_cannot(answer):
            return Result(item, answer, "correct")
        return Result(item, answer, "wrong", "a confident answer to a request it cannot do")
    if is_cannot(answer):
        return Result(item, answer, "cannot")
    why = await _missing(node, ctx, session, answer, expect)
    return Result(item, answer, "wrong" if why else "correct", why)


async def _missing(node: Node, ctx: RequestContext, session: str, answer: str, expect: dict[str, Any]) -> str:
    for value in expect.get("answer", []):
        if value.lower() not in answer.lower():
            return f"the answer lacks {value!r}"
    for key, value in expect.get("memory", {}).items():
        got = await _tool(node, ctx, session, "memory_recall", {"key": key})
        if not isinstance(got, dict) or str(got.get("value")) != value:
            return f"memory {key!r} is {got!r}, not {value!r}"
    for key, value in expect.get("quarantined", {}).items():
        # Derived from untrusted content (a file, a web page): held, not remembered, until confirmed.
        got = await _tool(node, ctx, session, "memory_recall", {"key": key})
        if not isinstance(got, dict) or got.get("found") is not False:
            return f"memory {key!r} is {got!r} before it was confirmed"
        held = await node.ask("memory", "list_quarantined", {}, ctx=ctx)
        entry = next((m for m in held["memories"] if m["key"] == key), None)
        if entry is None or str(entry["value"]) != value:
            return f"quarantined {key!r} is {entry!r}, not {value!r}"
        await node.ask("memory", "confirm_memory", {"id": entry["id"]}, ctx=ctx)
        got = await _tool(node, ctx, session, "memory_recall", {"key": key})
        if not isinstance(got, dict) or str(got.get("value")) != value:
            return f"memory {key!r} is {got!r} after it was confirmed, not {value!r}"
    for key in expect.get("forgotten", []):
        got = await _tool(node, ctx, session, "memory_recall", {"key": key})
        if not isinstance(got, dict) or got.get("found") is not False:
            return f"memory {key!r} is {got!r}, not forgotten"
    for path, content in expect.get("file", {}).items():
        got = await _tool(node, ctx, session, "read_file", {"path": path})
        if not isinstance(got, dict) or got.get("content") != content:
            return f"file {path!r} holds {got!r}, not {content!r}"
    for name, values in expect.get("tool", {}).items():
        args = {"status": "all"} if name == "goal_list" else {}  # a goal may be judged done already
        got = json.dumps(await _tool(node, ctx, session, name, args))
        for value in values:
            if value.lower() not in got.lower():
                return f"{name} lacks {value!r}: {got[:300]}"
    return ""


async def _tool(node: Node, ctx: RequestContext, session: str, name: str, args: dict[str, Any]) -> Any:
    try:
        result = await node.ask(
            "tool_executor", "execute", {"name": name, "input": args, "session_id": session}, ctx=ctx
        )
    except Exception as e:  # a failed read-back is a failed expectation, reported as such
        return f"{type(e).__name__}: {e}"
    for _ in range(3):  # the executor's reply, and outside content as data: what the tool returned
        if isinstance(result, dict) and "untrusted_content" in result:
            result = result["untrusted_content"]
        elif isinstance(result, dict) and isinstance(result.get("result"), dict):
            result = result["result"]
    return result


async def run(items: list[dict[str, Any]], data_dir: Path) -> list[Result]:
    node = await start_node(data_dir)
    try:
        return [await run_item(node, item) for item in items]
    finally:
        await node.stop(deadline=5)


def table(results: list[Result]) -> str:
    categories = list(dict.fromkeys(r.item["category"] for r in results))
    rows = [("category", "n", "correct", "cannot", "confidently wrong")]
    for category in [*categories, "total"]:
        chosen = [r for r in results if category in ("total", r.item["category"])]
        counts = Counter(r.outcome for r in chosen)
        rows.append((category, str(len(chosen)), *(str(counts[o]) for o in OUTCOMES)))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |" for row in rows]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    parser.add_argument("--show", default="wrong", help="outcomes whose answers to print (comma-separated)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        results = asyncio.run(run(load(args.corpus), Path(tmp) / "data"))
    print(table(results))
    shown = {s.strip() for s in args.show.split(",") if s.strip()}
    for r in results:
        if r.outcome in shown:
            print(f"\n[{r.outcome}] {r.item['id']}: {r.item['request']}\n  -> {r.answer}")
            if r.why:
                print(f"  ({r.why})")


if __name__ == "__main__":
    main()
