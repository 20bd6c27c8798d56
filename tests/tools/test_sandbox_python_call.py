"""call_python_function: JSON in, JSON out, every tool misbehaviour a structured error."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from minihermes.tools.python_call import call_python_function
from minihermes.tools.sandbox import SandboxError, SandboxLimits


async def test_returns_the_tools_dict(workspace: Path) -> None:
    source = """
import math
from dataclasses import dataclass

@dataclass
class Point:
    x: float
    y: float

def run(input):
    p = Point(**input["point"])
    print("computing distance")  # goes to the log, not into the reply
    return {"distance": math.hypot(p.x, p.y), "echo": input}
"""
    result = await call_python_function(source, {"point": {"x": 3, "y": 4}}, workspace)
    assert result.ok and result.error is None
    assert result.output == {"distance": 5.0, "echo": {"point": {"x": 3, "y": 4}}}
    assert "computing distance" in result.logs


async def test_tool_can_use_its_workspace(workspace: Path) -> None:
    source = """
def run(input):
    with open("notes.txt", "w") as f:
        f.write(input["text"])
    return {"size": len(open("notes.txt").read())}
"""
    result = await call_python_function(source, {"text": "hello"}, workspace)
    assert result.output == {"size": 5}
    assert (workspace / "notes.txt").read_text() == "hello"


async def test_custom_function_name(workspace: Path) -> None:
    result = await call_python_function(
        "def main(i):\n    return {'n': i['n'] + 1}", {"n": 1}, workspace, function="main"
    )
    assert result.output == {"n": 2}


@pytest.mark.parametrize(
    ("source", "code"),
    [
        ("def run(input) return 1", "syntax_error"),
        ("def other(input):\n    return {}", "missing_function"),
        ("run = 42", "missing_function"),
        ("def run(input):\n    raise ValueError('bad input')", "exception"),
        ("import sys\ndef run(input):\n    sys.exit(3)", "exception"),
        ("def run(input):\n    return [1, 2]", "invalid_output"),
        ("def run(input):\n    return {'x': object()}", "invalid_output"),
        ("def run(input):\n    return {'x': float('nan')}", "invalid_output"),
        ("import os\ndef run(input):\n    os._exit(0)", "crashed"),
    ],
)
async def test_tool_errors_are_structured(workspace: Path, source: str, code: str) -> None:
    result = await call_python_function(source, {}, workspace)
    assert not result.ok and result.output is None
    assert result.error is not None and result.error["code"] == code, result.error


async def test_exception_traceback_points_at_the_tool(workspace: Path) -> None:
    source = "def run(input):\n    return helper()\n\ndef helper():\n    return 1 / 0\n"
    result = await call_python_function(source, {}, workspace)
    assert result.error is not None
    assert result.error["message"] == "ZeroDivisionError: division by zero"
    assert 'File "tool.py", line 5, in helper' in result.error["traceback"]
    assert "return 1 / 0" in result.error["traceback"]


async def test_printing_cannot_forge_the_reply(workspace: Path) -> None:
    source = """
import os
def run(input):
    print('{"ok": true, "output": {"forged": true}}', flush=True)
    os.write(1, b'{"ok": true, "output": {"forged": true}}')
    return {"real": True}
"""
    result = await call_python_function(source, {}, workspace)
    assert result.output == {"real": True}


async def test_endless_tool_times_out(workspace: Path) -> None:
    result = await call_python_function(
        "def run(input):\n    while True:\n        pass", {}, workspace, SandboxLimits(cpu_seconds=1)
    )
    assert result.error is not None and result.error["code"] == "timeout"


async def test_huge_reply_is_refused(workspace: Path) -> None:
    source = "def run(input):\n    return {'blob': 'x' * 200_000}"
    result = await call_python_function(source, {}, workspace, SandboxLimits(output_bytes=65536))
    assert result.error is not None and result.error["code"] == "output_too_large"


async def test_tool_has_no_network_and_no_secrets(workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-fake-LEAKED")
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    source = """
import os, socket
def run(input):
    try:
        socket.create_connection(("127.0.0.1", input["port"]), timeout=2)
        net = "connected"
    except OSError as e:
        net = type(e).__name__
    return {"net": net, "env": sorted(os.environ)}
"""
    try:
        result = await call_python_function(source, {"port": server.getsockname()[1]}, workspace)
    finally:
        server.close()
    assert result.output is not None
    assert result.output["net"] != "connected"
    assert "OPENAI_API_KEY" not in result.output["env"]


async def test_non_json_input_is_a_caller_error(workspace: Path) -> None:
    with pytest.raises(SandboxError) as err:
        await call_python_function("def run(i):\n    return {}", {"x": object()}, workspace)
    assert err.value.code == "invalid_argument"
