"""Tenant A can neither read, write, take, ack, lock nor discover tenant B's entries through any host API."""

from __future__ import annotations

from typing import Any

from minihermes.runtime import ActorSpec, GenServer, RequestContext, call

from .conftest import tree

A = RequestContext(tenant="acme", namespace="prod")
B = RequestContext(tenant="globex", namespace="prod")
A_DEV = RequestContext(tenant="acme", namespace="dev")


class Prober(GenServer):
    """A shared (system) actor: every host call acts in the caller's scope."""

    @call
    async def write_all(self) -> dict[str, Any]:
        h = self.host
        await h.kv.put("session:1", {"secret": "a"})
        await h.private_kv.put("cred", "sk-a")
        await h.tuples.write(["memory", "global", "user_name", "Alice"])
        await h.blobs.put("skill_procedure_1", b"steps")
        await h.events.append("audit", {"e": 1})
        msg_id = await h.channels.send("cron:pending", "cron_job", {"job": 1})
        token = await h.locks.try_acquire("cron_leader", 90)
        await h.text.upsert("sessions", "doc1", {"body": "pivot tables in spreadsheets"})
        return {"msg_id": msg_id, "token": token}

    @call
    async def read_all(self, msg_id: str, token: int) -> dict[str, Any]:
        h = self.host
        got = await h.channels.receive("cron:pending")
        return {
            "kv": await h.kv.get("session:1"),
            "kv_list": await h.kv.list(""),
            "cas": await h.kv.cas("session:1", 1, {"secret": "stolen"}),
            "kv_delete": await h.kv.delete("session:1"),
            "private": await h.private_kv.get("cred"),
            "tuples": await h.tuples.read_all([None, None, None, None]),
            "take": await h.tuples.take(["memory", None, None, None]),
            "take_all": await h.tuples.take_all([None, None, None, None]),
            "blob": await h.blobs.get("skill_procedure_1"),
            "blob_list": [b.name for b in await h.blobs.list("")],
            "blob_delete": await h.blobs.delete("skill_procedure_1"),
            "events": [e.data for e in await h.events.read("audit")],
            "received": [m.msg_id for m in got],
            "ack": await h.channels.ack("cron:pending", msg_id),
            "nack": await h.channels.nack("cron:pending", msg_id, requeue=False),
            "depth": (await h.channels.depth("cron:pending")).ready,
            "release": await h.locks.release("cron_leader", token),
            "lock": (await h.locks.get("cron_leader")) is not None,
            "search": [x.doc_id for x in await h.text.search("sessions", "pivot")],
        }


class OtherType(GenServer):
    @call
    async def private(self) -> Any:
        return await self.host.private_kv.get("cred")


async def test_every_primitive_is_tenant_scoped(make_node):
    node = await make_node(tree(ActorSpec("probe", Prober), ActorSpec("other", OtherType)))
    ids = await node.ask("probe", "write_all", ctx=A)
    for ctx in (B, A_DEV):
        got = await node.ask("probe", "read_all", ids, ctx=ctx)
        assert got == {
            "kv": None,
            "kv_list": [],
            "cas": None,
            "kv_delete": False,
            "private": None,
            "tuples": [],
            "take": None,
            "take_all": 0,
            "blob": None,
            "blob_list": [],
            "blob_delete": False,
            "events": [],
            "received": [],
            "ack": False,
            "nack": False,
            "depth": 0,
            "release": False,
            "lock": False,
            "search": [],
        }, ctx
    # and A still has all of it, untouched
    mine = await node.ask("probe", "read_all", ids, ctx=A)
    assert mine["kv"] == {"secret": "a"} and mine["private"] == "sk-a"
    assert mine["tuples"] == [("memory", "global", "user_name", "Alice")]
    assert mine["blob"] == b"steps" and mine["events"] == [{"e": 1}]
    assert mine["received"] == [ids["msg_id"]] and mine["search"] == ["doc1"]
    assert mine["release"] is True


async def test_private_kv_is_reachable_only_by_its_actor_type(make_node):
    node = await make_node(tree(ActorSpec("probe", Prober), ActorSpec("other", OtherType)))
    await node.ask("probe", "write_all", ctx=A)
    assert await node.ask("other", "private", ctx=A) is None


async def test_context_flows_through_actor_hops(make_node):
    class Front(GenServer):
        @call
        async def go(self) -> Any:
            return await self.host.ask("probe", "write_all")

    node = await make_node(tree(ActorSpec("probe", Prober), ActorSpec("front", Front)))
    ids = await node.ask("front", "go", ctx=A)
    got = await node.ask("probe", "read_all", ids, ctx=A)
    assert got["kv"] == {"secret": "a"}
    got_b = await node.ask("probe", "read_all", ids, ctx=B)
    assert got_b["kv"] is None


def test_bad_tenant_names_are_refused():
    import pytest

    from minihermes.runtime import InvalidArgument

    for bad in ("", "a:b", "../x", "x" * 65, "a b"):
        with pytest.raises(InvalidArgument):
            RequestContext(tenant=bad)


def test_tenant_names_with_trailing_newlines_are_refused():
    import pytest

    from minihermes.runtime import InvalidArgument

    with pytest.raises(InvalidArgument):
        RequestContext(tenant="acme\n")
