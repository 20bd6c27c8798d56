"""The dashboard offers a local Ollama (issue 24: an offer, never a silent switch), in headless Chromium
against `minihermes serve` whose Ollama address (MINIHERMES_OLLAMA_URL) is a fake one on loopback: while the
offline model answers, an admin's Chat and Providers pages show "A local Ollama is running ... switch to it?";
the button registers the picked model and switches the tenant; nothing is offered when nothing Ollama-like
answers, to a user who cannot switch, or once a real model answers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .._server import serve_process
from ..llm.fake_ollama import FakeOllama
from .conftest import SECRET, Dashboard, Server, token

expect = pytest.importorskip("playwright.sync_api", reason="Python playwright is not installed").expect

ADMIN = token("acme", "ada", ["admin"])
USER = token("acme", "uma", ["user"])


@pytest.fixture(scope="module")
def ollama() -> Iterator[FakeOllama]:
    server = FakeOllama()
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, ollama: FakeOllama) -> Iterator[Server]:
    data = tmp_path_factory.mktemp("offer") / "data"
    env = {
        "WEB_JWT_SECRET": SECRET,
        "MINIHERMES_ALLOWED_EGRESS": f"127.0.0.1:{ollama.port}",  # the operator lets tenants reach it
        "MINIHERMES_OLLAMA_URL": ollama.base_url,
    }
    with serve_process(data, ["--jwt-secret-env", "WEB_JWT_SECRET"], env=env, ready_timeout=90) as url:
        yield Server(url)


def test_the_offer_appears_switches_on_click_and_only_then(
    browser: Any, served: Server, ollama: FakeOllama, shots: Path
) -> None:
    ollama.answering = False  # something answers there, not an Ollama: no offer
    admin = Dashboard(browser, served, ADMIN)
    try:
        page = admin.open("providers")
        offer = page.locator(".local-offer")
        expect(offer).to_have_attribute("data-detected", "none")
        expect(offer).to_be_hidden()

        ollama.answering = True
        page = admin.open("chat")
        offer = page.locator(".local-offer")
        expect(offer).to_be_visible()
        expect(offer).to_contain_text("A local Ollama is running")
        expect(offer).to_contain_text("llama3.2:latest, qwen2.5:0.5b")
        page.screenshot(path=str(shots / "local-ollama-offer.png"))
        assert served.call(ADMIN, "llm_gateway", "list_providers")["active"]["provider"] == "simulated"

        offer.locator("select[name=model]").select_option("qwen2.5:0.5b")
        offer.locator("button[data-op='llm_gateway.switch_provider']").click()
        expect(offer).to_be_hidden()
        expect(page.locator(".model-now")).to_have_attribute("data-provider", "ollama")
        listing = served.call(ADMIN, "llm_gateway", "list_providers")
        assert listing["active"]["provider"] == "ollama"
        [entry] = [p for p in listing["providers"] if p["name"] == "ollama"]
        assert (entry["kind"], entry["model"], entry["base_url"]) == (
            "ollama",
            "qwen2.5:0.5b",
            ollama.base_url,
        )

        page = admin.open("providers")  # a real model answers now: nothing to offer
        expect(page.locator(".local-offer")).to_have_attribute("data-detected", "none")
        expect(page.locator(".local-offer")).to_be_hidden()
    finally:
        admin.close()


def test_a_user_who_cannot_switch_is_not_offered(browser: Any, served: Server, ollama: FakeOllama) -> None:
    asked = ollama.tags_asked
    user = Dashboard(browser, served, USER)
    try:
        page = user.open("chat")
        expect(page.locator(".local-offer")).to_be_hidden()
        assert not page.locator(".local-offer").get_attribute("data-detected")  # not even asked
    finally:
        user.close()
    assert ollama.tags_asked == asked
