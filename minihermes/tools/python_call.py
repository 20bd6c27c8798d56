"""Call ``def run(input: dict) -> dict`` in an untrusted Python module, inside the sandbox, JSON in and out.

Self-written tools are stored as source; ``call_python_function`` sends the source and the input to a small
bootstrap (``_py_bootstrap.py``) over stdin, so neither touches the workspace nor the command line.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from minihermes.tools.sandbox import SandboxError, SandboxLimits, SandboxPolicy, SandboxResult, run_python

_LOG_TAIL = 4000


@dataclass(frozen=True, slots=True)
class PythonCallResult:
    """Outcome of one call. Exactly one of ``output`` (ok) and ``error`` ({code, message, ...}) is set.

    Error codes: syntax_error, missing_function, exception, invalid_output (not a JSON dict),
    output_too_large, timeout, killed, crashed (the interpreter died without replying).
    """

    ok: bool
    output: dict[str, Any] | None
    error: dict[str, str] | None
    logs: str
    """What the tool printed (stdout and stderr both end up here)."""
    sandbox: SandboxResult


@functools.cache
def _bootstrap_source() -> str:
    return Path(__file__).with_name("_py_bootstrap.py").read_text()


async def call_python_function(
    source: str,
    input: dict[str, Any],
    workspace: Path | str,
    limits: SandboxLimits | None = None,
    *,
    function: str = "run",
    policy: SandboxPolicy | None = None,
) -> PythonCallResult:
    """Run ``function(input)`` from the module ``source`` in the sandbox and return its dict result.

    What the tool does wrong (raises, loops, returns garbage) comes back as ``error``; ``SandboxError`` is
    raised only for bad arguments (input not JSON-serialisable) or a sandbox that cannot be set up.
    """
    try:
        request = json.dumps({"source": source, "function": function, "input": input}, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise SandboxError("invalid_argument", f"input is not JSON-serialisable: {e}") from e
    limits = limits or SandboxLimits()
    result = await run_python(_bootstrap_source(), workspace, limits, stdin=request.encode(), policy=policy)
    logs = result.stderr_text[-_LOG_TAIL:]

    def failed(code: str, message: str) -> PythonCallResult:
        return PythonCallResult(False, None, {"code": code, "message": message}, logs, result)

    if result.timed_out:
        return failed("timeout", f"the tool ran out of time ({result.killed_reason})")
    if result.stdout_truncated:
        return failed("output_too_large", f"the tool's reply exceeds {limits.output_bytes} bytes")
    if result.killed_reason is not None:
        return failed("killed", f"the tool was killed ({result.killed_reason})")
    try:
        reply = json.loads(result.stdout)
    except ValueError:
        reply = None
    if not isinstance(reply, dict) or not isinstance(reply.get("ok"), bool):
        tail = result.stderr_text.strip().splitlines()[-1:] or ["no output"]
        return failed("crashed", f"the interpreter exited with code {result.exit_code}: {tail[0][:500]}")
    if reply["ok"] and isinstance(reply.get("output"), dict):
        return PythonCallResult(True, reply["output"], None, logs, result)
    error = reply.get("error")
    if not isinstance(error, dict):
        return failed("crashed", "malformed reply from the sandbox bootstrap")
    return PythonCallResult(False, None, {k: str(v) for k, v in error.items()}, logs, result)
