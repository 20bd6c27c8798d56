"""Workflow: durable multi-step execution with per-step checkpoints, signals and queries.

Subclasses implement ``execute(**args)`` and wrap each unit of work in ``await self.step(name, fn, ...)``.
A finished step's result is checkpointed before the next one starts; after a crash or a SIGKILL of the
process, the node re-activates the workflow and ``execute`` runs again from the top, with every finished step
returning its saved result instead of running again. While it runs, the actor keeps handling its mailbox, so
``query("status")`` answers and ``signal("cancel")`` reaches it.
"""

from __future__ import annotations

import asyncio
import inspect
import typing
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, ClassVar

from ._actor import Actor, Handler, build_handler, call, cast, state
from ._cell import Deferred
from ._errors import ActorError, Conflict, InvalidArgument, WorkflowCancelled

TERMINAL = ("completed", "failed", "cancelled")


class Workflow(Actor):
    """Override ``execute``. Run it with ``ask(addr, "run", args)`` (waits for the result) or ``start``."""

    behavior = "Workflow"
    _execute: ClassVar[Handler | None] = None

    wf_status: str = state(default="idle")
    wf_args: dict[str, Any] = state(default_factory=dict)
    wf_steps: dict[str, Any] = state(default_factory=dict)
    wf_step_order: list[str] = state(default_factory=list)
    wf_current: str | None = state(default=None)
    wf_result: Any = state(default=None)
    wf_error: dict[str, Any] | None = state(default=None)
    wf_signals: list[dict[str, Any]] = state(default_factory=list)
    wf_attempt: int = state(default=0)
    wf_started_at: float | None = state(default=None)
    wf_finished_at: float | None = state(default=None)

    @classmethod
    def _validate_class(cls) -> None:
        fn = cls.__dict__.get("execute")
        if fn is not None:
            try:
                hints = typing.get_type_hints(fn)
            except Exception:
                hints = {}
            cls._execute = build_handler("call", "run", fn, hints)
            if cls._execute.model is not None:  # its arguments are saved in the state and resumed as JSON
                raise TypeError(f"{cls.__name__}.execute: take keyword arguments, not one model")

    def __init__(self) -> None:
        super().__init__()
        self._task: asyncio.Task[Any] | None = None
        self._waiters: list[asyncio.Future[Any]] = []
        self._cancelling = False
        self._signal_event = asyncio.Event()
        self._waiting_for: str | None = None

    # -- to override --------------------------------------------------------------------------------------

    if TYPE_CHECKING:
        # Subclasses declare their own parameters (they become the run arguments, checked like a handler's).
        execute: Callable[..., Awaitable[Any]]
    else:

        async def execute(self, **args: Any) -> Any:
            raise NotImplementedError(f"{type(self).__name__} must implement execute()")

    async def on_signal(self, name: str, payload: Any) -> None:
        """Handle a custom signal (default: kept for ``wait_signal``)."""

    def on_query(self, name: str) -> Any:
        """Answer a custom query (default: unknown)."""
        raise InvalidArgument(f"unknown query '{name}' (known: status)", field="name")

    # -- the step API -------------------------------------------------------------------------------------

    async def step(
        self,
        name: str,
        fn: Callable[..., Any],
        *args: Any,
        retries: int = 0,
        backoff: float = 1.0,
        **kwargs: Any,
    ) -> Any:
        """Run fn once across crashes: a finished step returns its checkpointed result. The result must be
        JSON-serializable. An exception fails the workflow after ``retries`` further attempts."""
        if name in self.wf_steps:
            return self.wf_steps[name]["result"]
        attempt = 0
        while True:
            self.wf_current = name
            try:
                result = fn(*args, **kwargs)
                if inspect.isawaitable(result):
                    result = await result
                break
            except (asyncio.CancelledError, ActorError):
                raise
            except Exception:
                if attempt >= retries:
                    raise
                attempt += 1
                await self.host.clock.sleep(backoff * 2 ** (attempt - 1))
        self.wf_steps[name] = {"result": result, "at": self.host.now()}
        self.wf_step_order.append(name)
        self.wf_current = None
        await self.host.checkpoint()
        return result

    async def wait_signal(self, name: str) -> Any:
        """Wait until a signal with this name arrives (durably recorded), and consume it."""
        while True:
            for i, s in enumerate(self.wf_signals):
                if s["name"] == name:
                    self._waiting_for = None
                    self.wf_signals.pop(i)
                    await self.host.checkpoint()
                    return s.get("payload")
            self._waiting_for = name  # everything before this point is checkpointed
            self._signal_event.clear()
            await self._signal_event.wait()

    # -- lifecycle ----------------------------------------------------------------------------------------

    async def on_init(self, actor_id: str, args: dict[str, Any]) -> None:
        if self.wf_status == "running":
            self.wf_attempt += 1
            self._launch()

    def _launch(self) -> None:
        self._task = self.host.spawn(self._drive())

    async def _drive(self) -> None:
        try:
            result = await self.execute(**self.wf_args)
        except asyncio.CancelledError:
            if not self._cancelling:
                raise  # the instance is going away; the run resumes on the next activation
            self.wf_status = "cancelled"
            self.wf_error = {"code": "cancelled", "message": "cancelled by signal"}
            await self._finish()
            return
        except ActorError as e:
            self.wf_status = "cancelled" if isinstance(e, WorkflowCancelled) else "failed"
            self.wf_error = e.to_dict()["error"]
            await self._finish()
            return
        except Exception as e:
            self.wf_status = "failed"
            self.wf_error = {
                "code": "step_failed",
                "message": f"{type(e).__name__}: {e}",
                "step": self.wf_current,
            }
            self.host.log.warning("workflow %s failed in step %s: %s", self.actor_id, self.wf_current, e)
            await self._finish()
            return
        self.wf_status = "completed"
        self.wf_result = result
        await self._finish()

    async def _finish(self) -> None:
        self.wf_finished_at = self.host.now()
        self.wf_current = None
        await self.host.checkpoint()
        await self.host.mark_durable(False)
        waiters, self._waiters = self._waiters, []
        for w in waiters:
            if w.done():
                continue
            if self.wf_status == "completed":
                w.set_result(self._outcome())
            else:
                w.set_exception(self._error())

    def _outcome(self) -> dict[str, Any]:
        return {"status": self.wf_status, "result": self.wf_result, "workflow_id": self.actor_id}

    def _error(self) -> ActorError:
        # from_dict maps the code back to its class ("cancelled" -> WorkflowCancelled).
        err = self.wf_error or {"code": "failed", "message": "workflow failed"}
        return ActorError.from_dict({"error": {**err, "workflow_id": self.actor_id}})

    async def _begin(self, args: dict[str, Any]) -> None:
        execute = type(self)._execute
        kwargs = execute.bind(args) if execute is not None else dict(args)
        if self.wf_status == "running":
            if kwargs != self.wf_args:
                raise Conflict("workflow is already running with other arguments", workflow_id=self.actor_id)
            return
        if self.wf_status in TERMINAL:
            raise Conflict(
                f"workflow already {self.wf_status}", workflow_id=self.actor_id, status=self.wf_status
            )
        self.wf_status = "running"
        self.wf_args = kwargs
        self.wf_started_at = self.host.now()
        self.wf_attempt = 1
        await self.host.mark_durable(True)
        await self.host.checkpoint()
        self._launch()

    # -- ops ----------------------------------------------------------------------------------------------

    @call
    async def run(self, **args: Any) -> Any:
        """Start (or join) the run and reply when it finishes. A finished run replies with its outcome."""
        if self.wf_status == "completed":
            return self._outcome()
        if self.wf_status in ("failed", "cancelled"):
            raise self._error()
        await self._begin(args)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        return Deferred(fut)

    @call
    async def start(self, **args: Any) -> dict[str, Any]:
        """Start the run and reply at once."""
        await self._begin(args)
        return {"status": self.wf_status, "workflow_id": self.actor_id}

    @call
    async def signal(self, name: str, payload: Any = None) -> dict[str, Any]:
        if name == "cancel":
            if self.wf_status in TERMINAL:
                return {"status": self.wf_status, "cancelled": False}
            self.wf_signals.append({"name": "cancel", "payload": payload})
            if self._task is not None and not self._task.done():
                self._cancelling = True
                self._task.cancel()
                await asyncio.wait({self._task})
            else:
                self.wf_status = "cancelled"
                self.wf_error = {"code": "cancelled", "message": "cancelled by signal"}
                await self._finish()
            return {"status": self.wf_status, "cancelled": True}
        self.wf_signals.append({"name": name, "payload": payload})
        await self.on_signal(name, payload)
        self._signal_event.set()
        return {"status": "ok", "signal": name}

    @call
    def query(self, name: str = "status") -> Any:
        if name == "status":
            return {
                "status": self.wf_status,
                "workflow_id": self.actor_id,
                "current_step": self.wf_current,
                "waiting_for": self._waiting_for,
                "completed_steps": list(self.wf_step_order),
                "attempt": self.wf_attempt,
                "started_at": self.wf_started_at,
                "finished_at": self.wf_finished_at,
                "error": self.wf_error,
            }
        return self.on_query(name)

    @call
    def result(self) -> dict[str, Any]:
        if self.wf_status == "completed":
            return self._outcome()
        if self.wf_status in ("failed", "cancelled"):
            raise self._error()
        return {"status": self.wf_status, "workflow_id": self.actor_id}

    @cast
    def __resume__(self) -> None:
        """Sent by the node at start-up to re-activate a workflow that was running (on_init resumes it)."""
