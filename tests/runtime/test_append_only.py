"""Append-only state fields: saved item by item beside the checkpoint, restored whole."""

from __future__ import annotations

import json
from typing import Any

import pytest

from minihermes.runtime import ActorCrashed, ActorSpec, Conflict, GenServer, _statelog, call, state

from .conftest import tree

SCOPE = ("system", "default")


@pytest.fixture
def rows_always(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every non-empty list in rows (short ones normally stay in the document): the row mechanics at small
    sizes."""
    monkeypatch.setattr(_statelog, "INLINE_MAX", 0)


class Journal(GenServer):
    entries: list[dict[str, Any]] = state(default_factory=list, append_only=True)
    note: str = state(default="")

    @call
    def add(self, n: int, count: int = 1) -> int:
        for i in range(count):
            self.entries.append({"n": n + i})
        return len(self.entries)

    @call
    def keep_last(self, keep: int) -> int:
        self.entries = self.entries[-keep:] if keep else []
        return len(self.entries)

    @call
    def mark_last(self, mark: str) -> None:
        self.entries[-1]["mark"] = mark

    @call
    def set_note(self, note: str) -> None:
        self.note = note

    @call
    def add_then_fail(self, n: int) -> None:
        self.entries.append({"n": n})
        raise Conflict("refused after appending")

    @call
    def replace_then_fail(self) -> None:
        self.entries = [{"n": -1}]
        raise Conflict("refused after replacing")

    @call
    def crash(self) -> None:
        raise RuntimeError("boom")

    @call
    def get(self) -> dict[str, Any]:
        return {"entries": self.entries, "note": self.note}


def spy_saves(node: Any, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The ``items`` of every checkpoint save the node hands to its store."""
    seen: list[Any] = []
    checkpoints = node.store.checkpoints
    for name in ("save_callback", "save_nowait", "save"):
        real = getattr(checkpoints, name)

        def spy(*args: Any, _real: Any = real, **kwargs: Any) -> Any:
            seen.append(kwargs.get("items"))
            return _real(*args, **kwargs)

        monkeypatch.setattr(checkpoints, name, spy)
    return seen


async def stored(node: Any, actor: str = "j") -> tuple[dict[str, Any], dict[str, list[Any]]]:
    cp = await node.store.checkpoints.load(SCOPE, actor)
    assert cp is not None
    return json.loads(cp.data), {k: json.loads(v) for k, v in cp.items.items()}


@pytest.mark.usefixtures("rows_always")
async def test_each_checkpoint_writes_only_what_was_appended(make_node, monkeypatch):
    node = await make_node(tree(ActorSpec("j", Journal)))
    await node.ask("j", "add", {"n": 0, "count": 3})
    saves = spy_saves(node, monkeypatch)
    for n in range(3, 50):
        assert await node.ask("j", "add", {"n": n}) == n + 1
    assert saves == [
        (("entries", n, (json.dumps({"n": n}, separators=(",", ":")).encode(),)),) for n in range(3, 50)
    ]
    await node.ask("j", "set_note", {"note": "hello"})
    assert saves[-1] is None  # nothing appended: the document alone
    data, items = await stored(node)
    assert data == {"note": "hello"}  # the list is not in the document
    assert items == {"entries": [{"n": n} for n in range(50)]}


@pytest.mark.usefixtures("rows_always")
async def test_the_list_comes_back_after_a_restart_and_after_a_crash(make_node):
    node = await make_node(tree(ActorSpec("j", Journal)))
    await node.ask("j", "add", {"n": 0, "count": 20})
    await node.ask("j", "set_note", {"note": "n"})
    with pytest.raises(ActorCrashed):
        await node.ask("j", "crash")  # restarted from what the store holds
    assert await node.ask("j", "get") == {"entries": [{"n": n} for n in range(20)], "note": "n"}
    await node.ask("j", "add", {"n": 20})
    await node.stop()
    node2 = await make_node(tree(ActorSpec("j", Journal)))
    assert (await node2.ask("j", "get"))["entries"] == [{"n": n} for n in range(21)]


@pytest.mark.usefixtures("rows_always")
async def test_a_replaced_list_is_rewritten_and_nothing_of_the_old_one_stays(make_node, monkeypatch):
    node = await make_node(tree(ActorSpec("j", Journal)))
    await node.ask("j", "add", {"n": 0, "count": 10})
    saves = spy_saves(node, monkeypatch)
    assert await node.ask("j", "keep_last", {"keep": 2}) == 2
    assert saves[-1] == (("entries", 0, (b'{"n":8}', b'{"n":9}')),)
    await node.ask("j", "add", {"n": 10})
    assert saves[-1] == (("entries", 2, (b'{"n":10}',)),)
    await node.ask("j", "keep_last", {"keep": 0})
    assert saves[-1] == (("entries", 0, ()),)
    await node.ask("j", "add", {"n": 11})
    assert (await stored(node))[1] == {"entries": [{"n": 11}]}


@pytest.mark.usefixtures("rows_always")
async def test_a_change_to_the_newest_items_after_their_save_is_saved(make_node, monkeypatch):
    node = await make_node(tree(ActorSpec("j", Journal)))
    await node.ask("j", "add", {"n": 0, "count": 5})
    saves = spy_saves(node, monkeypatch)
    await node.ask("j", "mark_last", {"mark": "done"})
    assert saves[-1] == (("entries", 4, (b'{"n":4,"mark":"done"}',)),)
    await node.stop()
    node2 = await make_node(tree(ActorSpec("j", Journal)))
    assert (await node2.ask("j", "get"))["entries"][-1] == {"n": 4, "mark": "done"}


@pytest.mark.usefixtures("rows_always")
async def test_a_failed_message_rolls_the_list_back(make_node):
    node = await make_node(tree(ActorSpec("j", Journal)))
    await node.ask("j", "add", {"n": 0, "count": 3})
    with pytest.raises(Conflict):
        await node.ask("j", "add_then_fail", {"n": 99})
    with pytest.raises(Conflict):
        await node.ask("j", "replace_then_fail")
    expected = [{"n": 0}, {"n": 1}, {"n": 2}]
    assert (await node.ask("j", "get"))["entries"] == expected
    await node.ask("j", "add", {"n": 3})
    assert (await stored(node))[1] == {"entries": [*expected, {"n": 3}]}


@pytest.mark.usefixtures("rows_always")
async def test_with_a_checkpoint_interval_the_appends_between_saves_are_saved_together(make_node):
    node = await make_node(tree(ActorSpec("j", Journal, checkpoint_interval=3)))
    await node.ask("j", "get")
    for n in range(7):
        await node.ask("j", "add", {"n": n})
    # get + 2 adds saved together, then 3 adds; the last 2 are not due yet
    assert (await stored(node))[1] == {"entries": [{"n": n} for n in range(5)]}
    with pytest.raises(ActorCrashed):
        await node.ask("j", "crash")  # what was not saved is lost with the crash, as any state
    assert (await node.ask("j", "get"))["entries"] == [{"n": n} for n in range(5)]


@pytest.mark.usefixtures("rows_always")
async def test_a_list_saved_inside_the_document_before_is_moved_to_items(make_node, tmp_path):
    """State saved when the field was not append-only yet: read from the document, then rewritten."""
    first = await make_node(tree(ActorSpec("other", Journal)))
    old = json.dumps({"entries": [{"n": 1}, {"n": 2}], "note": "old"}).encode()
    await first.store.checkpoints.save(SCOPE, "j", 1, old)
    await first.stop()
    node = await make_node(tree(ActorSpec("j", Journal)))
    assert await node.ask("j", "get") == {"entries": [{"n": 1}, {"n": 2}], "note": "old"}
    await node.ask("j", "add", {"n": 3})
    data, items = await stored(node)
    assert data == {"note": "old"} and items == {"entries": [{"n": 1}, {"n": 2}, {"n": 3}]}


@pytest.mark.usefixtures("rows_always")
async def test_corrupt_items_are_quarantined_with_the_checkpoint(make_node):
    first = await make_node(tree(ActorSpec("other", Journal)))
    await first.store.checkpoints.save(SCOPE, "j", 1, b'{"note":"x"}', items=(("entries", 0, (b"{bad",)),))
    await first.stop()
    node = await make_node(tree(ActorSpec("j", Journal)))
    assert await node.ask("j", "get") == {"entries": [], "note": ""}
    (record,) = [r for r in await node.store.quarantine.list() if r.key == "j"]
    assert json.loads(record.data) == {"document": '{"note":"x"}', "items": {"entries": "[{bad]"}}
    await node.ask("j", "add", {"n": 1})
    assert (await stored(node))[1] == {"entries": [{"n": 1}]}


def test_an_append_only_field_is_declared_as_a_list():
    with pytest.raises(TypeError, match="default_factory=list"):
        state(default=None, append_only=True)
    with pytest.raises(TypeError, match="default_factory=list"):
        state(default_factory=dict, append_only=True)


async def test_a_value_that_is_not_a_list_crashes_the_message_not_the_node(make_node):
    class Broken(GenServer):
        entries: list[Any] = state(default_factory=list, append_only=True)

        @call
        def spoil(self) -> None:
            self.entries = "text"  # type: ignore[assignment]

        @call
        def get(self) -> list[Any]:
            return self.entries

    node = await make_node(tree(ActorSpec("b", Broken)))
    with pytest.raises(ActorCrashed):
        await node.ask("b", "spoil")
    assert await node.ask("b", "get") == []


@pytest.mark.usefixtures("rows_always")
async def test_a_list_cleared_and_refilled_in_place_is_rewritten(make_node, monkeypatch):
    class Refill(GenServer):
        entries: list[int] = state(default_factory=list, append_only=True)

        @call
        def fill(self, values: list[int]) -> None:
            self.entries.clear()
            self.entries.extend(values)

    node = await make_node(tree(ActorSpec("r", Refill)))
    await node.ask("r", "fill", {"values": [1, 2, 3]})
    saves = spy_saves(node, monkeypatch)
    await node.ask("r", "fill", {"values": [7, 8, 9, 10]})
    assert saves[-1] == (("entries", 0, (b"7", b"8", b"9", b"10")),)
    assert (await stored(node, "r"))[1] == {"entries": [7, 8, 9, 10]}


async def test_a_short_list_stays_in_the_document_and_moves_to_rows_as_it_grows(make_node, monkeypatch):
    limit = _statelog.INLINE_MAX
    node = await make_node(tree(ActorSpec("j", Journal)))
    saves = spy_saves(node, monkeypatch)
    await node.ask("j", "add", {"n": 0, "count": limit})
    assert saves == [None]  # one document write, no rows
    data, items = await stored(node)
    assert data["entries"] == [{"n": n} for n in range(limit)] and items == {}
    await node.ask("j", "add", {"n": limit})  # past the limit: all of it to rows, out of the document
    assert saves[-1] is not None and saves[-1][0][:2] == ("entries", 0) and len(saves[-1][0][2]) == limit + 1
    await node.ask("j", "add", {"n": limit + 1})
    assert saves[-1] == (("entries", limit + 1, (json.dumps({"n": limit + 1}).replace(" ", "").encode(),)),)
    data, items = await stored(node)
    assert "entries" not in data and items == {"entries": [{"n": n} for n in range(limit + 2)]}
    await node.stop()
    node = await make_node(tree(ActorSpec("j", Journal)))
    assert (await node.ask("j", "get"))["entries"] == [{"n": n} for n in range(limit + 2)]
    saves = spy_saves(node, monkeypatch)
    await node.ask("j", "add", {"n": limit + 2})  # restored from rows, appended to them
    assert saves[-1] is not None and saves[-1][0][1] == limit + 2
    await node.ask("j", "keep_last", {"keep": 3})  # replaced by a short list: back in the document
    assert saves[-1] == (("entries", 0, ()),)
    data, items = await stored(node)
    assert data["entries"] == [{"n": n} for n in range(limit, limit + 3)] and items == {}
    await node.stop()
    node = await make_node(tree(ActorSpec("j", Journal)))
    assert (await node.ask("j", "get"))["entries"] == [{"n": n} for n in range(limit, limit + 3)]


class JournalPlain(GenServer):
    """Journal's state after its list stopped being append-only."""

    entries: list[dict[str, Any]] = state(default_factory=list)
    note: str = state(default="")

    @call
    def get(self) -> dict[str, Any]:
        return {"entries": self.entries, "note": self.note}


class JournalGone(GenServer):
    """Journal's state after its list was removed."""

    note: str = state(default="")

    @call
    def get(self) -> str:
        return self.note


@pytest.mark.usefixtures("rows_always")
@pytest.mark.parametrize("later", [JournalPlain, JournalGone])
async def test_rows_of_a_field_no_longer_append_only_are_read_then_dropped(make_node, later):
    node = await make_node(tree(ActorSpec("j", Journal)))
    await node.ask("j", "add", {"n": 0, "count": 3})
    await node.ask("j", "set_note", {"note": "kept"})
    await node.stop()
    node = await make_node(tree(ActorSpec("j", later)))
    got = await node.ask("j", "get")
    data, items = await stored(node)
    assert items == {}  # dropped with the activation's checkpoint
    if later is JournalPlain:  # its value came from the rows, and now lives in the document
        assert got == {"entries": [{"n": 0}, {"n": 1}, {"n": 2}], "note": "kept"}
        assert data == got
    else:
        assert got == "kept" and data == {"note": "kept"}


class JournalV2(GenServer):
    """Journal after a state migration that reshapes the list."""

    state_version = 2
    entries: list[dict[str, Any]] = state(default_factory=list, append_only=True)
    note: str = state(default="")

    @classmethod
    def migrate_state(cls, from_version: int, data: dict[str, Any]) -> dict[str, Any]:
        keep = int(data.get("note") or 0)
        return {**data, "entries": [{**e, "v": 2} for e in data.get("entries", [])][-keep:]}

    @call
    def get(self) -> dict[str, Any]:
        return {"entries": self.entries, "note": self.note}


@pytest.mark.parametrize("keep", [2, 40])
async def test_a_migrated_list_replaces_its_rows(make_node, keep):
    """Rows saved by the old version are rewritten (a long list) or deleted (a short one, now in the
    document): either way nothing of the old shape can come back on the next load."""
    node = await make_node(tree(ActorSpec("j", Journal)))
    await node.ask("j", "add", {"n": 0, "count": 50})
    await node.ask("j", "set_note", {"note": str(keep)})
    assert (await stored(node))[1]["entries"][-1] == {"n": 49}
    await node.stop()
    node = await make_node(tree(ActorSpec("j", JournalV2)))
    expected = [{"n": n, "v": 2} for n in range(50 - keep, 50)]
    assert (await node.ask("j", "get"))["entries"] == expected
    data, items = await stored(node)
    assert (data.get("entries"), items.get("entries")) == (
        (expected, None) if keep <= 32 else (None, expected)
    )
    await node.stop()
    node = await make_node(tree(ActorSpec("j", JournalV2)))
    assert (await node.ask("j", "get"))["entries"] == expected


async def test_the_contract_check_crashes_an_actor_that_changes_an_older_item(make_node):
    """The suite runs with MINIHERMES_CHECK_APPEND_ONLY=1 (tests/conftest.py)."""
    assert _statelog.CHECK

    class Sneaky(GenServer):
        entries: list[dict[str, Any]] = state(default_factory=list, append_only=True)

        @call
        def add(self, count: int) -> None:
            self.entries.extend({"n": i} for i in range(count))

        @call
        def rewrite_first_and_add(self) -> None:
            self.entries[0]["n"] = -1  # against the contract: saved, and items were saved after it
            self.entries.append({"n": 99})

    node = await make_node(tree(ActorSpec("s", Sneaky)))
    await node.ask("s", "add", {"count": _statelog.INLINE_MAX + 5})
    with pytest.raises(ActorCrashed):
        await node.ask("s", "rewrite_first_and_add")
