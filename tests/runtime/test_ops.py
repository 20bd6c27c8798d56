"""``Actor.ops()``, the public record of a class's ops (what the HTTP catalog, the CLI and the permission model
read), and handlers that take one pydantic model: the payload is validated as the model before the handler
runs, and a bad one is an ``InvalidArgument`` naming the field, as for plain keyword parameters."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict, Field

from minihermes.runtime import (
    ActorSpec,
    GenEvent,
    GenServer,
    InvalidArgument,
    Op,
    Workflow,
    call,
    cast,
    state,
)

from .conftest import tree


class StoreArgs(BaseModel):
    key: str = Field(min_length=1, max_length=20)
    value: int = 0
    tags: list[str] = Field(default_factory=list)


class LooseArgs(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str


class Shelf(GenServer):
    """Keeps numbers by key."""

    items: dict[str, int] = state(default_factory=dict)

    @call(access="write")
    async def store(self, args: StoreArgs) -> dict[str, Any]:
        """Store a number under a key.

        Replaces what the key held."""
        self.items[args.key] = args.value
        return {"type": type(args).__name__, "key": args.key, "value": args.value, "tags": args.tags}

    @call(access="read")
    def get(self, key: str, default: int | None = None) -> int | None:
        return self.items.get(key, default)

    @call
    def loose(self, args: LooseArgs) -> dict[str, Any]:
        return args.model_dump()

    @call(concurrent=True)
    async def poke(self) -> None: ...

    @cast(access="admin")
    def clear(self, **_rest: Any) -> None:
        self.items = {}

    @call
    def __private_op__(self) -> None: ...


class Seen(BaseModel):
    what: str
    times: int = 1


class Events(GenEvent):
    @cast
    def seen(self, event: Seen) -> None: ...


class Sink(GenServer):
    got: list[Any] = state(default_factory=list)

    @cast
    def seen(self, event: Seen) -> None:
        self.got.append([type(event).__name__, event.what, event.times])

    @call
    def read(self) -> list[Any]:
        return self.got


def test_ops_lists_each_public_op_with_its_facts() -> None:
    ops = Shelf.ops()
    assert list(ops) == ["clear", "get", "loose", "poke", "store"]  # sorted; runtime ops left out
    store = ops["store"]
    assert isinstance(store, Op)
    assert (store.name, store.kind, store.access, store.concurrent) == ("store", "call", "write", False)
    assert store.model is StoreArgs and not store.accepts_extra
    assert store.summary == "Store a number under a key."
    assert store.doc.endswith("Replaces what the key held.")
    assert [(p.name, p.required, p.default, p.annotation) for p in store.params.values()] == [
        ("key", True, None, str),
        ("value", False, 0, int),
        ("tags", False, [], list[str]),
    ]
    get = ops["get"]
    assert get.model is None and get.access == "read" and get.summary == ""
    assert [(p.name, p.required, p.default) for p in get.params.values()] == [
        ("key", True, None),
        ("default", False, None),
    ]
    assert get.params["default"].annotation == int | None
    assert ops["poke"].concurrent and ops["poke"].access is None
    assert ops["clear"].kind == "cast" and ops["clear"].accepts_extra and ops["clear"].access == "admin"
    assert ops["loose"].accepts_extra  # the model allows extra keys
    assert Shelf.ops() is ops  # built once per class
    with pytest.raises(TypeError):
        ops["store"] = store  # type: ignore[index]


def test_subclasses_have_their_own_ops() -> None:
    class Bigger(Shelf):
        @call(access="admin")
        def count(self) -> int:
            return len(self.items)

    assert "count" in Bigger.ops() and "count" not in Shelf.ops()
    assert Bigger.ops()["store"].model is StoreArgs


async def test_a_model_handler_gets_the_validated_model(make_node: Any) -> None:
    node = await make_node(tree(ActorSpec("shelf", Shelf)))
    reply = await node.ask("shelf", "store", {"key": "a", "value": 3})
    assert reply == {"type": "StoreArgs", "key": "a", "value": 3, "tags": []}
    assert await node.ask("shelf", "get", {"key": "a"}) == 3
    # ``op`` (scripted clients' payloads carry it) is ignored, as for keyword handlers
    assert (await node.ask("shelf", "store", {"op": "store", "key": "b"}))["value"] == 0
    assert await node.ask("shelf", "loose", {"name": "n", "more": 1}) == {"name": "n", "more": 1}


@pytest.mark.parametrize(
    ("payload", "field", "words"),
    [
        ({"value": 1}, "key", "missing required argument 'key'"),
        ({"key": "a", "colour": "red"}, "colour", "unknown argument 'colour' (expected: key, value, tags)"),
        ({"key": 5}, "key", "argument 'key'"),
        ({"key": ""}, "key", "argument 'key'"),
        ({"key": "a", "tags": ["x", 7]}, "tags.1", "argument 'tags.1'"),
    ],
)
async def test_a_bad_payload_is_refused_naming_the_field(
    make_node: Any, payload: dict[str, Any], field: str, words: str
) -> None:
    node = await make_node(tree(ActorSpec("shelf", Shelf)))
    with pytest.raises(InvalidArgument) as ei:
        await node.ask("shelf", "store", payload)
    assert ei.value.details["field"] == field
    assert words in ei.value.message and ei.value.message.startswith("store: ")
    with pytest.raises(InvalidArgument):
        node.send("shelf", "store", payload)  # a send is refused at once too
    assert await node.ask("shelf", "get", {"key": "a"}) is None  # nothing ran


async def test_a_genevent_forwards_a_model_event_as_it_was_sent(make_node: Any) -> None:
    node = await make_node(tree(ActorSpec("events", Events), ActorSpec("sink", Sink)))
    await node.ask("events", "subscribe", {"target": "sink", "op": ""})
    node.send("events", "seen", {"what": "a bird", "times": 2})
    node.send("events", "seen", {"what": "a cat"})
    got: list[Any] = []
    for _ in range(1000):
        got = await node.ask("sink", "read")
        if len(got) == 2:
            break
    assert got == [["Seen", "a bird", 2], ["Seen", "a cat", 1]]


def test_a_model_beside_other_parameters_is_one_argument() -> None:
    class Two(GenServer):
        @call
        def put(self, args: StoreArgs, note: str = "") -> str:
            return args.key + note

    handler = Two._handlers["put"]
    bound = handler.bind({"args": {"key": "k"}, "note": "!"})
    assert isinstance(bound["args"], StoreArgs) and bound["note"] == "!"
    assert Two.ops()["put"].model is None
    assert list(Two.ops()["put"].params) == ["args", "note"]
    with pytest.raises(InvalidArgument) as ei:
        handler.bind({"key": "k"})
    assert ei.value.details["field"] == "key"  # unknown: the model is one argument here


def test_a_workflow_execute_takes_keyword_arguments() -> None:
    with pytest.raises(TypeError, match="not one model"):

        class Flow(Workflow):
            async def execute(self, args: StoreArgs) -> None:  # type: ignore[override]
                return None
