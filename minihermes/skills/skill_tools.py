"""``skill_tools`` (one per tenant): Python tools the agent writes for itself, tested in the sandbox first.

The LLM calls ``skill_manage`` with ``action: create``, a tool name, a description, its parameters, the code
(defining ``run(**input)``) and a test. The tool is registered only when the code passes the static check
and its test passes in the sandbox; otherwise the error goes back to the LLM, which may fix and retry at
most ``max_fix_attempts`` (3) times per tool. Each registered version's code and test are kept (Blob
``skill_tool/<name>/v<n>``, record in KV ``skill_tool:<name>``); ``rollback`` makes an earlier one current.

A registered tool is listed by the tool executor like any other; calling it goes to the built-in kind
``run_skill_tool``, whose handler asks this actor to run the code in the sandbox. Nothing the LLM wrote
ever runs in the server process. Sandbox folder: ``<tools_root>/<tenant>/<tool>/`` (writable, nothing else).

Ownership: a tool a user's turn writes belongs to that user (``owner``) until an admin promotes it
(``promote_tool``). Until then it is listed to and run by its owner only, its output is untrusted (the agent
wraps it as data, and a mutating call after it goes to review), and nobody else may replace it; a user
never replaces a tenant tool or another user's. A tool written in an admin's turn is the tenant's at once.
Everything here acts with the caller's roles: registering with the tool executor included.

Limits: a call of a self-written tool in a turn goes to review like ``terminal`` (``run_skill_tool`` is
reviewed by default and every registered tool inherits it; see docs/skills.md for exempting one). The
folders of one owner's tools share one quota (``workspace_bytes`` / ``workspace_files``, the node's
workspace quota), so a run may write only what the owner's other tools left; one owner has at most
``max_tools_per_user`` tools; ``delete_tool`` removes a tool, its versions and its folder. Code, test and
description that hold something shaped like a secret are refused (``_code_check.secret_problem``).

Provenance: each record carries ``provenance`` (``agent`` for a tool a turn wrote, ``user`` / ``admin`` for
one made through the op by a person, ``tool:<name>`` when the turn had seen untrusted content) and
``derived_from_untrusted``, stamped from the request (``permissions.provenance``), never from an argument. A
tool written from untrusted content is ``quarantined``: it stays its owner's (never promoted, an admin's
turn included; a tenant tool is not replaced from such a turn) until its owner or an admin confirms it
(``confirm_tool``, audited).

Forgetting a person (``forget_subject``, asked by ``memory.forget``) deletes the tools that are still theirs
(not promoted), as ``delete_tool`` does; forgetting the tenant, every tool not promoted. Tenant tools stay.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any, Literal

from pydantic import InstanceOf

from minihermes import permissions
from minihermes.audit import fire_audit
from minihermes.context.forget import subject
from minihermes.runtime import (
    ActorArgs,
    Conflict,
    GenServer,
    InvalidArgument,
    NotFound,
    call,
    current_context,
)
from minihermes.tools.catalog import Toolset
from minihermes.tools.contract import (
    MUTATING,
    ON_REQUEST,
    TOOL_NAME,
    TRUSTED,
    Tool,
    ToolEnv,
    ToolFailure,
    UntrustedResult,
)
from minihermes.tools.sandbox import SandboxLimits, SandboxPolicy, make_workspace
from minihermes.tools.workspace import Quota, Usage, safe_component

from . import _access as access
from ._code_check import secret_problem
from ._sandbox_code import DEFAULT_LIMITS, CodeRejected, check_code, check_test, run_code
from ._view_tool import SKILL_VIEW

_MANAGE_OPS = {
    "create": "create_tool",
    "rollback": "rollback_tool",
    "list": "list_tools",
    "delete": "delete_tool",
}
MAX_TOOLS_PER_USER = 50

RUN_KIND = "run_skill_tool"
TYPES = {"string": "string", "number": "number", "integer": "integer", "boolean": "boolean"}
ParamType = Literal["string", "number", "integer", "boolean"]


def _schema(parameters: dict[str, str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {k: {"type": TYPES[v]} for k, v in parameters.items()},
        "required": sorted(parameters),
        "additionalProperties": False,
    }


class SkillTools(GenServer):
    """Args: ``tools_root`` (folder for the tools' sandboxes; required to create or run tools),
    ``max_fix_attempts`` (3), ``max_tools_per_user`` (50), ``workspace_bytes`` / ``workspace_files`` (the
    quota all of one owner's tool folders share; default the ``limits``' own, which the agent app sets to
    the tool executor's workspace quota); in-process only: ``limits`` (``SandboxLimits``),
    ``sandbox_policy``.

    Ops: a user's turn writes tools that belong to that user (the actor keeps them to their owner) until
    an admin promotes them to the tenant."""

    class Args(ActorArgs):
        tools_root: str | Path | None = None
        max_fix_attempts: int = 3
        max_tools_per_user: int = MAX_TOOLS_PER_USER
        workspace_bytes: int | None = None
        workspace_files: int | None = None
        limits: InstanceOf[SandboxLimits] | None = None
        sandbox_policy: InstanceOf[SandboxPolicy] | None = None

    state_version = 1

    async def on_init(self, actor_id: str, args: dict[str, Any]) -> None:
        root = args.get("tools_root")
        self.tools_root = Path(root) if root else None
        self.max_fix_attempts = int(args.get("max_fix_attempts", 3))
        self.max_tools_per_user = int(args.get("max_tools_per_user", MAX_TOOLS_PER_USER))
        self.limits: SandboxLimits = args.get("limits") or DEFAULT_LIMITS
        self.quota = Quota(
            int(args.get("workspace_bytes") or self.limits.workspace_bytes),
            int(args.get("workspace_files") or self.limits.workspace_files),
        )
        self.policy: SandboxPolicy | None = args.get("sandbox_policy")
        self._audit_on = self.host.has_actor("audit_event")

    @call(access="write")
    async def create_tool(
        self,
        name: str,
        description: str,
        code: str,
        test: str,
        parameters: dict[str, ParamType] | None = None,
        session_id: str = "",
    ) -> dict[str, Any]:
        """Check, test in the sandbox and register (a new version when the tool exists). A failure is an
        ``{status: "error", error: {code, message, attempts_left}}`` reply for the LLM to fix."""
        op = "create_tool"
        access.require_writer(op)
        if not TOOL_NAME.match(name) or await self._builtin_name(name):
            raise InvalidArgument(f"{op}: '{name}' is not a free tool name", op=op, field="name")
        if not description.strip() or len(description) > 2000:
            raise InvalidArgument(f"{op}: description must be 1..2000 characters", op=op, field="description")
        for field, text, is_code in (
            ("description", description, False),
            ("code", code, True),
            ("test", test, True),
        ):
            problem = secret_problem(text, field, code=is_code)
            if problem is not None:
                self._event("skill_tool_refused", name, f"secret in {field}", session_id)
                raise InvalidArgument(f"{op}: {problem}", op=op, field=field, code="secret_refused")
        params: dict[str, str] = dict(parameters or {})
        principal = current_context().principal
        source, untrusted = permissions.provenance(current_context())
        record = await self.host.kv.get(f"skill_tool:{name}") or {
            "name": name,
            "versions": 0,
            "version": 0,
            "failures": 0,
            "created_by": principal,
            "owner": principal,
            # An admin's tool is the tenant's at once, unless written from untrusted content.
            "promoted": access.is_admin() and not untrusted,
            "provenance": source,
            "derived_from_untrusted": untrusted,
            "quarantined": untrusted,
        }
        assert isinstance(record, dict)
        access.require_tool_owner(op, record)
        if untrusted and access.tool_promoted(record):
            raise Conflict(
                f"{op}: '{name}' is a tenant tool; it is not changed from a turn that read untrusted content "
                "(a web page, a file, a tool result)",
                op=op,
                code="untrusted_source",
            )
        if not record["versions"]:
            await self._check_cap(op, access.tool_owner(record), name)
        if record["failures"] > self.max_fix_attempts:
            raise Conflict(
                f"{op}: '{name}' failed {record['failures']} times; no fix attempts are left",
                op=op,
                code="too_many_attempts",
            )
        error = await self._validate(name, code, test, access.tool_owner(record))
        if error is not None:
            record["failures"] += 1
            await self.host.kv.put(f"skill_tool:{name}", record)
            left = max(0, self.max_fix_attempts - record["failures"] + 1)
            self._event(
                "skill_tool_rejected", name, f"attempt={record['failures']} {error[:200]}", session_id
            )
            return {
                "status": "error",
                "error": {"code": "tool_rejected", "message": error, "attempts_left": left},
            }
        version = record["versions"] + 1
        await self.host.blobs.put(
            f"skill_tool/{name}/v{version}",
            json.dumps(
                {"code": code, "test": test, "description": description, "parameters": params}
            ).encode(),
        )
        # Registered before the record moves on: a name the executor refuses (another principal's tool,
        # a tenant tool) leaves this tool's current version as it was.
        await self._register(record, description, params)
        record.update(
            versions=version, version=version, failures=0, description=description, parameters=params
        )
        if untrusted:  # trust only goes down: held again until confirmed
            record.update(provenance=source, derived_from_untrusted=True, quarantined=True)
            record.pop("confirmed_by", None)
        record["updated_at"] = self.host.now()
        await self.host.kv.put(f"skill_tool:{name}", record)
        self._event("skill_tool_registered", name, f"version={version} provenance={source}", session_id)
        reply: dict[str, Any] = {"status": "ok", "name": name, "version": version}
        if record.get("quarantined"):
            reply["quarantined"] = True
        return reply

    @call(access="write")
    async def confirm_tool(self, name: str) -> dict[str, Any]:
        """Its owner or an admin vouches for a tool written from untrusted content: no longer held (an
        admin may promote it). ``derived_from_untrusted`` stays; ``confirmed_by`` says who. Audited."""
        op = "confirm_tool"
        access.require_writer(op)
        record = await self.host.kv.get(f"skill_tool:{name}") if TOOL_NAME.match(name) else None
        if not isinstance(record, dict) or not access.can_use_tool(record):
            raise NotFound(f"{op}: no self-written tool '{name[:80]}'", op=op, field="name")
        access.require_tool_owner(op, record)
        changed = bool(record.get("quarantined"))
        if changed:
            record = {**record, "quarantined": False, "confirmed_by": current_context().principal}
            await self.host.kv.put(f"skill_tool:{name}", record)
            self._event("skill_tool_confirmed", name, f"by={record['confirmed_by']}", "")
        return {
            "status": "ok",
            "name": name,
            "confirmed": True,
            "changed": changed,
            "provenance": str(record.get("provenance") or "unrecorded"),
            "derived_from_untrusted": bool(record.get("derived_from_untrusted")),
            "quarantined": False,
        }

    @call(access="write")
    async def rollback_tool(self, name: str, version: int) -> dict[str, Any]:
        """Make an earlier version current (as a new version; every version is kept)."""
        op = "rollback_tool"
        access.require_writer(op)
        record = await self._record(op, name)
        access.require_tool_owner(op, record)
        if not 1 <= version <= record["versions"]:
            raise InvalidArgument(f"{op}: version must be 1..{record['versions']}", op=op, field="version")
        old = await self._version(name, version)
        new = record["versions"] + 1
        await self.host.blobs.put(f"skill_tool/{name}/v{new}", json.dumps(old).encode())
        await self._register(record, old["description"], old["parameters"])
        record.update(versions=new, version=new, description=old["description"], parameters=old["parameters"])
        await self.host.kv.put(f"skill_tool:{name}", record)
        self._event("skill_tool_rolled_back", name, f"to=v{version} now=v{new}", "")
        return {"status": "ok", "name": name, "version": new, "restored": version}

    @call(access="admin")
    async def promote_tool(self, name: str) -> dict[str, Any]:
        """Admin: make a user's tool the tenant's (listed to everyone, its output trusted like the other
        self-written tenant tools). Idempotent."""
        op = "promote_tool"
        access.require_admin(op)
        record = await self._record(op, name)
        if access.tool_promoted(record):
            return {"status": "ok", "name": name, "promoted": True, "owner": access.tool_owner(record)}
        if record.get("quarantined"):
            raise Conflict(
                f"{op}: '{name}' was written from untrusted content; confirm it first (confirm_tool)",
                op=op,
                code="quarantined",
            )
        record = {**record, "promoted": True, "promoted_by": current_context().principal}
        await self._register(record, record["description"], record.get("parameters") or {})
        await self.host.kv.put(f"skill_tool:{name}", record)
        self._event("skill_tool_promoted", name, f"owner={access.tool_owner(record)}", "")
        return {"status": "ok", "name": name, "promoted": True, "owner": access.tool_owner(record)}

    @call(access="write")
    async def run_tool(self, name: str, input: dict[str, Any] | None = None) -> dict[str, Any]:
        """Run the current version in the sandbox: ``{status: ok, result, trust}`` or ``{status: error,
        error}``. ``trust`` is ``untrusted`` until the tool is promoted."""
        record = await self._record("run_tool", name)
        code = (await self._version(name, record["version"]))["code"]
        folder = await self._folder(name)
        out = await run_code(
            folder,
            {"code": code, "mode": "call", "input": input or {}},
            limits=await self._limits_for(access.tool_owner(record), name),
            policy=self.policy,
        )
        if not out.get("ok"):
            message = str(out.get("error", ""))
            # EFBIG: a write stopped at the file size limit, which is what the owner's quota had left.
            over = bool(out.get("quota_exceeded")) or "[Errno 27]" in message
            if over:
                message += (
                    f" (the folders of {access.tool_owner(record)}'s self-written tools share a quota of "
                    f"{self.quota.max_bytes} bytes and {self.quota.max_files} entries)"
                )
            error = {
                "code": "quota_exceeded" if over else "tool_failed",
                "message": message,
                "stderr": out.get("stderr", ""),
            }
            return {"status": "error", "error": error}
        trust = "trusted" if access.tool_promoted(record) else "untrusted"
        return {"status": "ok", "result": out.get("result"), "version": record["version"], "trust": trust}

    @call(access="write")
    async def delete_tool(self, name: str, session_id: str = "") -> dict[str, Any]:
        """Delete a tool: its owner (while it is theirs) or an admin. It leaves the tool executor's
        catalogue, and its versions and its folder are removed. Audited (``skill_tool_deleted``)."""
        op = "delete_tool"
        access.require_writer(op)
        record = await self.host.kv.get(f"skill_tool:{name}") if TOOL_NAME.match(name) else None
        if not isinstance(record, dict) or not access.can_use_tool(record):
            raise NotFound(f"{op}: no self-written tool '{name[:80]}'", op=op, field="name")
        access.require_tool_owner(op, record)
        if record.get("versions") and self.host.has_actor("tool_executor"):
            try:  # as the caller: the executor lets the owner or an admin remove it
                await self.host.ask("tool_executor", "unregister_tool", {"name": name})
            except NotFound:
                pass  # never registered there (no executor then), or removed already
        await self.host.kv.delete(f"skill_tool:{name}")
        for blob in await self.host.blobs.list(f"skill_tool/{name}/v"):
            await self.host.blobs.delete(blob.name)
        if self.tools_root is not None:
            await asyncio.to_thread(shutil.rmtree, self._path(name), ignore_errors=True)
        self._event("skill_tool_deleted", name, f"owner={access.tool_owner(record)}", session_id)
        return {"status": "ok", "name": name, "deleted": True, "versions": record.get("versions", 0)}

    @call(access="write")
    async def forget_subject(
        self, user_id: str = "", session_id: str = "", tenant: bool = False
    ) -> dict[str, Any]:
        """Delete a user's own tools (not promoted), or (admin) every such tool of the tenant: ``cleared:
        {skill_tools}``. A tool is a person's, not a session's."""
        who = subject("forget_subject", user_id=user_id, session_id=session_id, tenant=tenant)
        names = [
            key.removeprefix("skill_tool:")
            for key, r in await self.host.kv.list("skill_tool:")
            if isinstance(r, dict)
            and not access.tool_promoted(r)
            and (who.tenant or (who.user_id and access.tool_owner(r) == who.user_id))
        ]
        for name in names:
            await self.delete_tool(name)
        return {"status": "ok", "cleared": {"skill_tools": len(names)}}

    @call(access="read")
    async def get_tool(self, name: str, version: int = 0) -> dict[str, Any]:
        record = await self._record("get_tool", name)
        return {"status": "ok", "tool": record, **(await self._version(name, version or record["version"]))}

    @call(access="read")
    async def list_tools(self) -> dict[str, Any]:
        """The tenant's tools and the caller's own (an admin: every tool), each with ``owner`` and
        ``promoted``."""
        rows = await self.host.kv.list("skill_tool:")
        tools = [
            {
                **r,
                "owner": access.tool_owner(r),
                "promoted": access.tool_promoted(r),
                "provenance": str(r.get("provenance") or "unrecorded"),
                "derived_from_untrusted": bool(r.get("derived_from_untrusted")),
                "quarantined": bool(r.get("quarantined")),
            }
            for _k, r in rows
            if isinstance(r, dict) and r.get("versions") and access.can_use_tool(r)
        ]
        return {"status": "ok", "tools": tools, "count": len(tools)}

    # -- helpers ------------------------------------------------------------------------------------------

    async def _validate(self, name: str, code: str, test: str, owner: str) -> str | None:
        try:
            check_code(code, what="code")
            check_test(test, code)
        except CodeRejected as e:
            return e.message
        folder = await self._folder(name)
        out = await run_code(
            folder,
            {"code": code, "mode": "test", "test": test},
            limits=await self._limits_for(owner, name),
            policy=self.policy,
        )
        if out.get("ok"):
            return None
        detail = out.get("traceback") or out.get("stderr") or ""
        return f"the test failed: {out.get('error')}\n{detail}".strip()[:3000]

    async def _check_cap(self, op: str, owner: str, name: str) -> None:
        """A new tool: its owner may have at most ``max_tools_per_user``."""
        owned = [n for n, r in await self._records() if n != name and access.tool_owner(r) == owner]
        if len(owned) >= self.max_tools_per_user:
            raise Conflict(
                f"{op}: {owner} already has {len(owned)} self-written tools (registered or still failing "
                f"their test), the most one user may have ({self.max_tools_per_user}); delete one "
                "(skill_manage action=delete) first",
                op=op,
                code="quota_exceeded",
            )

    async def _records(self) -> list[tuple[str, dict[str, Any]]]:
        rows = await self.host.kv.list("skill_tool:")
        return [(str(r.get("name", "")), r) for _k, r in rows if isinstance(r, dict)]

    async def _limits_for(self, owner: str, name: str) -> SandboxLimits:
        """The sandbox limits of a run of ``name``: its folder may hold what the owner's quota has left
        after the owner's other tools' folders (the sandbox cuts a run at that)."""
        others = [
            self._path(n) for n, r in await self._records() if n != name and access.tool_owner(r) == owner
        ]
        used = await asyncio.to_thread(self._usage, others)
        room_bytes = self.quota.max_bytes - used.bytes if used.complete else 0
        room_files = self.quota.max_files - used.files if used.complete else 0
        # At least 1: the sandbox takes only positive limits, and a folder over 1 byte is over it.
        return dataclasses.replace(
            self.limits, workspace_bytes=max(1, room_bytes), workspace_files=max(1, room_files)
        )

    def _usage(self, folders: list[Path]) -> Usage:
        size = files = 0
        for folder in folders:
            if not folder.is_dir():
                continue
            usage = self.quota.measure(str(folder))
            if not usage.complete:
                return Usage(size + usage.bytes, files + usage.files, complete=False)
            size += usage.bytes
            files += usage.files
        return Usage(size, files)

    def _path(self, name: str) -> Path:
        if self.tools_root is None:
            raise Conflict("self-written tools need a tools_root folder on this node", code="unavailable")
        ctx = current_context()
        return self.tools_root / safe_component(f"{ctx.tenant}~{ctx.namespace}") / safe_component(name)

    async def _folder(self, name: str) -> Path:
        return await asyncio.to_thread(make_workspace, self._path(name), self.policy)

    async def _record(self, op: str, name: str) -> dict[str, Any]:
        """A tool the caller may see (another user's own tool is not there for them)."""
        if not TOOL_NAME.match(name):  # no tool has such a name (a NUL in one crashed the store's key check)
            raise NotFound(f"{op}: no self-written tool '{name[:80]}'", op=op, field="name")
        record = await self.host.kv.get(f"skill_tool:{name}")
        if not isinstance(record, dict) or not record.get("versions") or not access.can_use_tool(record):
            raise NotFound(f"{op}: no self-written tool '{name}'", op=op, field="name")
        return record

    async def _version(self, name: str, version: int) -> dict[str, Any]:
        data = await self.host.blobs.get(f"skill_tool/{name}/v{version}")
        if data is None:
            raise NotFound(f"tool '{name}' has no version {version}", field="version")
        out: dict[str, Any] = json.loads(data)
        return out

    async def _builtin_name(self, name: str) -> bool:
        """Whether the tenant's tool executor has a built-in tool of that name (its toolsets are its own)."""
        if not self.host.has_actor("tool_executor"):
            return False
        try:
            reply = await self.host.ask("tool_executor", "describe_tool", {"name": name})
        except NotFound:
            return False
        return bool(reply.get("builtin"))

    async def _register(self, record: dict[str, Any], description: str, parameters: dict[str, str]) -> None:
        """Register with the tool executor as the caller (no escalation): a user registers only a tool of
        their own, which the executor lists to them alone; an admin registers the tenant's."""
        if not self.host.has_actor("tool_executor"):
            return
        name = record["name"]
        await self.host.ask(
            "tool_executor",
            "register_tool",
            {
                "name": name,
                "description": f"{description} (self-written; runs in the sandbox)",
                "input_schema": _schema(parameters),
                "handler_type": RUN_KIND,
                "handler_config": {
                    "fixed_input": {"skill_tool": name},
                    "timeout": DEFAULT_LIMITS.wall_seconds + 10,
                },
                "owner": "" if access.tool_promoted(record) else access.tool_owner(record),
            },
        )

    def _event(self, event_type: str, name: str, detail: str, session_id: str) -> None:
        if self._audit_on:
            fire_audit(
                self.host, event_type, f"tool={name} {detail}", session_id=session_id, data={"tool": name}
            )


# ------------------------------------------------------------------------------------------ LLM-facing tools


async def _skill_manage(args: dict[str, Any], env: ToolEnv) -> Any:
    action = args["action"]
    name = args.get("name", "")
    if action == "list":
        return await env.host.ask("skill_tools", "list_tools", {})
    if not name:
        raise ToolFailure("invalid_input", "input.name: required for this action", field="name")
    if action == "delete":
        return await env.host.ask("skill_tools", "delete_tool", {"name": name, "session_id": env.session_id})
    if action == "rollback":
        if "version" not in args:
            raise ToolFailure("invalid_input", "input.version: required for rollback", field="version")
        return await env.host.ask("skill_tools", "rollback_tool", {"name": name, "version": args["version"]})
    missing = [k for k in ("description", "code", "test") if not args.get(k)]
    if missing:
        raise ToolFailure("invalid_input", f"input.{missing[0]}: required to create a tool", field=missing[0])
    payload: dict[str, Any] = {k: args[k] for k in ("name", "description", "code", "test") if k in args}
    payload["parameters"] = args.get("parameters") or {}
    payload["session_id"] = env.session_id
    reply = await env.host.ask("skill_tools", "create_tool", payload, timeout=120)
    if reply.get("status") == "error":
        err = reply["error"]
        raise ToolFailure(err["code"], err["message"], attempts_left=err.get("attempts_left", 0))
    return reply


async def _run_skill_tool(args: dict[str, Any], env: ToolEnv) -> Any:
    rest = dict(args)
    name = rest.pop("skill_tool")
    reply = await env.host.ask("skill_tools", "run_tool", {"name": name, "input": rest}, timeout=120)
    if reply.get("status") == "error":
        err = reply["error"]
        raise ToolFailure(err["code"], err["message"])
    if reply.get("trust") != "trusted":  # a user's own code, not yet promoted: its output is data
        return UntrustedResult(reply["result"])
    return reply["result"]


SKILLS_TOOLSET = Toolset(
    "skills",
    [
        Tool(
            "skill_manage",
            "Create your own Python tool when no tool fits: give a name, a description, parameters (name -> "
            "string|number|integer|boolean), code defining run(**input) that returns JSON data (standard library "
            "only: math, json, re, datetime, statistics, ...), and a test (Python asserts calling run). It is "
            "registered once its test passes in the sandbox; on failure you get the error and may fix it (3 "
            "attempts). action=rollback restores an earlier version; action=list shows your tools; action=delete "
            "removes one. Never put a secret (API key, password, token) in a tool: take it as an input.",
            {
                "type": "object",
                "properties": {
                    "action": {"type": "string", "enum": ["create", "rollback", "list", "delete"]},
                    "name": {"type": "string", "minLength": 1, "maxLength": 64},
                    "description": {"type": "string", "maxLength": 2000},
                    "parameters": {
                        "type": "object",
                        "additionalProperties": {"type": "string", "enum": list(TYPES)},
                    },
                    "code": {"type": "string", "maxLength": 20000},
                    "test": {"type": "string", "maxLength": 20000},
                    "version": {"type": "integer", "minimum": 1},
                },
                "required": ["action"],
                "additionalProperties": False,
            },
            MUTATING,
            TRUSTED,
            handler=_skill_manage,
            requires="skill_tools",
            permission=lambda args: ("skill_tools", _MANAGE_OPS.get(str(args.get("action")), "create_tool")),
        ),
        Tool(
            RUN_KIND,
            "Run one of your self-written tools (made with skill_manage) in the sandbox: skill_tool names it, "
            "the other fields are its input.",
            {
                "type": "object",
                "properties": {"skill_tool": {"type": "string", "minLength": 1, "maxLength": 64}},
                "required": ["skill_tool"],
                # A self-written tool's parameters are scalars (see skill_manage); the tool's own schema,
                # checked first, names them.
                "additionalProperties": {"type": ["string", "number", "integer", "boolean"]},
            },
            MUTATING,
            # It computes (no network, no files but its own folder), so a tenant tool's output is trusted; a
            # user's own, unpromoted tool's is not (the handler marks it per call).
            TRUSTED,
            handler=_run_skill_tool,
            # Code an LLM wrote runs in the sandbox, as a terminal command does: reviewed by default, like
            # ``terminal``. Every self-written tool is registered on this kind and inherits it.
            review=True,
            requires="skill_tools",
            permission=("skill_tools", "run_tool"),
        ),
        SKILL_VIEW,
    ],
    offered=ON_REQUEST,
    intents=[
        r"\b(?:create|make|write|build|add|define)\s+(?:(?:a|an|my|your|the|new|own|python)\s+)*tools?\b",
        r"\bskills?\b|\bskill_manage\b|\bself-written\b",
    ],
    purpose="manage skills and own tools",
)
"""The ``skills`` toolset: ``skill_manage``, ``run_skill_tool`` and ``skill_view`` (given to the executor by
the app)."""
