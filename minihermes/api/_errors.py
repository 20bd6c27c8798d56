"""HTTP-level errors, answered as ``{"error": {"code", "message", ...}}`` like actor errors."""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """An error the HTTP layer answers itself (authentication, permissions, bad bodies, limits)."""

    def __init__(
        self, status: int, code: str, message: str, *, headers: dict[str, str] | None = None, **details: Any
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers or {}
        self.details = {k: v for k, v in details.items() if v is not None}

    def to_dict(self) -> dict[str, Any]:
        return {"error": {"code": self.code, "message": self.message, **self.details}}


def unauthenticated(message: str) -> ApiError:
    return ApiError(
        401, "unauthenticated", message, headers={"WWW-Authenticate": 'Bearer realm="minihermes"'}
    )


def forbidden(message: str, **details: Any) -> ApiError:
    return ApiError(403, "permission_denied", message, **details)


def invalid(message: str, code: str = "invalid_argument", **details: Any) -> ApiError:
    return ApiError(422, code, message, **details)


def refused(status: int, code: str, message: str, retry_after: int, **details: Any) -> ApiError:
    """A request the load-shedding gate turns away (503 ``overloaded``, 429 ``tenant_over_share``): the
    ``Retry-After`` header and the same number in the body."""
    return ApiError(
        status,
        code,
        message,
        headers={"retry-after": str(retry_after)},
        retry_after=retry_after,
        **details,
    )
