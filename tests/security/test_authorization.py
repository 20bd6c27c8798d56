"""The authorization suite, generated from the live catalog: every ``(actor, op)`` the HTTP API serves and
every tool the agent can call, tried by every role of two tenants against one user's (alice's) resources.

For each op and role the outcome must be what the permission model says: refused by role exactly where the
op's access class leaves the role out (403 ``permission_denied`` with the access class named), and, where the
role may call it, never a 5xx, never a reply carrying alice's private data (canaries), and nothing of hers
changed by anybody but an admin of her tenant. Tools are run as the agent runs them in a turn (the turn's
caller's context), and must be refused exactly where the same caller would be refused over HTTP.

A new op or tool is covered the day it is added: nothing here lists them. The result table is printed into
docs/security.md between the ``authz-table`` markers; ``MINIHERMES_WRITE_DOCS=1`` rewrites it there.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest

from minihermes import permissions
from minihermes.permissions import DEFAULT_PERMISSIONS, PermissionTable

from .world import CANARIES, PRINCIPALS, World, context, world

DOC = Path(__file__).resolve().parents[2] / "docs" / "security.md"
BEGIN, END = "<!-- authz-table:begin -->", "<!-- authz-table:end -->"

ATTACKERS = ("bob", "vic", "carol")
"""Who aims real calls at alice's resources: another user of her tenant, its viewer, a user of another tenant."""
ADMINS = ("ada", "gus")
"""Admins are only probed (an argument no op takes), so that nothing runs: what they may call is the table."""
COLUMNS = ("ada", "bob", "vic", "carol")
ROLE_OF = {"ada": "admin", "bob": "user", "vic": "viewer", "carol": "user (other tenant)"}

_VALUE_BY_TYPE: dict[str, Any] = {
    "str": "x",
    "int": 1,
    "float": 1.0,
    "bool": False,
    "dict": {},
    "list": [],
}
_VALUE_BY_NAME: dict[str, Any] = {
    "message": "show me everything alice said",
    "query": "alice QZXJ1 QZXJ3 codeword private",
    "text": "bob was here",
    "title": "bob's title",
    "body": "bob's body",
    "reason": "bob",
    "summary": "bob",
    "author": "alice",
    "assignee": "bob",
    "worker": "bob",
    "status": "done",
    "scope": "global",
    "value": "overwritten by bob",
    "prompt": "say hello",
    "schedule": "0 9 * * 1",
    "consumer_id": "attacker",
    "cursor": 0,
    "decision": "approve",
    "to": "idle",
    "mode": "autonomous",
    "tier": "core",
    "name": "calculator",
    "tool_name": "calculator",
    "path": "notes",
}


def payload_for(params: list[dict[str, Any]], targets: dict[str, Any], *, all_params: bool) -> dict[str, Any]:
    """Every required argument (and, with ``all_params``, every known optional one) filled in: alice's
    resources where the argument names one, a plausible value otherwise."""
    out: dict[str, Any] = {}
    for p in params:
        name = p["name"]
        if name in targets:
            out[name] = targets[name]
        elif p.get("enum") and (p["required"] or all_params):
            out[name] = p["enum"][0]
        elif name in _VALUE_BY_NAME and (p["required"] or all_params):
            out[name] = _VALUE_BY_NAME[name]
        elif p["required"]:
            base = re.split(r"[\[ |]", str(p.get("type", "str")))[0]
            out[name] = _VALUE_BY_TYPE.get(base, "x")
    return out


def _leaks(text: str) -> list[str]:
    return [c for c in CANARIES if c in text]


def _role_refusal(status: int, body: dict[str, Any]) -> bool:
    error = body.get("error", {}) if isinstance(body, dict) else {}
    return status == 403 and "access" in error


def _outcome(status: int, body: Any) -> str:
    if _role_refusal(status, body):
        return "refused"
    if status in (403, 404):
        return "own only"
    if status < 300:
        return "allowed"
    return f"allowed ({status})"


async def _attack(w: World, catalog: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, str]]:
    results: dict[tuple[str, str], dict[str, str]] = {}
    problems: list[str] = []
    table = DEFAULT_PERMISSIONS.for_node(w.node)  # declared access classes under the table's overrides
    for who in (*ADMINS, *ATTACKERS):
        roles = PRINCIPALS[who][2]
        for actor in catalog:
            for op in actor["ops"]:
                name, opname = actor["name"], op["op"]
                if who in ADMINS:
                    payload: dict[str, Any] = {"__authz_probe": True}
                else:
                    payload = payload_for(op["params"], w.targets, all_params=True)
                r = await w.op(who, name, opname, payload)
                body = r.json() if r.headers.get("content-type", "").startswith("application/json") else {}
                allowed = table.allows(roles, name, opname)
                where = f"{who} {name}.{opname} -> {r.status_code} {r.text[:300]}"
                if r.status_code >= 500:
                    problems.append(f"server error: {where}")
                if allowed == _role_refusal(r.status_code, body):
                    problems.append(f"permission model says {'allowed' if allowed else 'refused'}: {where}")
                if who not in ADMINS and _leaks(r.text):  # the audit trail included (issue 23)
                    problems.append(f"leak of {_leaks(r.text)}: {where}")
                if who in COLUMNS:
                    results.setdefault((name, opname), {})[who] = _outcome(r.status_code, body)
    assert not problems, "\n".join(problems)
    return results


async def _tool_attack(w: World) -> dict[str, dict[str, str]]:
    """Every tool, run as the agent runs it in a turn of each attacker (in the attacker's own session). What
    the call needs is the tool's own declaration (``describe_tool``: the actor op it performs, or an access
    class), judged by the same permission model as the HTTP edge; a viewer never runs a mutating call."""
    listing = await w.node.ask("tool_executor", "list_tools", {}, 10, ctx=context("ada"))
    table = DEFAULT_PERMISSIONS.for_node(w.node)
    results: dict[str, dict[str, str]] = {}
    problems: list[str] = []
    for who in ("vic", "bob"):
        ctx = context(who)
        session = await w.node.ask("session_manager", "create_session", {}, 10, ctx=ctx)
        for tool in listing["tools"]:
            params = [
                {
                    "name": n,
                    "required": n in tool["input_schema"].get("required", ()),
                    "type": _json_type(s),
                    "enum": s.get("enum"),
                }
                for n, s in tool["input_schema"].get("properties", {}).items()
            ]
            args = payload_for(params, {**w.targets, "session_id": session["session_id"]}, all_params=False)
            if tool["name"] in ("read_file", "write_file", "list_files"):
                args["path"] = (
                    "../" + w.targets["session_id"] + "/secret.txt" if tool["name"] != "list_files" else ".."
                )
            described = await w.node.ask(
                "tool_executor", "describe_tool", {"name": tool["name"], "input": args}, 10, ctx=ctx
            )
            needs = described["permission"]
            if "actor" in needs:
                access = table.access(needs["actor"], needs["op"])
                label = f"`{needs['actor']}.{needs['op']}` ({access})"
                may = permissions.may(ctx, needs["actor"], needs["op"], table)
            else:
                access = needs["access"]
                label = access
                may = permissions.may_access(ctx, access)
            may = may and (described["effects"] != "mutating" or permissions.is_writer(ctx))
            reply = await w.node.ask(
                "tool_executor",
                "execute",
                {"name": tool["name"], "input": args, "session_id": session["session_id"]},
                60,
                ctx=ctx,
            )
            text = repr(reply)
            error = reply.get("error") or {}
            error = error if isinstance(error, dict) else {}
            refused_by_role = error.get("code") == "permission_denied" and "access" in error
            if may == refused_by_role:
                problems.append(f"{who} {tool['name']} needs {label}, may={may}: {text[:300]}")
            if _leaks(text):
                problems.append(f"leak of {_leaks(text)}: {who} {tool['name']}: {text[:300]}")
            outcome = "refused" if refused_by_role else f"ran: {error.get('code')}" if error else "ran"
            results.setdefault(tool["name"], {"access": label})[who] = outcome
    assert not problems, "\n".join(problems)
    return results


def _json_type(schema: dict[str, Any]) -> str:
    t = schema.get("type", "string")
    if isinstance(t, list):
        t = t[0]
    return {"string": "str", "integer": "int", "number": "float", "boolean": "bool", "object": "dict"}.get(
        t, "list" if t == "array" else "str"
    )


def _table(
    ops: dict[tuple[str, str], dict[str, str]], tools: dict[str, dict[str, str]], permissions: PermissionTable
) -> str:
    lines = [
        "| actor.op | access | " + " | ".join(f"{ROLE_OF[c]} (`{c}`)" for c in COLUMNS) + " |",
        "|---|---|" + "---|" * len(COLUMNS),
    ]
    for (actor, op), row in sorted(ops.items()):
        access = permissions.access(actor, op)
        lines.append(f"| `{actor}.{op}` | {access} | " + " | ".join(row.get(c, "") for c in COLUMNS) + " |")
    lines += [
        "",
        "| agent tool (in a turn of) | access | viewer (`vic`) | user (`bob`) |",
        "|---|---|---|---|",
    ]
    for name, row in sorted(tools.items()):
        lines.append(f"| `{name}` | {row['access']} | {row.get('vic', '')} | {row.get('bob', '')} |")
    return "\n".join(lines)


@pytest.mark.slow
async def test_every_op_and_tool_as_every_role(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        before = await w.state_of_alice()
        catalog = await w.catalog()
        assert sum(len(a["ops"]) for a in catalog) > 100  # the live catalog, not a list of ours
        ops = await _attack(w, catalog)
        tools = await _tool_attack(w)
        after = await w.state_of_alice()
        assert after == before, "alice's resources were changed by someone other than an admin"
        permissions = DEFAULT_PERMISSIONS.for_node(w.node)

    table = _table(ops, tools, permissions)
    doc = DOC.read_text()
    head, rest = doc.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    fresh = f"{head}{BEGIN}\n{table}\n{END}{tail}"
    if os.environ.get("MINIHERMES_WRITE_DOCS") == "1":
        DOC.write_text(fresh)
        return
    assert fresh == doc, "docs/security.md's table is out of date: rerun with MINIHERMES_WRITE_DOCS=1"
