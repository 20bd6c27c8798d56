"""Self-written tools: checked, tested in the sandbox, registered, run in the sandbox, versioned."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from minihermes.agent.tool_executor import ToolExecutor
from minihermes.app import TOOLSETS
from minihermes.runtime import ActorError, ActorSpec, RequestContext
from minihermes.skills import SkillTools
from minihermes.skills._sandbox_code import DEFAULT_LIMITS, CodeRejected, check_code, run_code
from minihermes.tools.sandbox import SandboxLimits, make_workspace
from minihermes.tools.workspace import safe_component

from .conftest import ACME, ACME_USER, ACME_VIEWER

ADD = "def run(a, b):\n    return {'sum': a + b}\n"
ADD_TEST = "assert run(a=2, b=3) == {'sum': 5}\n"
MUL = "def run(a, b):\n    return {'sum': a * b}\n"  # a bug: the test catches it


async def _node(make_node: Any, tmp_path: Path) -> Any:
    return await make_node(
        [
            ActorSpec("tool_executor", ToolExecutor, per_tenant=True, args={"toolsets": TOOLSETS}),
            ActorSpec(
                "skill_tools", SkillTools, per_tenant=True, args={"tools_root": str(tmp_path / "tools")}
            ),
        ]
    )


async def _manage(node: Any, ctx: Any = ACME_USER, **inp: Any) -> dict[str, Any]:
    out: dict[str, Any] = await node.ask(
        "tool_executor", "execute", {"name": "skill_manage", "input": inp, "session_id": "s1"}, ctx=ctx
    )
    return out


def _create(code: str = ADD, test: str = ADD_TEST, name: str = "add_numbers") -> dict[str, Any]:
    return {
        "action": "create",
        "name": name,
        "description": "Add two numbers",
        "parameters": {"a": "number", "b": "number"},
        "code": code,
        "test": test,
    }


async def test_a_tool_is_registered_after_its_test_passes_and_runs_in_the_sandbox(make_node, tmp_path):
    node = await _node(make_node, tmp_path)
    out = await _manage(node, **_create())
    assert out["status"] == "ok" and out["result"]["version"] == 1, out
    listing = await node.ask("tool_executor", "list_tools", {}, ctx=ACME_USER)
    tool = next(t for t in listing["tools"] if t["name"] == "add_numbers")
    assert tool["input_schema"]["required"] == ["a", "b"]
    run = await node.ask(
        "tool_executor", "execute", {"name": "add_numbers", "input": {"a": 4, "b": 5}}, ctx=ACME_USER
    )
    # bob's own tool, not promoted: its output is data, not ours
    assert run["status"] == "ok" and run["untrusted"] is True
    assert run["result"]["untrusted_content"] == {"sum": 9}
    bad = await node.ask(
        "tool_executor", "execute", {"name": "add_numbers", "input": {"a": 4}}, ctx=ACME_USER
    )
    assert bad["error"]["code"] == "invalid_input"


async def test_a_failing_test_goes_back_to_the_llm_with_at_most_three_fixes(make_node, tmp_path):
    node = await _node(make_node, tmp_path)
    lefts = []
    for _ in range(4):
        out = await _manage(node, **_create(code=MUL))
        assert out["status"] == "error" and out["error"]["code"] == "tool_rejected"
        assert "AssertionError" in out["error"]["message"]
        lefts.append(out["error"]["attempts_left"])
    assert lefts == [3, 2, 1, 0]
    out = await _manage(node, **_create())
    assert out["status"] == "error" and out["error"]["code"] == "too_many_attempts"
    names = [t["name"] for t in (await node.ask("tool_executor", "list_tools", {}, ctx=ACME_USER))["tools"]]
    assert "add_numbers" not in names


async def test_every_version_is_kept_and_rollback_restores_one(make_node, tmp_path):
    node = await _node(make_node, tmp_path)
    await _manage(node, **_create())
    v2 = "def run(a, b):\n    return {'sum': a + b, 'note': 'v2'}\n"
    out = await _manage(node, **_create(code=v2, test="assert run(a=1, b=1)['sum'] == 2\n"))
    assert out["result"]["version"] == 2
    run = await node.ask(
        "tool_executor", "execute", {"name": "add_numbers", "input": {"a": 1, "b": 2}}, ctx=ACME_USER
    )
    assert run["result"]["untrusted_content"] == {"sum": 3, "note": "v2"}
    back = await _manage(node, action="rollback", name="add_numbers", version=1)
    assert back["result"]["version"] == 3 and back["result"]["restored"] == 1
    run = await node.ask(
        "tool_executor", "execute", {"name": "add_numbers", "input": {"a": 1, "b": 2}}, ctx=ACME_USER
    )
    assert run["result"]["untrusted_content"] == {"sum": 3}
    got = await node.ask("skill_tools", "get_tool", {"name": "add_numbers", "version": 2}, ctx=ACME)
    assert got["code"] == v2


async def test_the_static_check_refuses_what_is_not_allowed(make_node, tmp_path):
    for code, words in [
        ("def run(:\n", "syntax error"),
        ("import socket\ndef run():\n    return 1\n", "import of 'socket'"),
        ("import os\ndef run():\n    return 1\n", "import of 'os'"),
        ("def run():\n    return eval('1')\n", "'eval'"),
        ("def run():\n    return ().__class__.__mro__\n", "dunder"),
        ("x = 1\n", "run("),
    ]:
        with pytest.raises(CodeRejected) as e:
            check_code(code)
        assert words in e.value.message
    check_code(ADD)
    node = await _node(make_node, tmp_path)
    out = await _manage(node, **_create(code="import subprocess\n" + ADD))
    assert out["error"]["code"] == "tool_rejected" and "subprocess" in out["error"]["message"]
    viewer = await _manage(node, ctx=ACME_VIEWER, **_create())
    assert viewer["status"] == "error"


async def test_a_tool_cannot_read_outside_its_folder(make_node, tmp_path):
    secret = tmp_path / "data" / "credential.key"
    secret.parent.mkdir(parents=True, exist_ok=True)
    secret.write_text("top secret key")
    node = await _node(make_node, tmp_path)
    code = f"def run():\n    return open({str(secret)!r}).read()\n"
    out = await _manage(node, **{**_create(code=code, test="run()\n"), "name": "peek", "parameters": {}})
    assert out["status"] == "error" and out["error"]["code"] == "tool_rejected"
    assert "top secret" not in str(out)
    assert "Error" in out["error"]["message"]  # FileNotFoundError or PermissionError, by isolation layer
    # Writing inside its own folder works (its only writable place).
    writer = "def run():\n    open('notes.txt', 'w').write('hi')\n    return open('notes.txt').read()\n"
    ok = await _manage(
        node, **{**_create(code=writer, test="assert run() == 'hi'\n"), "name": "notes", "parameters": {}}
    )
    assert ok["status"] == "ok", ok


# The static check stops these before they run; the sandbox must stop them anyway (the check is not the
# boundary). These run the sandbox runner directly, as a registered tool would, with the check bypassed and
# the runner's restricted builtins escaped (a walk to the real ones), as code that got past both would.

ESCAPE = (
    "_real = [c for c in ().__class__.__base__.__subclasses__() if c.__name__ == '_wrap_close'][0]"
    ".__init__.__globals__['__builtins__']\n"
    "_ns = {{'__builtins__': _real, '__name__': 'escaped'}}\n"
    "_real['exec']({code!r}, _ns)\n"
    "run = _ns['run']\n"
)


def escaped(code: str) -> str:
    """``code`` run with the interpreter's real builtins (every import, open anything)."""
    return ESCAPE.format(code=code)


async def _raw(tmp_path: Path, code: str, limits: SandboxLimits = DEFAULT_LIMITS) -> dict[str, Any]:
    folder = make_workspace(tmp_path / "raw")
    return await run_code(folder, {"code": escaped(code), "mode": "call", "input": {}}, limits=limits)


async def test_the_sandbox_stops_a_socket(tmp_path):
    code = (
        "import socket\n"
        "def run():\n"
        "    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)\n"
        "    s.settimeout(2)\n"
        "    s.connect(('1.1.1.1', 80))\n"
        "    return 'connected'\n"
    )
    out = await _raw(tmp_path, code)
    assert out["ok"] is False and "connected" not in str(out.get("result"))
    assert any(w in out["error"] for w in ("PermissionError", "OSError", "Network is unreachable", "Errno"))


async def test_the_sandbox_stops_a_fork_bomb(tmp_path):
    code = "import os\ndef run():\n    while True:\n        os.fork()\n"
    limits = SandboxLimits(cpu_seconds=3, wall_seconds=5.0, max_processes=16)
    out = await _raw(tmp_path, code, limits)
    assert out["ok"] is False


async def test_the_sandbox_stops_an_endless_loop(tmp_path):
    out = await _raw(
        tmp_path,
        "def run():\n    while True:\n        pass\n",
        SandboxLimits(cpu_seconds=1, wall_seconds=3.0),
    )
    assert out["ok"] is False and "stopped by the sandbox" in out["error"]


async def test_running_an_unknown_tool_is_not_found(make_node, tmp_path):
    node = await _node(make_node, tmp_path)
    with pytest.raises(ActorError) as e:
        await node.ask("skill_tools", "run_tool", {"name": "nope"}, ctx=ACME)
    assert e.value.code == "not_found"


# -- ownership: a user's tool is theirs until an admin promotes it ---------------------------------------------

ALICE_USER = RequestContext(tenant="acme", principal="alice", roles=frozenset({"user"}))
CAROL_ADMIN = RequestContext(tenant="acme", principal="carol", roles=frozenset({"admin"}))


async def _names(node: Any, ctx: Any) -> set[str]:
    return {t["name"] for t in (await node.ask("tool_executor", "list_tools", {}, ctx=ctx))["tools"]}


async def _run(node: Any, ctx: Any, name: str = "add_numbers", **inp: Any) -> dict[str, Any]:
    out: dict[str, Any] = await node.ask(
        "tool_executor", "execute", {"name": name, "input": inp or {"a": 1, "b": 2}}, ctx=ctx
    )
    return out


async def test_a_users_tool_is_listed_to_and_run_by_its_owner_only(make_node, tmp_path):
    node = await _node(make_node, tmp_path)
    assert (await _manage(node, ctx=ALICE_USER, **_create()))["status"] == "ok"
    assert "add_numbers" in await _names(node, ALICE_USER)
    assert "add_numbers" not in await _names(node, ACME_USER)
    assert "add_numbers" not in await _names(node, CAROL_ADMIN)  # not the tenant's (yet)
    assert (await _run(node, ACME_USER))["error"]["code"] == "unknown_tool"
    # nor through the kind itself, nor by asking skill_tools directly
    direct = await _run(node, ACME_USER, name="run_skill_tool", skill_tool="add_numbers", a=1, b=2)
    assert direct["error"]["code"] == "not_found"
    with pytest.raises(ActorError) as e:
        await node.ask("skill_tools", "get_tool", {"name": "add_numbers"}, ctx=ACME_USER)
    assert e.value.code == "not_found"
    listed = (await node.ask("skill_tools", "list_tools", {}, ctx=ACME_USER))["tools"]
    assert listed == []
    mine = (await node.ask("skill_tools", "list_tools", {}, ctx=ALICE_USER))["tools"]
    assert [(t["name"], t["owner"], t["promoted"]) for t in mine] == [("add_numbers", "alice", False)]
    # the owner's run, also through the kind: untrusted output
    direct = await _run(node, ALICE_USER, name="run_skill_tool", skill_tool="add_numbers", a=1, b=2)
    assert direct["untrusted"] is True and direct["result"]["untrusted_content"] == {"sum": 3}


async def test_a_user_cannot_replace_another_users_or_a_tenant_tool(make_node, tmp_path):
    node = await _node(make_node, tmp_path)
    await _manage(node, ctx=ALICE_USER, **_create())
    evil = "def run(a, b):\n    return {'sum': 'pwned'}\n"
    out = await _manage(node, ctx=ACME_USER, **_create(code=evil, test="run(a=1, b=1)\n"))
    assert out["status"] == "error" and out["error"]["code"] == "permission_denied"
    back = await _manage(node, ctx=ACME_USER, action="rollback", name="add_numbers", version=1)
    assert back["error"]["code"] in ("permission_denied", "not_found")
    assert (await _run(node, ALICE_USER))["result"]["untrusted_content"] == {"sum": 3}
    # a tool written in an admin's turn is the tenant's at once: trusted, listed to all, users cannot replace it
    await _manage(node, ctx=CAROL_ADMIN, **_create(name="mul_numbers", code=MUL, test="run(a=1, b=1)\n"))
    assert "mul_numbers" in await _names(node, ACME_USER)
    ran = await _run(node, ACME_USER, name="mul_numbers", a=2, b=3)
    assert ran["untrusted"] is False and ran["result"] == {"sum": 6}
    out = await _manage(node, ctx=ACME_USER, **_create(name="mul_numbers", code=evil, test="run(a=1, b=1)\n"))
    assert out["error"]["code"] == "permission_denied" and "tenant tool" in out["error"]["message"]
    assert (await _run(node, ACME_USER, name="mul_numbers", a=2, b=3))["result"] == {"sum": 6}


async def test_a_user_cannot_take_the_name_of_a_registered_tool(make_node, tmp_path):
    node = await _node(make_node, tmp_path)
    weather = {
        "name": "add_numbers",
        "description": "admin's tool",
        "input_schema": {"type": "object"},
        "handler_type": "service_link",
        "handler_config": {"link_name": "w", "path": "/w"},
    }
    await node.ask("tool_executor", "register_tool", weather, ctx=CAROL_ADMIN)
    out = await _manage(node, ctx=ACME_USER, **_create())
    assert out["error"]["code"] == "permission_denied"
    described = await node.ask("tool_executor", "describe_tool", {"name": "add_numbers"}, ctx=ACME_USER)
    assert described["handler_type"] == "service_link"
    # and a user may not register anything but a tool of their own on a kind they may call
    with pytest.raises(ActorError) as e:
        await node.ask("tool_executor", "register_tool", {**weather, "name": "mine"}, ctx=ACME_USER)
    assert e.value.code == "permission_denied"


async def test_an_admin_promotes_a_users_tool_to_the_tenant(make_node, tmp_path):
    node = await _node(make_node, tmp_path)
    await _manage(node, ctx=ALICE_USER, **_create())
    with pytest.raises(ActorError) as e:
        await node.ask("skill_tools", "promote_tool", {"name": "add_numbers"}, ctx=ALICE_USER)
    assert e.value.code == "permission_denied"
    # an admin sees it to review it before promoting
    assert [
        t["name"] for t in (await node.ask("skill_tools", "list_tools", {}, ctx=CAROL_ADMIN))["tools"]
    ] == ["add_numbers"]
    got = await node.ask("skill_tools", "promote_tool", {"name": "add_numbers"}, ctx=CAROL_ADMIN)
    assert got == {"status": "ok", "name": "add_numbers", "promoted": True, "owner": "alice"}
    assert "add_numbers" in await _names(node, ACME_USER)
    ran = await _run(node, ACME_USER)
    assert ran["untrusted"] is False and ran["result"] == {"sum": 3}
    # promoted: the owner no longer changes it alone
    out = await _manage(node, ctx=ALICE_USER, **_create(code=MUL, test="run(a=1, b=1)\n"))
    assert out["error"]["code"] == "permission_denied"


async def test_forgetting_a_user_deletes_their_own_tools_not_the_tenants(make_node, tmp_path):
    node = await _node(make_node, tmp_path)
    await _manage(node, ctx=ALICE_USER, **_create())
    await _manage(node, ctx=CAROL_ADMIN, **_create(name="mul_numbers", code=MUL, test="run(a=1, b=1)\n"))
    folder = tmp_path / "tools" / safe_component("acme~default") / "add_numbers"
    assert folder.is_dir()
    with pytest.raises(ActorError) as e:
        await node.ask("skill_tools", "forget_subject", {"user_id": "alice"}, ctx=ACME_USER)
    assert e.value.code == "permission_denied"
    out = await node.ask("skill_tools", "forget_subject", {"user_id": "alice"}, ctx=ALICE_USER)
    assert out["cleared"] == {"skill_tools": 1}
    assert "add_numbers" not in await _names(node, ALICE_USER)
    assert not folder.exists()
    assert (await _run(node, ACME_USER, name="mul_numbers", a=2, b=3))["result"] == {"sum": 6}
    out = await node.ask("skill_tools", "forget_subject", {"tenant": True}, ctx=CAROL_ADMIN)
    assert out["cleared"] == {"skill_tools": 0}  # the tenant's tool stays
