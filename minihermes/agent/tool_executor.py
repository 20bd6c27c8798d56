"""The tool executor (one per tenant): the tool catalogue and the only place tools run.

- ``list_tools`` is sorted and byte-stable (the LLM prompt prefix it feeds must not change between turns);
  ``register_tool`` checks the schema and keeps runtime tools in durable state, so they survive restarts.
- ``execute`` validates the input against the tool's schema, then runs the tool in a task of its own, with a
  per-tool timeout on the node's clock (a tool declaring an ``inline`` function runs it in place instead).
  The agent sends the turn's facts with each call (``turn``): the handler gets them as ``env.turn``. The
  actor replies when the tool is done but keeps serving its mailbox meanwhile, so one slow tool never holds
  up the tenant's other sessions. A tool that raises, hangs or returns
  garbage costs only that call: the reply is ``{"status": "error", "error": {code, message}}`` for the LLM to
  read, never an exception and never a crash of this actor.
- Results of tools that bring in outside content are marked ``untrusted`` and wrapped as data.
- Every call is authorized with the context of the turn that makes it (``minihermes.permissions``), exactly as
  the operation the tool performs would be over HTTP: a user's turn can do nothing the user cannot do
  directly. A refusal is a ``permission_denied`` error result for the LLM, and an audit event.
- Tools a user's turn wrote (``register_tool`` with an owner; see ``minihermes.tools.catalog``) are listed to
  and run by their owner only; their output is untrusted.

Built-ins: the toolsets in the ``toolsets`` arg (``minihermes.tools``: one ``Tool`` record per tool, grouped in
named ``Toolset``s); the agent app's composition root (``minihermes/app.py``) gives every toolset of the
app, and an executor given none offers the core ones (``minihermes.tools.builtin.CORE_TOOLSETS``).
"""

from __future__ import annotations

import asyncio
import difflib
import hashlib
import json
import time
import uuid
from pathlib import Path
from typing import Any

from pydantic import InstanceOf

from minihermes.audit import fire_audit
from minihermes.permissions import (
    DEFAULT_PERMISSIONS,
    PermissionTable,
    is_admin,
    is_writer,
    may,
    may_access,
)
from minihermes.runtime import (
    ActorArgs,
    ActorError,
    Conflict,
    Deferred,
    GenServer,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    RequestContext,
    call,
    cast,
    current_context,
    state,
)
from minihermes.tools.builtin import CORE_TOOLSETS
from minihermes.tools.catalog import (
    Catalog,
    ToolDef,
    Toolset,
    build_registered,
    check_registration,
    run_tool,
    to_json_result,
)
from minihermes.tools.contract import (
    MUTATING,
    UNTRUSTED,
    ExecutorEnv,
    Permission,
    ToolEnv,
    ToolFailure,
    TurnInfo,
    UntrustedResult,
    mark_untrusted,
    resolve_permission,
)
from minihermes.tools.sandbox import SandboxLimits, SandboxPolicy
from minihermes.tools.workspace import workspace_path

__all__ = ["ToolExecutor", "workspace_path"]

DEFAULT_TIMEOUT = 30.0
MAX_RESULT_CHARS = 64_000
MAX_TOOLS = 200
MAX_OWNED_TOOLS = 20
"""Tools one principal may own (self-written, not promoted): one user cannot fill the tenant's catalogue."""
_AUDIT_INPUT_CHARS = 500


def _require_admin(op: str) -> None:
    if not is_admin(current_context()):
        raise PermissionDenied(f"{op} needs the admin role", op=op)


def _allowed(ctx: RequestContext, permission: Permission, table: PermissionTable) -> bool:
    if isinstance(permission, tuple):
        return may(ctx, permission[0], permission[1], table)
    return may_access(ctx, permission)


def _describe_permission(permission: Permission, table: PermissionTable) -> tuple[str, dict[str, Any]]:
    if isinstance(permission, tuple):
        actor, op = permission
        access = table.access(actor, op)
        return f"{actor}.{op} (access '{access}')", {"actor": actor, "op": op, "access": access}
    return f"access '{permission}'", {"access": permission}


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


class ToolExecutor(GenServer):
    """Per-tenant tool catalogue and executor (see the module docstring).

    Args: ``workspace_root`` (folder of the session workspaces; the app passes ``<data_dir>/workspaces``),
    ``default_timeout`` (seconds), ``max_result_chars``, ``max_tools``, ``terminal`` (a dict of
    ``SandboxLimits`` fields for the terminal tool), ``sandbox_policy`` (a ``SandboxPolicy``, in-process only),
    ``permissions`` (a ``PermissionTable``, in-process only; default ``DEFAULT_PERMISSIONS``, the HTTP edge's),
    ``max_owned_tools`` (per principal), ``toolsets`` (``Toolset`` objects, in-process only; default
    ``CORE_TOOLSETS``).
    """

    class Args(ActorArgs):
        workspace_root: str | Path | None = None
        default_timeout: float = DEFAULT_TIMEOUT
        max_result_chars: int = MAX_RESULT_CHARS
        max_tools: int = MAX_TOOLS
        max_owned_tools: int = MAX_OWNED_TOOLS
        terminal: dict[str, Any] = {}
        sandbox_policy: InstanceOf[SandboxPolicy] | None = None
        permissions: InstanceOf[PermissionTable] | None = None
        toolsets: str | InstanceOf[Toolset] | list[str | InstanceOf[Toolset]] | None = None
        """Toolset names (the app resolves them, ``minihermes.app.toolsets_for``) or ``Toolset`` objects."""

    state_version = 1
    tools: dict[str, dict[str, Any]] = state(default_factory=dict)
    """Runtime-registered tools by name: the checked registration records."""

    async def on_init(self, actor_id: str, args: dict[str, Any]) -> None:
        root = args.get("workspace_root")
        self.workspace_root: Path | None = Path(root) if root else None
        self.default_timeout = float(args.get("default_timeout", DEFAULT_TIMEOUT))
        self.max_result_chars = int(args.get("max_result_chars", MAX_RESULT_CHARS))
        self.max_tools = int(args.get("max_tools", MAX_TOOLS))
        self.max_owned_tools = int(args.get("max_owned_tools", MAX_OWNED_TOOLS))
        terminal = {
            "wall_seconds": 30.0,
            "cpu_seconds": 10,
            "output_bytes": 64 * 1024,
            **args.get("terminal", {}),
        }
        self.terminal_limits = SandboxLimits(**terminal)
        policy = args.get("sandbox_policy")
        self.sandbox_policy: SandboxPolicy | None = policy if isinstance(policy, SandboxPolicy) else None
        table = args.get("permissions")
        base = table if isinstance(table, PermissionTable) else DEFAULT_PERMISSIONS
        # The ops' declared access classes under the table, once per activation (not per tool call).
        self.permissions = base.with_declared(self.host.actor_types())
        toolsets = args.get("toolsets")
        catalog = Catalog(CORE_TOOLSETS if toolsets is None else toolsets)
        self._kinds: dict[str, ToolDef] = catalog.tools
        self._facts = catalog.facts
        """Each toolset's offering facts (``Toolset.facts``)."""
        """The built-in tools (of every toolset given, whether or not this node has what each requires)."""
        self._env = ExecutorEnv(
            self.workspace_root, self.terminal_limits, self.sandbox_policy, catalog.toolsets
        )
        """What every call's ``ToolEnv`` shares."""
        self._kind_timeouts = {
            name: float(t.handler_config.get("timeout") or 0)
            or (t.timeout_of(self._env) if t.timeout_of is not None else self.default_timeout)
            for name, t in self._kinds.items()
        }
        """Each built-in's timeout (``Tool.timeout``), read once: a registration on it inherits it."""
        self._registered: dict[str, ToolDef] = {}
        for name, record in self.tools.items():
            try:
                self._registered[name] = build_registered(record, self._kinds)
            except Exception as e:  # a record this version cannot run: keep it stored, leave it out
                self.host.log.warning("registered tool %s cannot be loaded: %s", name, e)
        self._listing: list[dict[str, Any]] | None = None
        self._listed_facts: dict[str, dict[str, Any]] = {}
        self._listing_key: tuple[int, frozenset[str]] = (0, frozenset())
        self._digest = ""
        self._running: dict[str, asyncio.Task[Any]] = {}
        self._timed_out: set[str] = set()
        self._session_calls: dict[str, set[str]] = {}
        """The running calls of each session (``cancel_calls``)."""
        self._cancelled: set[str] = set()
        self._stats: dict[str, Any] = {"executions": 0, "errors": 0, "timeouts": 0, "by_tool": {}}
        self._audit_on = self.host.has_actor("audit_event")
        self._guardrails_on = self.host.has_actor("guardrails")
        self.host.join("svc:tool_executor")

    # -- catalogue ----------------------------------------------------------------------------------------

    @call(access="read")
    def list_tools(self) -> dict[str, Any]:
        """Every tool the caller may see, sorted by name: ``{name, description, input_schema, effects,
        trust, toolset, offered}`` (the tenant's tools, and the caller's own self-written ones), and
        ``toolsets``: the offering facts of each toolset listed (``{offered, intents, purpose}``, what a turn's
        toolset selection reads). The same catalogue always gives the same bytes; ``digest`` changes exactly
        when the catalogue does. The ``input_schema`` objects and ``toolsets`` are shared with the
        catalogue: copy one before changing it."""
        key = self._builtin_key()
        if self._listing is None or key != self._listing_key:
            self._listing_key = key
            every = {**self._builtins(), **{n: t for n, t in self._registered.items() if not t.owner}}
            self._listing = [every[n].listing() for n in sorted(every)]
            listed = {t.toolset for t in every.values() if t.toolset}
            self._listed_facts = {n: f for n, f in sorted(self._facts.items()) if n in listed}
            encoded = json.dumps([self._listing, self._listed_facts], ensure_ascii=False).encode()
            self._digest = hashlib.sha256(encoded).hexdigest()[:16]
        listing, digest = self._listing, self._digest
        principal = current_context().principal
        own = sorted(
            (t for t in self._registered.values() if t.owner and t.owner == principal), key=lambda t: t.name
        )
        if own:
            mine = [t.listing() for t in own]
            listing = sorted([*listing, *mine], key=lambda t: str(t["name"]))
            encoded = json.dumps(mine, ensure_ascii=False).encode()
            digest = hashlib.sha256(digest.encode() + encoded).hexdigest()[:16]
        tools = [dict(t) for t in listing]
        return {
            "status": "ok",
            "tools": tools,
            "count": len(tools),
            "digest": digest,
            "toolsets": self._listed_facts,
        }

    @call(access="admin")
    def register_tool(
        self,
        name: str,
        description: str,
        input_schema: dict[str, Any],
        handler_type: str,
        handler_config: dict[str, Any] | None = None,
        replace: bool = True,
        owner: str = "",
    ) -> dict[str, Any]:
        """Add (or, with ``replace``, update) a runtime tool. Built-in names are refused.

        An admin registers the tenant's tools (``owner`` empty) or a tool owned by a principal. Anybody else
        who may write registers only tools of their own (``owner`` is then always the caller): on a built-in
        kind whose calls they may make themselves, never replacing a tool that is not theirs. Owned tools
        are listed to and run by their owner only, and their output is untrusted."""
        ctx = current_context()
        admin = is_admin(ctx)
        if not admin and not is_writer(ctx):
            raise PermissionDenied(
                "register_tool: a read-only role cannot register tools", op="register_tool"
            )
        record = check_registration(
            name, description, input_schema, handler_type, handler_config, self._kinds
        )
        if name in self._kinds:
            raise Conflict(f"'{name}' is a built-in tool and cannot be replaced", field="name")
        if not admin:
            owner = ctx.principal
            self._check_own_registration(ctx, record)
        exists = name in self.tools
        if exists and not replace:
            raise Conflict(f"a tool named '{name}' is already registered", field="name")
        if exists and not admin and self.tools[name].get("owner") != owner:
            whose = "the tenant's" if not self.tools[name].get("owner") else "another principal's"
            raise PermissionDenied(
                f"register_tool: '{name}' is {whose} tool; only an admin may replace it",
                op="register_tool",
                field="name",
            )
        if owner:
            record["owner"] = owner
            owned = sum(1 for n, r in self.tools.items() if r.get("owner") == owner and n != name)
            if owned >= self.max_owned_tools:
                raise Conflict(
                    f"{owner} already owns {self.max_owned_tools} tools (an admin may promote or remove some)",
                    code="quota_exceeded",
                )
        if not exists and len(self.tools) >= self.max_tools:
            raise Conflict(
                f"this tenant already has {self.max_tools} registered tools", code="quota_exceeded"
            )
        tool = build_registered(record, self._kinds)
        record["registered_at"] = self.host.now()
        record["registered_by"] = ctx.principal
        self.tools[name] = record
        self._registered[name] = tool
        self._listing = None
        self._changed(name)
        self._audit(
            "tool_registered",
            f"tool={name} handler={handler_type}" + (f" owner={owner}" if owner else ""),
            data={"tool": name, "owner": owner},
        )
        return {
            "status": "ok",
            "name": name,
            "replaced": exists,
            "effects": tool.effects,
            "trust": tool.trust,
        } | ({"owner": owner} if owner else {})

    def _check_own_registration(self, ctx: RequestContext, record: dict[str, Any]) -> None:
        """A non-admin's tool wraps a built-in kind they may call anyway: it can give them no new power."""
        kind = self._kinds.get(record["handler_type"])
        fixed = record["handler_config"].get("fixed_input") or {}
        if kind is None or not _allowed(ctx, resolve_permission(kind.permission, fixed), self.permissions):
            raise PermissionDenied(
                f"register_tool: only an admin may register a {record['handler_type']} tool",
                op="register_tool",
                field="handler_type",
            )

    @call(access="admin")
    def unregister_tool(self, name: str) -> dict[str, Any]:
        """Remove a runtime tool. Admin only (or the owner of a self-written tool); built-ins stay."""
        ctx = current_context()
        if name in self._kinds:
            raise Conflict(f"'{name}' is a built-in tool and cannot be removed", field="name")
        record = self.tools.get(name)
        mine = record is not None and bool(record.get("owner")) and record.get("owner") == ctx.principal
        if not (mine and is_writer(ctx)):
            _require_admin("unregister_tool")
        if record is None:
            raise NotFound(f"no registered tool named '{name}'", field="name")
        del self.tools[name]
        self._registered.pop(name, None)
        self._listing = None
        self._changed(name)
        self._audit("tool_unregistered", f"tool={name}", data={"tool": name})
        return {"status": "ok", "name": name}

    @call(access="read")
    def describe_tool(self, name: str, input: Any = None) -> dict[str, Any]:
        """A tool's schema and classification (effects, trust, review_by_default). With ``input``, the
        effects of that call (an ``http_request`` GET is a read)."""
        tool = self._lookup(name)
        if tool is None:
            raise NotFound(self._unknown_message(name), field="name")
        return {**tool.describe(input), "timeout": self._timeout(tool)}

    @call(access="read")
    def get_stats(self) -> dict[str, Any]:
        """Executions since this instance started, per tool too."""
        return {
            "status": "ok",
            "executions": self._stats["executions"],
            "errors": self._stats["errors"],
            "timeouts": self._stats["timeouts"],
            "running": len(self._running),
            "by_tool": {k: dict(v) for k, v in sorted(self._stats["by_tool"].items())},
            "builtin_tools": len(self._kinds),
            "registered_tools": len(self.tools),
        }

    # -- execution ----------------------------------------------------------------------------------------

    @call(access="admin")
    def execute(
        self, name: str, input: Any = None, session_id: str = "", turn: dict[str, Any] | None = None
    ) -> Any:
        """Run a tool: ``{status: "ok", result, untrusted}`` or ``{status: "error", error: {code, message}}``.
        Unknown tools and invalid input are error results too (the LLM reads them). ``turn``: the facts of
        the turn that makes the call (``TurnInfo`` fields), handed to the handler as ``env.turn``."""
        if not name:
            raise InvalidArgument("execute: name must not be empty", op="execute", field="name")
        name = name[:200]  # the LLM wrote it; no tool name is that long, so it stays unknown
        started = time.perf_counter()
        args: Any = {} if input is None else input
        tool = self._lookup(name)
        if tool is None:
            return self._finish(
                name,
                session_id,
                args,
                started,
                failure=ToolFailure("unknown_tool", self._unknown_message(name)),
            )
        if not isinstance(args, dict):
            failure = ToolFailure("invalid_input", "input must be an object", field="")
            return self._finish(name, session_id, args, started, failure=failure)
        error = tool.input_error(args)
        if error is not None:
            failure = ToolFailure(error.pop("code"), error.pop("message"), **error)
            return self._finish(name, session_id, args, started, failure=failure)
        refused = self._authorize(tool, args, session_id)
        if refused is not None:
            return self._finish(name, session_id, args, started, failure=refused)
        inline = tool.inline
        if inline is not None:
            # Bounded and in-process (``Tool.inline``): no task, no timer.
            try:
                result = inline(args)
            except ToolFailure as e:
                return self._finish(name, session_id, args, started, failure=e)
            return self._finish(name, session_id, args, started, result=result)
        try:  # read here, after the inline path: an inline function gets the input only
            info = TurnInfo.of(turn)
        except ValueError as e:
            raise InvalidArgument(f"execute: {e}", op="execute", field="turn") from None
        ctx = current_context()
        env = ToolEnv(
            host=self.host,
            tenant=ctx.tenant,
            namespace=ctx.namespace,
            session_id=session_id,
            executor=self._env,
            turn=info,
        )
        task = self.host.spawn(self._run(uuid.uuid4().hex, tool, args, env, started))
        return Deferred(task)

    def _authorize(self, tool: ToolDef, args: dict[str, Any], session_id: str) -> ToolFailure | None:
        """The turn's principal and roles against what the call does, as the HTTP edge would judge it."""
        ctx = current_context()
        permission = tool.permission_for(args)
        allowed = _allowed(ctx, permission, self.permissions)
        if allowed and (tool.effects_for(args) != MUTATING or is_writer(ctx)):
            return None
        if allowed:  # a tool that changes things declared as a read: a viewer still may not run it
            what, data = "changes things", {"access": "write"}
        else:
            what, data = _describe_permission(permission, self.permissions)
        have = ", ".join(sorted(ctx.roles)) or "no role"
        self._audit(
            "permission_denied",
            f"tool {tool.name}: {what} refused to {have}",
            session_id=session_id,
            data={"tool": tool.name, **data, "roles": sorted(ctx.roles), "principal": ctx.principal},
        )
        return ToolFailure(
            "permission_denied",
            f"{tool.name}: {what} is not allowed to {have}; the user cannot do this, so do not retry",
            **data,
        )

    @cast(name="__tool_timeout")
    def tool_timeout(self, call_id: str) -> None:
        """Timer message: the call ran out of time; cancelling it kills what it started (sandboxes too)."""
        task = self._running.get(call_id)
        if task is not None and not task.done():
            self._timed_out.add(call_id)
            task.cancel()

    @call(access="admin")
    def cancel_calls(self, session_id: str) -> Deferred:
        """Stop the session's running tool calls (its turn was stopped: ``agent.cancel_turn``), as a timeout
        does: cancelling a call kills what it started, a sandboxed process included, before this replies.
        Each call answers a ``cancelled`` error. The runtime's and admins' op: ``cancelled`` is how many."""
        ctx = current_context()
        if not ctx.roles & {"admin", "system"}:
            raise PermissionDenied("cancel_calls: stopping tool calls is the runtime's", op="cancel_calls")
        if not session_id:
            raise InvalidArgument("cancel_calls: session_id must not be empty", field="session_id")
        tasks = []
        for call_id in list(self._session_calls.get(session_id, ())):
            task = self._running.get(call_id)
            if task is not None and not task.done():
                self._cancelled.add(call_id)
                task.cancel()  # the sandbox kills its process group on the way out
                tasks.append(task)
        return Deferred(self.host.spawn(self._calls_stopped(session_id, tasks)))

    async def _calls_stopped(self, session_id: str, tasks: list[asyncio.Task[Any]]) -> dict[str, Any]:
        if tasks:
            await asyncio.wait(tasks, timeout=self.default_timeout)
        return {"status": "ok", "session_id": session_id, "cancelled": len(tasks)}

    async def _run(
        self, call_id: str, tool: ToolDef, args: dict[str, Any], env: ToolEnv, started: float
    ) -> Any:
        inner = self.host.spawn(self._attempt(tool, args, env))
        self._running[call_id] = inner
        session = env.session_id
        self._session_calls.setdefault(session, set()).add(call_id)
        timeout = self._timeout(tool)
        timer = self.host.send_after(timeout, "__tool_timeout", {"call_id": call_id})
        try:
            result, failure = await inner
        except asyncio.CancelledError:
            if call_id in self._cancelled:
                result, failure = None, ToolFailure("cancelled", f"{tool.name} was stopped with its turn")
            elif call_id in self._timed_out:
                result, failure = (
                    None,
                    ToolFailure("timeout", f"{tool.name} did not finish within {timeout:g}s"),
                )
                self._stats["timeouts"] += 1
            else:
                raise  # this actor is stopping
        finally:
            self.host.cancel_timer(timer)
            self._running.pop(call_id, None)
            self._timed_out.discard(call_id)
            self._cancelled.discard(call_id)
            calls = self._session_calls.get(session)
            if calls is not None:
                calls.discard(call_id)
                if not calls:
                    del self._session_calls[session]
        return self._finish(
            tool.name, env.session_id, args, started, result=result, failure=failure, tool=tool
        )

    async def _attempt(
        self, tool: ToolDef, args: dict[str, Any], env: ToolEnv
    ) -> tuple[Any, ToolFailure | None]:
        """Run the tool; whatever it raises becomes a failure for this call only."""
        try:
            return await run_tool(tool, args, env), None
        except ToolFailure as e:
            return None, e
        except ActorError as e:  # from a collaborator: memory, a service link
            return None, ToolFailure(e.code, e.message)
        except (Exception, SystemExit) as e:
            self.host.log.warning("tool %s crashed: %s: %s", tool.name, type(e).__name__, e)
            return None, ToolFailure("tool_crashed", f"{tool.name} failed: {type(e).__name__}: {e}"[:500])

    def _finish(
        self,
        name: str,
        session_id: str,
        args: Any,
        started: float,
        *,
        result: Any = None,
        failure: ToolFailure | None = None,
        tool: ToolDef | None = None,
    ) -> dict[str, Any]:
        tool = tool or self._lookup(name)
        untrusted = tool is not None and tool.trust == UNTRUSTED
        if isinstance(result, UntrustedResult):  # the handler knows this call's output is not ours
            result, untrusted = result.value, True
        if failure is None:
            try:
                plain = tool is not None and tool.builtin
                result = to_json_result(result, self.max_result_chars, plain=plain)
            except ToolFailure as e:
                failure = e
        duration_ms = round((time.perf_counter() - started) * 1000, 3)
        reply: dict[str, Any]
        if failure is None:
            reply = {
                "status": "ok",
                "tool": name,
                "result": mark_untrusted(result) if untrusted else result,
                "untrusted": untrusted,
                "duration_ms": duration_ms,
            }
        else:
            error = failure.to_error()
            error["message"] = str(error["message"])[:1000]
            reply = {
                "status": "error",
                "tool": name,
                "error": error,
                "untrusted": untrusted,
                "duration_ms": duration_ms,
            }
        self._count(name if tool is not None else "_unknown", failure, duration_ms)
        self._audit(
            "tool_executed",
            f"tool={name} status={reply['status']}" + (f" error={failure.code}" if failure else ""),
            session_id=session_id,
            data={
                "tool": name,
                "status": reply["status"],
                "error_code": failure.code if failure else None,
                "duration_ms": duration_ms,
                "input": _canonical(args)[:_AUDIT_INPUT_CHARS],
            },
        )
        return reply

    # -- helpers ------------------------------------------------------------------------------------------

    def _available(self, tool: ToolDef) -> bool:
        return tool.requires is None or self.host.has_actor(tool.requires)

    def _builtins(self) -> dict[str, ToolDef]:
        """Built-ins this node can run (a subsystem's tool needs its actor)."""
        return {n: t for n, t in self._kinds.items() if self._available(t)}

    def _builtin_key(self) -> tuple[int, frozenset[str]]:
        missing = frozenset(n for n, t in self._kinds.items() if not self._available(t))
        return len(self._kinds), missing

    def _lookup(self, name: str) -> ToolDef | None:
        """The tool by name, as the caller may see it (another principal's own tool is not there)."""
        builtin = self._kinds.get(name)
        if builtin is not None:
            requires = builtin.requires
            return builtin if requires is None or self.host.has_actor(requires) else None
        tool = self._registered.get(name)
        if tool is None or not tool.visible_to(current_context().principal):
            return None
        return tool

    def _unknown_message(self, name: str) -> str:
        principal = current_context().principal
        names = [n for n, t in self._registered.items() if t.visible_to(principal)]
        hint = difflib.get_close_matches(name, [*self._kinds, *names], n=1)
        return f"no tool named '{name}'" + (f"; did you mean '{hint[0]}'?" if hint else "")

    def _timeout(self, tool: ToolDef) -> float:
        """A registration's own timeout, else its kind's (``Tool.timeout``, read when this started)."""
        declared = tool.handler_config.get("timeout")
        if declared:
            return float(declared)
        kind = tool.base if tool.base is not None else tool
        return (
            self._kind_timeouts.get(kind.name, self.default_timeout) if kind.builtin else self.default_timeout
        )

    def _count(self, name: str, failure: ToolFailure | None, duration_ms: float) -> None:
        stats = self._stats
        stats["executions"] += 1
        per = stats["by_tool"].setdefault(name, {"calls": 0, "errors": 0, "total_ms": 0.0})
        per["calls"] += 1
        per["total_ms"] = round(per["total_ms"] + duration_ms, 3)
        self.host.incr_counter("tool_executions_total", tool=name)
        if failure is not None:
            stats["errors"] += 1
            per["errors"] += 1
            self.host.incr_counter("tool_errors_total", tool=name, code=failure.code)

    def _changed(self, name: str) -> None:
        """The guardrails cache tool classifications: tell them this one changed."""
        if not self._guardrails_on:
            return
        try:
            self.host.send("guardrails", "tools_changed", {"name": name})
        except ActorError as e:
            self.host.log.warning("guardrails not told that %s changed: %s", name, e.message)

    def _audit(
        self, event_type: str, detail: str, *, session_id: str = "", data: dict[str, Any] | None = None
    ) -> None:
        """Fire-and-forget; a node without the audit actor simply has no trail."""
        if not self._audit_on:
            return
        fire_audit(self.host, event_type, detail, session_id=session_id, data=data)
