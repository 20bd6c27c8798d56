"""Checking and running LLM-written tool code: the static check first (``_code_check``), then the sandbox.

The static check catches mistakes and known escape routes early, with a readable error for the LLM. It is
defence in depth: the security boundary is the sandbox (``minihermes.tools.sandbox``: a separate process
with no network, no view of the data directory or credentials, CPU/memory/process/time limits, writes only
in the tool's folder and within its owner's quota, an empty environment, an unprivileged uid where the
machine allows).

The result channel. Inside the sandbox the runner (``RUNNER``) reads the job from stdin, then forks: the
tool's code runs in the child only, and the parent, in which no tool code ever runs, is the one process
that writes the reply the server reads (stdout). Before the fork the runner makes stdout a duplicate of
stderr for everybody and keeps the original only as a descriptor the child closes first thing, and it
marks itself non-dumpable (``PR_SET_DUMPABLE`` 0), so another process of the sandbox uid cannot open its
descriptors or memory through ``/proc``; ptrace and ``process_vm_writev`` are refused by the sandbox's
seccomp filter, and the launcher and the sandbox's init let go of stdout before the program runs. So the
tool's code, even one that escaped the static check, can print (its prints are the log, ``printed``) but
cannot write the reply: no marker to find, no descriptor to reach. What the child sends the parent, on a
pipe of its own, is its claim about its own run (what ``run`` returned, or that its test passed); the
parent checks its shape and builds the reply. A tool that escaped the check could only lie about its own
output, which is what its code returns anyway; a passing test is a quality gate the author writes, not a
security fact (review, quotas and the sandbox do not depend on it).

The child also gives the tool's code restricted builtins: ``__import__`` of the allowed modules only, and
``open`` of paths inside the tool's folder only (no descriptor numbers, no ``/proc``). Opening a file for
writing lowers the process's file size limit to what the folder's quota (``limits.workspace_bytes``) leaves
besides that file, so a tool writing file after file stops at the quota, not when the sandbox's watcher
next measures the folder (which stays the backstop, with the per-file cap the sandbox sets).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from minihermes.tools.sandbox import SandboxLimits, SandboxPolicy, SandboxResult, run_python

from ._code_check import ALLOWED, ALLOWED_IMPORTS, MAX_CODE_CHARS, CodeRejected, check_code, check_test

__all__ = [
    "ALLOWED_IMPORTS",
    "DEFAULT_LIMITS",
    "MAX_CODE_CHARS",
    "MAX_OUTPUT_CHARS",
    "CodeRejected",
    "check_code",
    "check_test",
    "outcome",
    "run_code",
    "runner_input",
]

MAX_OUTPUT_CHARS = 32_000
DEFAULT_LIMITS = SandboxLimits(
    cpu_seconds=5, wall_seconds=10.0, memory_bytes=256 * 1024 * 1024, max_processes=16, output_bytes=64 * 1024
)

# Runs inside the sandbox (``python -I -B -c``); see the module docstring. The job's ``modules`` are the
# allowed imports, ``limit`` the largest result (characters of JSON).
RUNNER = r"""
import json, os, sys

def _seal():
    # Non-dumpable: /proc/<pid>/fd and /proc/<pid>/mem of this process are closed to the sandbox uid.
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE, 0
    except Exception:
        pass  # no ctypes here: the pid namespace and the uid drop still stand

def _parent(reply, r, pid, limit):
    claim = bytearray()
    while True:
        chunk = os.read(r, 65536)
        if not chunk:
            break
        claim += chunk
        if len(claim) > 4 * limit + 65536:
            os.kill(pid, 9)
            claim = None
            break
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code < 0 and claim is not None:
        # Killed by a limit (SIGXCPU, SIGXFSZ, SIGKILL): end the same way, so the sandbox reports which.
        import signal
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    out = {"ok": False, "exit_code": code}
    if claim is None:
        out["error"] = "the result is larger than %d characters" % limit
    elif not claim:
        out["error"] = "the tool's process ended without a result (exit code %d)" % code
    else:
        try:
            data = json.loads(bytes(claim))
        except (ValueError, RecursionError):
            data = None
        if not isinstance(data, dict) or not isinstance(data.get("ok"), bool):
            out["error"] = "the tool's process sent something that is not a result"
        elif data["ok"]:
            out["ok"] = True
            if "result" in data:
                out["result"] = data["result"]
        else:
            out["error"] = str(data.get("error", ""))[:2000]
            out["traceback"] = str(data.get("traceback", ""))[-2000:]
    text = json.dumps(out)
    if len(text) > limit + 4096:
        text = json.dumps({"ok": False, "exit_code": code, "error": "the result is larger than %d characters" % limit})
    data = text.encode()
    while data:
        data = data[os.write(reply, data):]

def _usage(root):
    import stat
    size = count = 0
    for top, dirs, files in os.walk(root):
        count += len(dirs) + len(files)
        for name in files:
            try:
                st = os.lstat(os.path.join(top, name))
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                size += st.st_size
    return size, count

def _cap_file_size(limit):
    # Lowered, never raised (soft and hard): every file of this process stops growing at `limit`.
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    inf = resource.RLIM_INFINITY
    hard = limit if hard == inf else min(limit, hard)
    resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))

def _builtins(root, modules, quota_bytes, quota_files):
    import builtins
    real_import, real_open = builtins.__import__, builtins.open
    safe = dict(vars(builtins))
    for name in ("eval", "exec", "compile", "breakpoint", "globals", "locals", "vars", "setattr",
                 "delattr", "input", "help", "memoryview"):
        safe.pop(name, None)

    def guarded_import(name, globals=None, locals=None, fromlist=(), level=0):
        if level or name not in modules:
            raise ImportError("import of %r is not allowed" % name)
        return real_import(name, globals, locals, fromlist, level)

    def guarded_open(file, mode="r", buffering=-1, encoding=None, errors=None, newline=None, closefd=True, opener=None):
        if not isinstance(file, str) or opener is not None or not closefd:
            raise PermissionError("open: only a path inside the tool's folder")
        path = os.path.realpath(file)
        if path != root and not path.startswith(root + os.sep):
            raise PermissionError("open: %r is outside the tool's folder" % file)
        if any(c in mode for c in "wax+"):
            # The quota, file by file: what the folder holds besides this file is what it may not have.
            size, count = _usage(root)
            own = os.path.getsize(path) if os.path.isfile(path) else 0
            if not os.path.lexists(path) and count + 1 > quota_files:
                raise PermissionError("open: the tool's folder is at its quota of %d entries" % quota_files)
            _cap_file_size(max(0, quota_bytes - (size - own)))
        return real_open(path, mode, buffering, encoding, errors, newline)

    def guarded_getattr(obj, name, *default):
        if not isinstance(name, str) or name.startswith("_"):
            raise AttributeError("getattr: names starting with '_' are not allowed")
        return getattr(obj, name, *default)

    safe.update(__import__=guarded_import, open=guarded_open, getattr=guarded_getattr)
    return safe

def _child(job, w):
    try:
        safe = _builtins(os.getcwd(), frozenset(job["modules"]), job["quota_bytes"], job["quota_files"])
        ns = {"__name__": "skill_tool", "__builtins__": safe}
        exec(compile(job["code"], "tool.py", "exec"), ns)
        if job["mode"] == "test":
            exec(compile(job["test"], "test.py", "exec"), ns)
            out = {"ok": True}
        else:
            out = {"ok": True, "result": ns["run"](**job["input"])}
        text = json.dumps(out, default=str)
    except BaseException as e:
        import traceback
        tb = traceback.format_exc(limit=5)
        try:
            error = type(e).__name__ + ": " + str(e)
        except BaseException:
            error = type(e).__name__
        text = json.dumps({"ok": False, "error": error[:2000], "traceback": tb[-2000:]})
    try:
        sys.stdout.flush()
    except BaseException:
        pass
    data = text.encode()
    while data:
        data = data[os.write(w, data):]
    os._exit(0)

def _main():
    job = json.loads(sys.stdin.buffer.read())
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    reply = os.dup(1)
    os.dup2(2, 1)  # from here on, stdout is the log for everybody; the reply goes to `reply` only
    _seal()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(reply)
        os.close(r)
        _child(job, w)
    os.close(w)
    _parent(reply, r, pid, job["limit"])

_main()
"""


async def run_code(
    folder: Path,
    job: dict[str, Any],
    *,
    limits: SandboxLimits = DEFAULT_LIMITS,
    policy: SandboxPolicy | None = None,
) -> dict[str, Any]:
    """Run ``job`` ({code, mode: test|call, test | input}) in the sandbox with ``folder`` as its only
    writable place. ``{ok, result}`` or ``{ok: False, error, ...}``; never raises for what the code did.
    A run stopped for taking the folder over ``limits.workspace_bytes`` says ``quota_exceeded``."""
    result = await run_python(RUNNER, folder, limits, stdin=runner_input(job, limits), policy=policy)
    return outcome(result)


def runner_input(job: dict[str, Any], limits: SandboxLimits) -> bytes:
    """What ``RUNNER`` reads on stdin for ``job``."""
    return json.dumps(
        {
            **job,
            "modules": sorted(ALLOWED),
            "limit": MAX_OUTPUT_CHARS,
            "quota_bytes": limits.workspace_bytes,
            "quota_files": limits.workspace_files,
        }
    ).encode()


def outcome(result: SandboxResult) -> dict[str, Any]:
    """The reply of a ``RUNNER`` run, for the server: the runner's own, or what the sandbox says stopped it."""
    printed = result.stderr_text.strip()[-2000:]
    if result.quota_exceeded:
        return {
            "ok": False,
            "quota_exceeded": True,
            "error": f"stopped by the sandbox: the tool's folder went over its quota "
            f"({result.workspace_bytes} bytes now; see the owner's quota)",
            "stderr": printed,
        }
    if result.killed_reason is not None:
        return {"ok": False, "error": f"stopped by the sandbox: {result.killed_reason}", "stderr": printed}
    try:
        out = json.loads(result.stdout)
    except ValueError:
        out = None
    if not isinstance(out, dict) or not isinstance(out.get("ok"), bool):
        return {"ok": False, "error": f"exited with code {result.exit_code}", "stderr": printed}
    if printed:
        out["printed"] = printed
    if len(json.dumps(out.get("result"), default=str)) > MAX_OUTPUT_CHARS:
        return {"ok": False, "error": f"the result is larger than {MAX_OUTPUT_CHARS} characters"}
    return out
