"""Structured errors. An actor's reply to bad input is one of these, never a traceback.

``ActorError`` raised inside a handler is a *reply* (the actor keeps running, its state is rolled back to
before the message); any other exception is a *crash* (the supervisor restarts the actor and the caller gets
``ActorCrashed`` at once).
"""

from __future__ import annotations

from typing import Any


class ActorError(Exception):
    """An error with a stable machine-readable code, a human message and optional details."""

    code: str = "actor_error"
    http_status: int = 400

    def __init__(self, message: str, *, code: str | None = None, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.details = {k: v for k, v in details.items() if v is not None}

    def to_dict(self) -> dict[str, Any]:
        return {"error": {"code": self.code, "message": self.message, **self.details}}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ActorError:
        err = dict(data.get("error", data))
        code = str(err.pop("code", "actor_error"))
        message = str(err.pop("message", code))
        klass = _BY_CODE.get(code, ActorError)
        inst = klass.__new__(klass)
        ActorError.__init__(inst, message, code=code, **err)
        return inst

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code!r}, message={self.message!r})"


class InvalidArgument(ActorError):
    code = "invalid_argument"
    http_status = 422


class UnknownOp(ActorError):
    code = "unknown_op"
    http_status = 404


class ActorNotFound(ActorError):
    code = "actor_not_found"
    http_status = 404


class NotFound(ActorError):
    code = "not_found"
    http_status = 404


class Conflict(ActorError):
    code = "conflict"
    http_status = 409


class PermissionDenied(ActorError):
    code = "permission_denied"
    http_status = 403


class InvalidTransition(ActorError):
    code = "invalid_transition"
    http_status = 409


class AskTimeout(ActorError):
    code = "timeout"
    http_status = 504


class ActorCrashed(ActorError):
    code = "actor_crashed"
    http_status = 500


class Overloaded(ActorError):
    code = "overloaded"
    http_status = 503


class ShuttingDown(ActorError):
    code = "shutting_down"
    http_status = 503


class WorkflowCancelled(ActorError):
    code = "cancelled"
    http_status = 409


class ConfigError(ValueError):
    """A bad app config. The message names the offending field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"config error at {field}: {message}")
        self.field = field


_BY_CODE: dict[str, type[ActorError]] = {
    k.code: k
    for k in (
        InvalidArgument,
        UnknownOp,
        ActorNotFound,
        NotFound,
        Conflict,
        PermissionDenied,
        InvalidTransition,
        AskTimeout,
        ActorCrashed,
        Overloaded,
        ShuttingDown,
        WorkflowCancelled,
    )
}
