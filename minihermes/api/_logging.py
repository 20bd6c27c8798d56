"""Structured logs: one JSON object per line, for log shippers (``minihermes serve --log-format json``).

Each record carries ``ts`` (ISO 8601, UTC), ``level``, ``logger``, ``message``, the exception text when
there is one, and the fields a caller passed with ``extra=`` (the API's access log adds ``request_id``,
``method``, ``route``, ``status``, ``duration_ms``, ``tenant``, ``principal``). Secrets are redacted by the
filters on the handler (``RedactSecrets``), which run before this formatter.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

# Attributes every LogRecord has: anything else on a record came from ``extra=``.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """Formats a record as one line of JSON."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                out[key] = value
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            out["stack"] = self.formatStack(record.stack_info)
        return json.dumps(out, default=str, ensure_ascii=False)


def use_json_logs(logger: logging.Logger | None = None) -> None:
    """Switch every handler of ``logger`` (default: the root logger) to :class:`JsonFormatter`."""
    for handler in (logger or logging.getLogger()).handlers:
        handler.setFormatter(JsonFormatter())


__all__ = ["JsonFormatter", "use_json_logs"]
