"""Checking and running LLM-written tool code: a static allow-list first, then the sandbox.

The static check (syntax, imports from an allow-list, no dynamic code or dunder attributes, a top-level
``run`` function) catches honest mistakes early and cheaply with a readable error for the LLM. It is not the
security boundary: the sandbox is (``minihermes.tools.sandbox``: a separate process with no network, no view
of the data directory or credentials, CPU/memory/process/time limits, writes only in the tool's folder, an
empty environment, an unprivileged uid where the machine allows).
"""

from __future__ import annotations

import ast
import json
import secrets
from pathlib import Path
from typing import Any

from minihermes.tools.sandbox import SandboxLimits, SandboxPolicy, SandboxResult, run_python

ALLOWED_IMPORTS = frozenset(
    "base64 bisect calendar collections copy csv dataclasses datetime decimal difflib enum fractions "
    "functools hashlib heapq html itertools json math operator random re statistics string textwrap "
    "typing unicodedata uuid zoneinfo".split()
)
FORBIDDEN_NAMES = frozenset(
    {"__import__", "eval", "exec", "compile", "breakpoint", "globals", "locals", "vars", "setattr", "delattr"}
)
MAX_CODE_CHARS = 20_000
MAX_OUTPUT_CHARS = 32_000
DEFAULT_LIMITS = SandboxLimits(
    cpu_seconds=5, wall_seconds=10.0, memory_bytes=256 * 1024 * 1024, max_processes=16, output_bytes=64 * 1024
)

# Runs inside the sandbox (``python -I -B -c``): reads the job from stdin, runs the tool's code in a fresh
# namespace, prints the outcome after a per-run marker the tool's code cannot see.
_RUNNER = r"""
import json, sys, traceback
def _main():
    job = json.loads(sys.stdin.read())
    marker = job.pop("marker")
    ns = {"__name__": "skill_tool"}
    try:
        exec(compile(job["code"], "tool.py", "exec"), ns)
        if job["mode"] == "test":
            exec(compile(job["test"], "test.py", "exec"), ns)
            out = {"ok": True}
        else:
            out = {"ok": True, "result": ns["run"](**job["input"])}
        text = json.dumps(out, default=str)
    except BaseException as e:
        tb = traceback.format_exc(limit=5)
        text = json.dumps({"ok": False, "error": type(e).__name__ + ": " + str(e), "traceback": tb[-2000:]})
    sys.stdout.write("\n" + marker + text + "\n")
    sys.stdout.flush()
_main()
"""


class CodeRejected(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def check_code(code: str, *, what: str = "code", needs_run: bool = True) -> None:
    """Raise ``CodeRejected`` naming the first problem; see the module docstring."""
    if not code.strip():
        raise CodeRejected(f"{what} is empty")
    if len(code) > MAX_CODE_CHARS:
        raise CodeRejected(f"{what} is longer than {MAX_CODE_CHARS} characters")
    try:
        tree = ast.parse(code, filename=f"{what}.py")
    except SyntaxError as e:
        raise CodeRejected(f"{what}: syntax error at line {e.lineno}: {e.msg}") from None
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                raise CodeRejected(f"{what} line {node.lineno}: relative imports are not allowed")
            modules = [node.module or ""]
        else:
            modules = []
        for module in modules:
            if module.split(".")[0] not in ALLOWED_IMPORTS:
                allowed = ", ".join(sorted(ALLOWED_IMPORTS))
                raise CodeRejected(
                    f"{what} line {getattr(node, 'lineno', 0)}: import of '{module}' is not allowed "
                    f"(allowed: {allowed})"
                )
        if isinstance(node, ast.Name) and node.id in FORBIDDEN_NAMES:
            raise CodeRejected(f"{what} line {node.lineno}: '{node.id}' is not allowed")
        if isinstance(node, ast.Attribute) and node.attr.startswith("__"):
            raise CodeRejected(
                f"{what} line {node.lineno}: dunder attributes ('{node.attr}') are not allowed"
            )
    if needs_run and not any(isinstance(n, ast.FunctionDef) and n.name == "run" for n in tree.body):
        raise CodeRejected(f"{what} must define a top-level function run(...) that returns JSON data")


async def run_code(
    folder: Path,
    job: dict[str, Any],
    *,
    limits: SandboxLimits = DEFAULT_LIMITS,
    policy: SandboxPolicy | None = None,
) -> dict[str, Any]:
    """Run ``job`` ({code, mode: test|call, test | input}) in the sandbox with ``folder`` as its only
    writable place. ``{ok, result}`` or ``{ok: False, error, ...}``; never raises for what the code did."""
    marker = "\x1e" + secrets.token_hex(16) + " "
    payload = json.dumps({**job, "marker": marker}).encode()
    result = await run_python(_RUNNER, folder, limits, stdin=payload, policy=policy)
    return _outcome(result, marker)


def _outcome(result: SandboxResult, marker: str) -> dict[str, Any]:
    stdout = result.stdout_text
    cut = stdout.rfind(marker)
    printed = (stdout[:cut] if cut >= 0 else stdout)[-2000:]
    if result.killed_reason is not None:
        return {
            "ok": False,
            "error": f"stopped by the sandbox: {result.killed_reason}",
            "stderr": result.stderr_text[-2000:],
        }
    if cut < 0:
        return {
            "ok": False,
            "error": f"exited with code {result.exit_code}",
            "stderr": result.stderr_text[-2000:],
        }
    try:
        out: dict[str, Any] = json.loads(stdout[cut + len(marker) :].strip())
    except ValueError:
        return {"ok": False, "error": "the result is not JSON data"}
    if printed.strip():
        out["printed"] = printed.strip()
    if len(json.dumps(out.get("result"), default=str)) > MAX_OUTPUT_CHARS:
        return {"ok": False, "error": f"the result is larger than {MAX_OUTPUT_CHARS} characters"}
    return out
