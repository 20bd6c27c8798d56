"""``minihermes audit anchors`` / ``audit verify --anchor``: export the signed retention anchors, check the trail
against one after it was rewritten (issue 25), embedded on a data dir."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path

from minihermes.runtime.store import RetentionRule, open_store

from ..store.test_event_erasure import rechain
from ._served import cli, ok_json


def _trim(data: Path) -> None:
    """What the node's retention pass does: here the content of the 'probe' events, then a prefix."""

    async def run() -> None:
        store = open_store("sqlite", data_dir=data)
        await store.open()
        try:
            rules = [RetentionRule("events", "audit", max_count=1, event_types=("probe",))]
            await store.apply_retention(rules, 2e9)
            await store.apply_retention([RetentionRule("events", "audit", max_count=3)], 2e9)
        finally:
            await store.close()

    asyncio.run(run())


def _rewrite(data: Path, first: int, base_seq: int) -> None:
    async def run() -> None:
        store = open_store("sqlite", data_dir=data)
        await store.open()
        try:
            await rechain(store, first, (base_seq, "e" * 64))
        finally:
            await store.close()

    asyncio.run(run())


def test_anchors_export_and_verify_a_rewritten_trail(tmp_path: Path) -> None:
    data = tmp_path / "data"
    d = ["--data-dir", str(data)]
    for i in range(6):
        event = {"event_type": "probe" if i % 2 else "note", "detail": f"n={i}"}
        logged = cli("call", "audit_event", "log_event", json.dumps(event), *d)
        assert logged.exit_code == 0, logged.output
    assert ok_json("audit", "anchors", *d)["anchors"] == []
    _trim(data)
    exported = cli("audit", "anchors", *d)
    assert exported.exit_code == 0, exported.output
    anchors = json.loads(exported.stdout)["anchors"]
    assert [a["trimmed"] for a in anchors] == [
        {"event_types": ["probe"], "entries": 2},
        {"through_seq": 4, "entries": 4},
    ]
    keep = tmp_path / "anchors.json"  # kept outside the data dir
    keep.write_text(exported.stdout)
    checked = ok_json("audit", "verify", "--anchor", str(keep), *d)
    assert checked["ok"] and checked["anchored"] and checked["checked"] == 3
    with sqlite3.connect(data / "minihermes.db") as conn:
        (base,) = conn.execute("SELECT anchor_seq FROM event_streams WHERE stream = 'audit'").fetchone()
    _rewrite(data, base + 1, base)
    assert ok_json("audit", "verify", *d)["ok"]  # the trail alone: every hash recomputed, it looks whole
    bad = cli("audit", "verify", "--anchor", str(keep), *d)
    assert bad.exit_code == 1 and f"seq {base + 1}" in bad.stderr, bad.output
    missing = cli("audit", "verify", "--anchor", str(tmp_path / "nope.json"), *d)
    assert missing.exit_code == 1 and "invalid_argument" in missing.stderr
