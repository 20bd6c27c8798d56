"""EventLog format 2: sealed entries forgotten by subject, content trimmed by kind, signed retention anchors,
and verification that still catches every edit (every backend)."""

from __future__ import annotations

import base64
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from minihermes.runtime._clock import ManualClock
from minihermes.runtime.store import RetentionRule, Store, open_store
from minihermes.runtime.store._chain import chain_hash, chain_hash_v2, content_digest

from .conftest import PG_DSN, A, B

TOKEN = "Pz7Qx-Secret-4417"


async def raw(store: Store, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Run SQL behind the store's back (as a bad disk, a bug or an attacker would); ``?`` placeholders."""
    if store.backend == "sqlite":
        conn = sqlite3.connect(store.path, isolation_level=None)  # type: ignore[attr-defined]
        try:
            cur = conn.execute(sql, params)
            return cur.fetchall() if cur.description else []
        finally:
            conn.close()
    import psycopg
    from psycopg import sql as pgsql

    async with await psycopg.AsyncConnection.connect(PG_DSN, autocommit=True) as conn:
        await conn.execute(pgsql.SQL("SET search_path TO {}").format(pgsql.Identifier(store.schema)))  # type: ignore[attr-defined]
        cur = await conn.execute(sql.replace("?", "%s"), params)  # type: ignore[arg-type]
        return await cur.fetchall() if cur.description else []


async def fill(store: Store, clock: ManualClock) -> None:
    """Seqs 1-6: alice (s1), bob (s2), alice (s3, with the token), bob, a system entry, alice again."""
    plan = [
        ("tool_executed", ["user:alice", "session:s1"], {"who": "alice", "input": "x"}),
        ("tool_executed", ["user:bob", "session:s2"], {"who": "bob", "input": "y"}),
        ("chat", ["user:alice", "session:s3"], {"who": "alice", "input": f"passport {TOKEN}"}),
        ("llm_call", ["user:bob", "session:s2"], {"who": "bob", "tokens": 12}),
        ("node_started", [], {"who": "system"}),
        ("llm_call", ["user:alice", "session:s1"], {"who": "alice", "tokens": 3}),
    ]
    for kind, subjects, data in plan:
        await store.events.append(A, "audit", data, kind=kind, subjects=subjects)
        await clock.advance(10)


async def test_sealed_entries_read_back_and_hash_their_sealed_bytes(store: Store) -> None:
    record = await store.events.append(A, "audit", {"t": (1, 2)}, kind="chat", subjects=["user:a"])
    assert (record.v, record.kind, record.data, record.erased) == (2, "chat", {"t": [1, 2]}, "")
    assert (await store.events.read(A, "audit")) == [record]
    (body, digest, key_id, data) = (await raw(store, "SELECT body, digest, key_id, data FROM events"))[0]
    assert data == "" and b"[1,2]" not in bytes(body)  # sealed: no plaintext stored
    assert digest == content_digest(bytes(body))
    assert record.hash == chain_hash_v2("0" * 64, 1, record.ts, "chat", key_id, digest)
    plain = await store.events.append(A, "audit", {"n": 1}, kind="note")  # a kind, no subjects: plain
    assert plain.hash == chain_hash_v2(record.hash, 2, plain.ts, "note", None, content_digest(b'{"n":1}'))
    old = await store.events.append(A, "audit", {"n": 2})  # neither: format 1, as before
    assert (old.v, old.hash) == (1, chain_hash(plain.hash, 3, old.ts, {"n": 2}))
    assert (await store.events.verify(A, "audit")).ok
    with pytest.raises(ValueError, match="reserved"):
        await store.events.append(A, "audit", 1, kind="~erasure")
    with pytest.raises(ValueError, match="subject"):
        await store.events.append(A, "audit", 1, subjects=[""])


async def test_forget_a_subject_leaves_others_and_the_chain(store: Store, clock: ManualClock) -> None:
    await fill(store, clock)
    await store.events.append(B, "audit", {"who": "alice"}, kind="chat", subjects=["user:alice"])
    before = await store.events.read(A, "audit")
    erasure = await store.events.forget(A, "audit", ["user:alice"])
    assert (erasure.forgotten, erasure.keys, erasure.legacy, erasure.kept) == (3, 2, 0, 0)
    after = await store.events.read(A, "audit")
    assert [r.seq for r in after] == [1, 2, 3, 4, 5, 6]  # nothing removed from the chain
    for old, new in zip(before, after, strict=True):
        if old.data["who"] == "alice":
            assert (new.data, new.erased, new.kind, new.ts, new.hash) == (
                None,
                "forgotten",
                old.kind,
                old.ts,
                old.hash,
            )
        else:
            assert new == old  # bob's and the system's entries are untouched
    assert (await store.events.verify(A, "audit")).ok
    assert [r.data for r in await store.events.read(B, "audit")] == [{"who": "alice"}]  # another tenant
    # A new entry of the same subject gets a new key; forgetting again counts only it.
    await store.events.append(A, "audit", {"who": "alice"}, kind="chat", subjects=["user:alice"])
    assert (await store.events.read(A, "audit", after_seq=6))[0].data == {"who": "alice"}
    assert (await store.events.forget(A, "audit", ["session:s2", "user:alice"])).forgotten == 3
    assert [r.erased for r in await store.events.read(A, "audit")] == ["forgotten"] * 4 + [""] + [
        "forgotten"
    ] * 2
    assert (await store.events.verify(A, "audit")).ok


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("body", b"\x00" * 40),
        ("digest", "0" * 64),
        ("kind", "other"),
        ("ts", 1.0),
        ("key_id", 999),
        ("key_id", None),
        ("data", '{"who":"eve"}'),
        ("prev_hash", "0" * 64),
        ("hash", "1" * 64),
        ("v", 1),
    ],
)
async def test_editing_any_stored_column_is_reported_at_its_seq(
    store: Store, clock: ManualClock, column: str, value: object
) -> None:
    await fill(store, clock)
    await store.events.forget(A, "audit", ["user:alice"])
    # seq 4 (bob's llm_call, live) and seq 3 (alice's, forgotten): both are still covered.
    for seq in (4, 3):
        (saved,) = await raw(store, f"SELECT {column} FROM events WHERE seq = ?", (seq,))
        await raw(store, f"UPDATE events SET {column} = ? WHERE seq = ?", (value, seq))
        check = await store.events.verify(A, "audit")
        assert (check.ok, check.first_bad_seq) == (False, seq), column
        await raw(store, f"UPDATE events SET {column} = ? WHERE seq = ?", (saved[0], seq))
    assert (await store.events.verify(A, "audit")).ok


async def test_content_removed_without_an_erasure_entry_is_reported(store: Store, clock: ManualClock) -> None:
    await fill(store, clock)
    await raw(store, "UPDATE events SET body = NULL WHERE seq = 2")
    check = await store.events.verify(A, "audit")
    assert (check.ok, check.first_bad_seq) == (False, 2)
    assert "erasure" in check.reason


async def test_legacy_entries_verify_and_are_blanked_with_a_record(store: Store, clock: ManualClock) -> None:
    """Format-1 entries (written before format 2) stay readable and verifiable; forgetting them blanks their
    content and appends a chained erasure entry naming their (seq, ts, hash) and the kind they keep."""
    await store.events.append(A, "audit", {"principal": "alice", "detail": f"old {TOKEN}"})
    await store.events.append(A, "audit", {"principal": "bob", "detail": "old bob"})
    await store.events.append(A, "audit", {"principal": "alice"}, kind="chat", subjects=["user:alice"])
    assert [r.v for r in await store.events.read(A, "audit")] == [1, 1, 2]
    assert (await store.events.verify(A, "audit")).ok

    def alices(data: Any) -> str | None:
        return "tool_executed" if data.get("principal") == "alice" else None

    erasure = await store.events.forget(A, "audit", ["user:alice"], legacy=alices)
    assert (erasure.forgotten, erasure.legacy, erasure.kept) == (2, 1, 0)
    records = await store.events.read(A, "audit")
    assert [(r.seq, r.erased) for r in records] == [(1, "forgotten"), (2, ""), (3, "forgotten"), (4, "")]
    assert records[0].kind == "tool_executed"  # a forgotten entry keeps its type
    assert records[3].kind == "~erasure"
    assert records[3].data["legacy"] == [[1, records[0].ts, records[0].hash, "tool_executed"]]
    assert (await store.events.verify(A, "audit")).ok
    # The blanked v1 entry is still covered: its time, hash and kind are in the erasure entry.
    for edit, undo in [
        ("ts = ts + 1", "ts = ts - 1"),
        ("kind = 'other'", "kind = 'tool_executed'"),
        ("hash = 'ab'", f"hash = '{records[0].hash}'"),
    ]:
        await raw(store, f"UPDATE events SET {edit} WHERE seq = 1")
        check = await store.events.verify(A, "audit")
        assert (check.ok, check.first_bad_seq) == (False, 1), edit
        await raw(store, f"UPDATE events SET {undo} WHERE seq = 1")
    assert (await store.events.verify(A, "audit")).ok
    await raw(store, "UPDATE events SET data = ? WHERE seq = 2", ('{"principal":"eve"}',))
    assert (await store.events.verify(A, "audit")).first_bad_seq == 2
    # A damaged entry is not blanked (that would launder it): it is counted and left for verify.
    assert (await store.events.forget(A, "audit", [], legacy=lambda d: "x")).kept == 1
    assert (await store.events.verify(A, "audit")).first_bad_seq == 2


async def test_forget_everything(store: Store, clock: ManualClock) -> None:
    await fill(store, clock)
    await store.events.append(A, "audit", {"plain": TOKEN}, kind="note")
    await store.events.append(A, "audit", {"older": TOKEN})
    erasure = await store.events.forget(A, "audit", None)
    assert (erasure.forgotten, erasure.legacy) == (8, 1)
    records = await store.events.read(A, "audit")
    assert all(r.data is None for r in records[:-1]) and records[-1].kind == "~erasure"
    assert TOKEN not in json.dumps(records[-1].data)
    assert (await store.events.verify(A, "audit")).ok


async def test_retention_by_event_type(store: Store, clock: ManualClock) -> None:
    await fill(store, clock)
    for i in range(4):
        await store.events.append(A, "audit", {"i": i}, kind="llm_call", subjects=["user:carol"])
    rule = RetentionRule("events", "audit", max_count=1, event_types=("llm_call",))
    report = await store.apply_retention([rule], clock.time())
    assert report.deleted["events"] == 5  # 6 llm_calls, the newest kept
    records = await store.events.read(A, "audit")
    trimmed = [r.seq for r in records if r.erased == "trimmed"]
    assert trimmed == [4, 6, 7, 8, 9]
    assert all(r.kind == "llm_call" for r in records if r.erased)
    assert [r.data for r in records if r.kind == "tool_executed"] == [
        {"who": "alice", "input": "x"},
        {"who": "bob", "input": "y"},
    ]
    assert records[-1].kind == "~erasure" and records[-1].data["event_types"] == ["llm_call"]
    assert (await store.events.verify(A, "audit")).ok
    (anchor,) = await store.events.anchors(A, "audit")
    assert (anchor["seq"], anchor["hash"]) == (records[-1].seq, records[-1].hash)
    assert anchor["trimmed"] == {"event_types": ["llm_call"], "entries": 5}
    assert (await store.events.verify(A, "audit", anchor=anchor)).ok
    # By age too: the chat was appended 40 s ago.
    rule = RetentionRule("events", "*", max_age=45, event_types=("chat",))
    assert (await store.apply_retention([rule], clock.time())).deleted["events"] == 0
    rule = RetentionRule("events", "*", max_age=1, event_types=("chat", "node_started"))
    assert (await store.apply_retention([rule], clock.time() + 100)).deleted["events"] == 2
    assert len(await store.events.anchors(A, "audit")) == 2
    assert (await store.events.verify(A, "audit")).ok
    with pytest.raises(ValueError, match="kind 'events' only"):
        await store.apply_retention([RetentionRule("kv", "*", max_count=1, event_types=("x",))], 0)


def _unsign(anchor: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in anchor.items() if k not in ("signature", "public_key", "key_id")}


async def test_anchors_are_signed_and_checked(store: Store, clock: ManualClock) -> None:
    for i in range(10):
        await store.events.append(A, "audit", {"i": i}, kind="k", subjects=["u"])
    await store.apply_retention([RetentionRule("events", "audit", max_count=6)], clock.time())
    (anchor,) = await store.events.anchors(A, "audit")
    assert (anchor["base_seq"], anchor["seq"], anchor["trimmed"]) == (4, 10, {"through_seq": 4, "entries": 4})
    assert len(base64.b64decode(anchor["public_key"])) == 32 and anchor["signature"]
    exported = json.loads(json.dumps(anchor))
    check = await store.events.verify(A, "audit", anchor=exported)
    assert check.ok and check.anchored and check.checked == 6
    with pytest.raises(ValueError, match="signature"):
        await store.events.verify(A, "audit", anchor=exported | {"hash": "f" * 64})
    with pytest.raises(ValueError, match="another scope"):
        await store.events.verify(B, "audit", anchor=exported)
    with pytest.raises(ValueError, match="object"):
        await store.events.verify(A, "audit", anchor="x")  # type: ignore[arg-type]
    assert (await store.events.verify(A, "audit", anchor=_unsign(exported))).ok  # unsigned: pins only


async def rechain(store: Store, first: int, base: tuple[int, str]) -> None:
    """Rewrite entries ``first``.. as an attacker who recomputes every hash (content changed at ``first``)
    and moves the stream's head (and base) to match: plain ``verify`` finds nothing."""
    rows = await raw(
        store, "SELECT seq, ts, kind, key_id, digest FROM events WHERE seq >= ? ORDER BY seq", (first,)
    )
    (prev,) = await raw(store, "SELECT hash FROM events WHERE seq = ?", (first - 1,)) or [(base[1],)]
    prev_hash = prev[0] if first - 1 > base[0] else base[1]
    for seq, ts, kind, _key_id, _ in rows:
        text = json.dumps({"forged": seq}, separators=(",", ":"))
        digest = content_digest(text.encode())
        digest_ = chain_hash_v2(prev_hash, seq, ts, kind, None, digest)
        await raw(
            store,
            "UPDATE events SET data = ?, body = NULL, key_id = NULL, digest = ?, prev_hash = ?, hash = ?"
            " WHERE seq = ?",
            (text, digest, prev_hash, digest_, seq),
        )
        prev_hash = digest_
    await raw(
        store, "UPDATE event_streams SET last_hash = ?, anchor_seq = ?, anchor_hash = ?", (prev_hash, *base)
    )


async def test_verify_from_an_anchor_finds_a_rewritten_remainder(store: Store, clock: ManualClock) -> None:
    for i in range(10):
        await store.events.append(A, "audit", {"i": i}, kind="k", subjects=["u"])
    await store.apply_retention([RetentionRule("events", "audit", max_count=6)], clock.time())
    (anchor,) = await store.events.anchors(A, "audit")
    for i in range(3):
        await store.events.append(A, "audit", {"i": 10 + i}, kind="k", subjects=["u"])
    # The whole remainder rewritten from a forged base: plain verify is fooled, the anchor is not.
    await rechain(store, 5, (4, "e" * 64))
    assert (await store.events.verify(A, "audit")).ok
    check = await store.events.verify(A, "audit", anchor=anchor)
    assert (check.ok, check.first_bad_seq, check.anchored) == (False, 5, True)


async def test_verify_from_an_anchor_finds_a_rechained_middle(store: Store, clock: ManualClock) -> None:
    for i in range(10):
        await store.events.append(A, "audit", {"i": i}, kind="k", subjects=["u"])
    await store.apply_retention([RetentionRule("events", "audit", max_count=6)], clock.time())
    (anchor,) = await store.events.anchors(A, "audit")
    base = (await raw(store, "SELECT anchor_seq, anchor_hash FROM event_streams"))[0]
    await rechain(store, 7, (base[0], base[1]))
    assert (await store.events.verify(A, "audit")).ok
    check = await store.events.verify(A, "audit", anchor=anchor)
    # Re-chained consistently from 7: the first position the anchor pins after it (its head) departs.
    assert (check.ok, check.first_bad_seq) == (False, 10)


async def test_verify_from_an_anchor_finds_a_fake_trim_and_accepts_a_real_one(
    store: Store, clock: ManualClock
) -> None:
    for i in range(10):
        await store.events.append(A, "audit", {"i": i}, kind="k", subjects=["u"])
    await store.apply_retention([RetentionRule("events", "audit", max_count=6)], clock.time())
    (first,) = await store.events.anchors(A, "audit")
    await store.apply_retention([RetentionRule("events", "audit", max_count=3)], clock.time())
    assert (await store.events.verify(A, "audit", anchor=first)).ok  # a later signed trim: fine
    for i in range(3):
        await store.events.append(A, "audit", {"i": i}, kind="k", subjects=["u"])
    (hash8,) = await raw(store, "SELECT hash FROM events WHERE seq = 8")
    await raw(store, "DELETE FROM events WHERE seq <= 8")  # hide 8 as a trim would, without its anchor
    await raw(store, "UPDATE event_streams SET anchor_seq = 8, anchor_hash = ?", (hash8[0],))
    assert (await store.events.verify(A, "audit")).ok
    check = await store.events.verify(A, "audit", anchor=first)
    assert (check.ok, check.first_bad_seq) == (False, 8)


async def test_sqlite_bytes_hold_no_token_and_no_deleted_key(tmp_path: Path) -> None:
    store = open_store("sqlite", path=tmp_path / "store.db", clock=ManualClock(1000.0))
    await store.open()
    try:
        for i in range(300):
            who = "alice" if i % 3 == 0 else f"user{i}"
            data = {"who": who, "input": f"passport {TOKEN}" if i == 150 else "x" * 200}
            await store.events.append(A, "audit", data, kind="chat", subjects=[f"user:{who}"])
        (secret,) = await raw(
            store, "SELECT key FROM event_keys WHERE subjects = ?", (json.dumps(["user:alice"]),)
        )
        assert (await store.events.forget(A, "audit", ["user:alice"])).forgotten == 100
        open_files = _files(tmp_path)
        assert not [name for name, data in open_files.items() if bytes(secret[0]) in data]  # zeroed
    finally:
        await store.close()
    for name, content in _files(tmp_path).items():
        assert TOKEN.encode() not in content and TOKEN.lower().encode() not in content.lower(), name
        assert bytes(secret[0]) not in content, name


def _files(folder: Path) -> dict[str, bytes]:
    """The database, -wal and -shm (whichever exist), byte for byte."""
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}
