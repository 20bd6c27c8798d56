"""Runs inside the sandbox as ``python -I -B -c <this file's source>``: calls one function of an untrusted
module with a JSON request from stdin and writes one JSON reply to stdout.

Stdlib only. The tool's own prints go to stderr (its log), so nothing it writes can be mistaken for the
reply: the reply goes to a duplicate of the original stdout taken before the tool runs.
"""

import json
import linecache
import os
import sys
import traceback
import types

_TRACEBACK_LIMIT = 8000


def _error(code: str, message: str, tb: str = "") -> dict[str, object]:
    return {
        "ok": False,
        "error": {"code": code, "message": message[:2000], "traceback": tb[-_TRACEBACK_LIMIT:]},
    }


def _call(request: dict[str, object]) -> dict[str, object]:
    source, function = request["source"], request["function"]
    if not isinstance(source, str) or not isinstance(function, str):
        return _error("invalid_request", "source and function must be strings")
    # Register the source so tracebacks show the tool's lines.
    linecache.cache["tool.py"] = (len(source), None, source.splitlines(True), "tool.py")
    try:
        code = compile(source, "tool.py", "exec")
    except SyntaxError as e:
        return _error("syntax_error", f"{e.msg} (line {e.lineno})")
    module = types.ModuleType("tool")
    module.__file__ = "tool.py"
    sys.modules["tool"] = module  # dataclasses, pickle and friends look their module up here
    try:
        exec(code, module.__dict__)
        func = module.__dict__.get(function)
        if not callable(func):
            return _error("missing_function", f"the module defines no function {function!r}")
        output = func(request.get("input"))
    except BaseException as e:  # SystemExit and KeyboardInterrupt from tool code are tool errors too
        return _error("exception", f"{type(e).__name__}: {e}", traceback.format_exc())
    if not isinstance(output, dict):
        return _error("invalid_output", f"{function}() returned {type(output).__name__}, not dict")
    try:
        json.dumps(output, allow_nan=False)
    except (TypeError, ValueError) as e:
        return _error("invalid_output", f"{function}() returned a dict that is not JSON: {e}")
    return {"ok": True, "output": output}


def _main() -> None:
    request = json.loads(sys.stdin.buffer.read())
    reply_fd = os.dup(1)
    os.dup2(2, 1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    reply = _call(request)
    sys.stdout.flush()
    with os.fdopen(reply_fd, "wb") as out:
        out.write(json.dumps(reply, allow_nan=False).encode())


if __name__ == "__main__":  # true under `python -c`; importing this module does nothing
    _main()
