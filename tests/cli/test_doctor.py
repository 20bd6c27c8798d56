"""``minihermes doctor``: storage, sandbox, port and provider checks, the exit code and JSON output."""

from __future__ import annotations

import asyncio
import json
import socket
import sqlite3
import uuid

from typer.testing import CliRunner

from minihermes.cli import doctor as dr
from minihermes.cli.main import app
from minihermes.embed import MiniHermes
from minihermes.runtime import AppConfig
from minihermes.runtime.store import sqlite_has_wal_reset_bug
from tests.store.conftest import PG_DSN, requires_postgres

from .conftest import core_config


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _by(checks, group, name=None):
    return [c for c in checks if c.group == group and (name is None or c.name.startswith(name))]


WAL_BUG = "warn" if sqlite_has_wal_reset_bug(sqlite3.sqlite_version_info) else "ok"


def test_storage_checks_on_a_fresh_and_an_existing_data_dir(tmp_path):
    fresh = asyncio.run(dr.check_storage(tmp_path / "new"))
    assert {c.name: c.status for c in fresh} == {
        "data dir": "ok",
        "sqlite": "ok",
        "WAL": "ok",
        "FTS5": "ok",
        "encryption": "ok",
        "schema": "ok",
        "WAL-reset bug": WAL_BUG,
        "disk": "ok",
    }
    assert not list((tmp_path / "new").glob(".doctor*"))  # the scratch files are gone

    async def make_db() -> None:
        async with MiniHermes(data_dir=tmp_path / "used", config=core_config()):
            pass

    asyncio.run(make_db())
    (schema,) = _by(asyncio.run(dr.check_storage(tmp_path / "used")), "storage", "schema")
    assert schema.status == "ok" and "(current), journal_mode=wal" in schema.detail

    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    (data_dir,) = asyncio.run(dr.check_storage(blocked / "data"))
    assert data_dir.status == "fail" and data_dir.required


def test_storage_is_checked_by_the_configured_backend(tmp_path):
    cfg = AppConfig.from_toml(f'[node]\ndata_dir = "{tmp_path / "cfg-data"}"\n')
    checks = asyncio.run(dr.check_storage(tmp_path / "ignored", cfg))
    assert [c.name for c in checks] == [
        "data dir",
        "sqlite",
        "WAL",
        "FTS5",
        "encryption",
        "schema",
        "WAL-reset bug",
        "disk",
    ]
    assert str(tmp_path / "cfg-data") in checks[0].detail and not (tmp_path / "ignored").exists()

    unknown = AppConfig.from_toml('[node]\nbackend = "mongo"\n')
    (check,) = asyncio.run(dr.check_storage(tmp_path, unknown))
    assert check.status == "fail" and check.required and "unknown store backend 'mongo'" in check.detail


@requires_postgres
def test_a_postgres_node_is_checked_as_one(tmp_path, monkeypatch):
    monkeypatch.setenv("DOCTOR_PG_DSN", PG_DSN)
    schema = f"test_{uuid.uuid4().hex[:12]}"
    cfg = AppConfig.from_toml(
        f'[node]\nbackend = "postgres"\nbackend_options = {{ dsn_env = "DOCTOR_PG_DSN", schema = "{schema}" }}\n'
    )
    checks = asyncio.run(dr.check_storage(tmp_path / "d", cfg))
    assert {c.name: c.status for c in checks} == {
        "server": "ok",
        "pgvector": "ok",
        "unaccent": "ok",
        "locale": "ok",
        "schema": "ok",
    }
    assert not (tmp_path / "d").exists()  # no SQLite data dir for a PostgreSQL node


async def test_a_server_on_the_port_spares_an_unnamed_data_dir(tmp_path, monkeypatch):
    """Issue 19: without a data dir, a MiniHermes server on the port owns the storage: ./data is not made."""

    async def server_answers(host, port):
        return dr.Check("port", f"{host}:{port}", "ok", "in use by a MiniHermes server (ok)", True), True

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(dr, "check_port", server_answers)
    checks = await dr.run_checks(
        data_dir=None, host="127.0.0.1", port=_free_port(), url=None, token=None, probe_timeout=1
    )
    (storage,) = _by(checks, "storage")
    assert storage.status == "skip" and "keeps its own" in storage.detail
    assert not (tmp_path / "data").exists()


def test_sandbox_level_is_reported():
    (check,) = dr.check_sandbox()
    assert check.status in ("ok", "warn") and check.detail.startswith("level ")


async def test_port_free_taken_by_another_program_or_by_a_minihermes_server(tmp_path):
    port = _free_port()
    check, ours = await dr.check_port("127.0.0.1", port)
    assert check.status == "ok" and check.detail == "free" and not ours
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        s.listen()
        check, ours = await dr.check_port("127.0.0.1", port)  # answers no HTTP
    assert check.status == "fail" and check.required and not ours

    from minihermes.api import serve_http

    async with MiniHermes(data_dir=tmp_path / "srv", config=core_config()) as mh:
        stop = asyncio.Event()
        started = asyncio.Event()
        server = asyncio.ensure_future(
            serve_http(
                mh.node,
                "127.0.0.1",
                port,
                None,
                stop=stop,
                on_started=lambda h, p: started.set(),
                log_level="error",
            )
        )
        await asyncio.wait_for(started.wait(), 30)
        try:
            check, ours = await dr.check_port("127.0.0.1", port)
            assert check.status == "ok" and "MiniHermes server" in check.detail and ours
            # The running server is asked for its providers (no second node on its data dir).
            checks = await dr.run_checks(
                data_dir=tmp_path / "srv", host="127.0.0.1", port=port, url=None, token=None, probe_timeout=1
            )
            assert _by(checks, "providers", "simulated (active)")[0].status == "ok"
        finally:
            stop.set()
            await server


async def test_providers_reachable_unreachable_and_required(tmp_path):
    dead = _free_port()  # nothing listens there
    listening = socket.socket()
    listening.bind(("127.0.0.1", 0))
    listening.listen()
    async with MiniHermes(data_dir=tmp_path / "d", config=core_config()) as mh:
        for name, port in (("down", dead),):
            await mh.ask(
                "llm_gateway",
                "register_provider",
                {"name": name, "kind": "openai", "model": "m", "base_url": f"http://127.0.0.1:{port}/v1"},
            )
        listing = await mh.ask("llm_gateway", "list_providers", {})
    checks = await dr.check_providers(listing, timeout=1)
    (down,) = _by(checks, "providers", "down")
    assert down.status == "warn" and "unreachable" in down.detail and not down.required
    assert _by(checks, "providers", "simulated (active)")[0].status == "ok"
    assert {c.status for c in _by(checks, "providers", "openai")} == {"skip"}
    assert dr.exit_code(checks) == 0

    listing["active"] = {"provider": "down", "model": ""}
    checks = await dr.check_providers(listing, timeout=1)
    (down,) = _by(checks, "providers", "down")
    assert down.status == "fail" and down.required and dr.exit_code(checks) == 1
    listening.close()


async def test_a_provider_whose_server_answers_is_reachable(tmp_path):
    from minihermes.api import serve_http

    port = _free_port()
    async with MiniHermes(data_dir=tmp_path / "d", config=core_config()) as mh:
        stop, started = asyncio.Event(), asyncio.Event()
        server = asyncio.ensure_future(
            serve_http(
                mh.node,
                "127.0.0.1",
                port,
                None,
                stop=stop,
                on_started=lambda h, p: started.set(),
                log_level="error",
            )
        )
        await asyncio.wait_for(started.wait(), 30)
        try:
            status, detail = await dr.probe_provider(
                {"kind": "ollama", "model": "llama", "base_url": f"http://127.0.0.1:{port}"}, timeout=2
            )
        finally:
            stop.set()
            await server
    assert status == "ok" and "answers (HTTP 404)" in detail


def test_the_command_prints_json_and_sets_the_exit_code(tmp_path):
    port = str(_free_port())
    result = CliRunner().invoke(app, ["doctor", "--data-dir", str(tmp_path / "d"), "--port", port, "--json"])
    assert result.exit_code == 0, result.output
    body = json.loads(result.stdout)
    assert body["ok"] is True
    groups = {c["group"] for c in body["checks"]}
    assert groups == {"storage", "sandbox", "port", "providers"}

    with socket.socket() as s:
        s.bind(("127.0.0.1", int(port)))
        s.listen()
        taken = CliRunner().invoke(app, ["doctor", "--data-dir", str(tmp_path / "d"), "--port", port])
    assert taken.exit_code == 1 and "in use by another program" in taken.stdout


def test_the_command_without_data_dir_leaves_no_data_dir_behind_a_server(tmp_path, monkeypatch):
    """Issue 19, as typed: ``minihermes doctor`` next to a running server does not make ./data."""

    async def server_answers(host, port):
        return dr.Check("port", f"{host}:{port}", "ok", "in use by a MiniHermes server (ok)", True), True

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(dr, "check_port", server_answers)
    result = CliRunner().invoke(app, ["doctor", "--port", str(_free_port()), "--json"])
    (storage,) = [c for c in json.loads(result.stdout)["checks"] if c["group"] == "storage"]
    assert storage["status"] == "skip" and not (tmp_path / "data").exists()


@requires_postgres
def test_the_command_checks_the_store_a_config_names(tmp_path, monkeypatch):
    monkeypatch.setenv("DOCTOR_PG_DSN", PG_DSN)
    config = tmp_path / "node.toml"
    config.write_text(
        f'[node]\nbackend = "postgres"\n'
        f'backend_options = {{ dsn_env = "DOCTOR_PG_DSN", schema = "test_{uuid.uuid4().hex[:12]}" }}\n'
    )
    port = str(_free_port())
    result = CliRunner().invoke(
        app, ["doctor", "--config", str(config), "--data-dir", str(tmp_path / "d"), "--port", port, "--json"]
    )
    storage = {c["name"]: c["status"] for c in json.loads(result.stdout)["checks"] if c["group"] == "storage"}
    assert storage == {"server": "ok", "pgvector": "ok", "unaccent": "ok", "locale": "ok", "schema": "ok"}
    assert PG_DSN not in result.output
