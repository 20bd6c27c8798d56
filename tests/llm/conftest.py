"""Fixtures for the provider tests: the local server, a loopback-only network guard, a key-leak check."""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator
from typing import Any

import pytest

from .support import FAKE_KEY, StubServer


@pytest.fixture(scope="session")
def _stub_server() -> Iterator[StubServer]:
    server = StubServer()
    server.start()
    yield server
    server.stop()


@pytest.fixture
def stub(_stub_server: StubServer) -> Iterator[StubServer]:
    """The shared local server, emptied for this test."""
    _stub_server.reset()
    yield _stub_server
    _stub_server.reset()


@pytest.fixture(autouse=True)
def _key_never_logged(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """Every test runs with DEBUG logging captured, and fails if any record mentions the API key."""
    caplog.set_level(logging.DEBUG)
    yield
    formatter = logging.Formatter("%(name)s %(message)s")
    # In teardown, caplog.records holds only teardown's records; the call's are kept by phase.
    for record in caplog.get_records("setup") + caplog.get_records("call"):
        text = formatter.format(record)
        assert FAKE_KEY not in text, f"API key leaked into a log record from {record.name}"


@pytest.fixture(autouse=True)
def _loopback_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """No real network in these tests: any connect to a non-loopback address fails loudly."""
    real_connect = socket.socket.connect
    real_connect_ex = socket.socket.connect_ex

    def check(address: Any) -> None:
        host = address[0] if isinstance(address, tuple) else address
        if isinstance(host, str) and host not in ("127.0.0.1", "::1", "localhost"):
            raise AssertionError(f"test tried to reach the network: {address!r}")

    def connect(self: socket.socket, address: Any) -> None:
        check(address)
        real_connect(self, address)

    def connect_ex(self: socket.socket, address: Any) -> int:
        check(address)
        return real_connect_ex(self, address)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)
    # Adapters must take credentials and endpoints from their config, never from the environment.
    for name in (
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_BASE_URL",
        "OLLAMA_HOST",
    ):
        monkeypatch.delenv(name, raising=False)
