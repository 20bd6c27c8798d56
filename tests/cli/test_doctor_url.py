"""``minihermes doctor --url``: a running server checked through its API (health, readiness, storage, the
credential, services, providers) without touching ./data; and plain ``doctor`` next to a server on the port
reports on that server instead of making ./data (issue 19)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest

from tests._server import free_port

from ._served import cli, served


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with served(tmp_path_factory, "doctor") as u:
        yield u


def _doctor(*args: str) -> tuple[int, dict[tuple[str, str], dict]]:
    result = cli("doctor", *args, "--json")
    body = json.loads(result.stdout)
    assert body["ok"] is (result.exit_code == 0)
    return result.exit_code, {(c["group"], c["name"]): c for c in body["checks"]}


@pytest.mark.slow
def test_doctor_url_checks_the_server_through_its_api(url, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, checks = _doctor("--url", url, "--token-env", "CLI_ADMIN")
    assert code == 0, checks
    status = {k: c["status"] for k, c in checks.items()}
    assert status[("server", "health")] == status[("server", "ready")] == "ok"
    assert status[("server", "services")] == "ok"
    assert (
        status[("storage", "server store")] == "ok"
        and "/readyz" in checks[("storage", "server store")]["detail"]
    )
    assert "ada in tenant acme" in checks[("server", "credential")]["detail"]
    assert status[("providers", "simulated (active)")] == "ok"
    assert status[("sandbox", "isolation")] == "skip"  # the server's machine, not this one
    assert not any(group == "port" for group, _ in checks)
    assert [c for c in checks if c[0] == "storage"] == [("storage", "server store")]  # no local data dir
    assert list(tmp_path.iterdir()) == []  # ./data neither read nor made

    # Without the credential the server asks for: a clear failed check, exit code 1.
    code, checks = _doctor("--url", url)
    assert code == 1
    credential = checks[("server", "credential")]
    assert credential["status"] == "fail" and "unauthenticated" in credential["detail"]
    assert "--token-env" in credential["detail"]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_doctor_next_to_a_server_reports_on_it(url, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    port = str(urlsplit(url).port)
    code, checks = _doctor("--port", port, "--token-env", "CLI_ADMIN")
    assert code == 0, checks
    assert checks[("port", f"127.0.0.1:{port}")]["detail"].startswith("in use by a MiniHermes server")
    assert checks[("server", "ready")]["status"] == "ok"
    assert checks[("storage", "server store")]["status"] == "ok"
    assert checks[("sandbox", "isolation")]["status"] in ("ok", "warn")  # this machine: the server's
    assert not (tmp_path / "data").exists()

    table = cli("doctor", "--port", port, "--token-env", "CLI_ADMIN")
    assert table.exit_code == 0 and "server store" in table.stdout
    assert not (tmp_path / "data").exists()


def test_doctor_url_with_nobody_there_fails_cleanly(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    nobody = f"http://127.0.0.1:{free_port()}"
    code, checks = _doctor("--url", nobody)
    assert code == 1
    health = checks[("server", "health")]
    assert health["status"] == "fail" and health["required"] and nobody in health["detail"]
    assert checks[("providers", "gateway")]["status"] == "skip"
    table = cli("doctor", "--url", "not-a-url")
    assert table.exit_code == 1 and "not-a-url" in table.stdout
    assert list(tmp_path.iterdir()) == []
