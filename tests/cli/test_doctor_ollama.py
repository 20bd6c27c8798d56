"""``minihermes doctor`` offers a local Ollama (issue 24: an offer, never a silent switch): while the
offline model answers and an Ollama answers on its address, doctor's output names it and its models and prints
the exact commands that switch to it; running them (in a shell, as a person pastes them) switches; doctor
itself switched nothing. No Ollama answering: no offer."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from minihermes.cli.main import app

from ..llm.fake_ollama import FakeOllama
from ..llm.support import closed_port_url
from ._served import squash

runner = CliRunner()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def ollama() -> Iterator[FakeOllama]:
    server = FakeOllama()
    server.start()
    yield server
    server.stop()


def doctor(data: Path, *options: str) -> tuple[int, str]:
    result = runner.invoke(app, ["doctor", "--data-dir", str(data), "--port", str(_free_port()), *options])
    assert "Traceback" not in result.output, result.output
    return result.exit_code, result.stdout


def active(data: Path) -> str:
    listed = runner.invoke(app, ["call", "llm_gateway", "list_providers", "{}", "--data-dir", str(data)])
    assert listed.exit_code == 0, listed.output
    return str(json.loads(listed.stdout)["active"]["provider"])


def test_doctor_offers_a_local_ollama_with_the_commands_that_switch(
    tmp_path: Path, ollama: FakeOllama, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MINIHERMES_OLLAMA_URL", ollama.base_url)
    data = tmp_path / "data"
    code, out = doctor(data)
    assert code == 0, out
    assert "A local Ollama is running at" in out and ollama.base_url in squash(out)
    assert "llama3.2:latest, qwen2.5:0.5b" in squash(out).replace(",", ", ")
    assert active(data) == "simulated"  # offered, not switched

    command = out[out.index("run:\n") + len("run:\n") :].rstrip("\n")
    assert command.startswith("minihermes call llm_gateway register_provider '{")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    done = subprocess.run(["bash", "-c", command], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert active(data) == "ollama"

    code, out = doctor(data, "--json")  # the offer is gone once a real model answers
    assert code == 0 and "local ollama" not in out


def test_no_offer_when_no_ollama_answers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MINIHERMES_OLLAMA_URL", closed_port_url())
    code, out = doctor(tmp_path / "data")
    assert code == 0, out
    assert "Ollama" not in out and "run:" not in out


def test_the_offer_in_json(tmp_path: Path, ollama: FakeOllama, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MINIHERMES_OLLAMA_URL", ollama.base_url)
    code, out = doctor(tmp_path / "data", "--json")
    assert code == 0, out
    [offer] = [c for c in json.loads(out)["checks"] if c["name"] == "local ollama"]
    assert offer["status"] == "warn" and not offer["required"]
    assert "switch_provider" in offer["command"] and "--data-dir" in offer["command"]
