"""Outbound HTTP only through named service links; credentials never reach the actor, a reply or a log."""

from __future__ import annotations

import json
import logging
from typing import Any

import httpx
import pytest

from minihermes.runtime import (
    ActorSpec,
    GenServer,
    InvalidArgument,
    LinkError,
    NotFound,
    RedactSecrets,
    ServiceLink,
    ServiceLinks,
    call,
)

from .conftest import tree

SECRET = "sk-live-THIS-MUST-NEVER-LEAK-42"
SEEN: list[httpx.Request] = []


def handler(request: httpx.Request) -> httpx.Response:
    SEEN.append(request)
    if request.url.path.endswith("/echo-secret"):
        return httpx.Response(200, text=f"your key is {request.headers['authorization']}")
    if request.url.path.endswith("/slow"):
        raise httpx.ReadTimeout("timed out", request=request)
    return httpx.Response(
        200,
        json={"city": request.url.params.get("q"), "path": request.url.path},
        headers={"set-cookie": "session=abc", "x-internal": "1"},
    )


class Caller(GenServer):
    @call
    async def fetch(
        self,
        link: str,
        path: str,
        method: str = "GET",
        params: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> Any:
        return await self.host.http_fetch(link, method, path, params=params, headers=headers)


@pytest.fixture
def links(monkeypatch) -> ServiceLinks:
    SEEN.clear()
    monkeypatch.setenv("WEATHER_KEY", SECRET)
    link = ServiceLink(
        name="weather",
        base_url="https://api.weather.test/data/2.5",
        credential_env="WEATHER_KEY",
        methods=("GET",),
    )
    return ServiceLinks({"weather": link}, transport=httpx.MockTransport(handler))


async def _node(make_node, links):
    node = await make_node(tree(ActorSpec("caller", Caller)))
    node.links = links
    return node


async def test_fetch_attaches_the_credential_inside_and_filters_headers(make_node, links):
    node = await _node(make_node, links)
    got = await node.ask("caller", "fetch", {"link": "weather", "path": "/weather", "params": {"q": "Paris"}})
    assert got["status"] == 200 and got["body"] == {"city": "Paris", "path": "/data/2.5/weather"}
    assert "set-cookie" not in got["headers"] and "x-internal" not in got["headers"]
    assert SEEN[-1].headers["authorization"] == f"Bearer {SECRET}"
    assert str(SEEN[-1].url).startswith("https://api.weather.test/data/2.5/weather")
    assert SECRET not in json.dumps(got)


@pytest.mark.parametrize(
    "path",
    ["../../admin", "/data/../../x", "https://evil.test/x", "//evil.test/x", "/%2e%2e/x", "a\\..\\b", "./x"],
)
async def test_paths_cannot_leave_the_link(make_node, links, path):
    node = await _node(make_node, links)
    with pytest.raises(InvalidArgument):
        await node.ask("caller", "fetch", {"link": "weather", "path": path})
    assert SEEN == []


async def test_unknown_link_method_and_auth_override_are_refused(make_node, links):
    node = await _node(make_node, links)
    with pytest.raises(NotFound):
        await node.ask("caller", "fetch", {"link": "nope", "path": "/x"})
    with pytest.raises(InvalidArgument):
        await node.ask("caller", "fetch", {"link": "weather", "path": "/x", "method": "DELETE"})
    with pytest.raises(InvalidArgument):
        await node.ask(
            "caller", "fetch", {"link": "weather", "path": "/x", "headers": {"Authorization": "x"}}
        )


async def test_secret_is_scrubbed_from_bodies_errors_and_logs(make_node, links, caplog):
    node = await _node(make_node, links)
    got = await node.ask("caller", "fetch", {"link": "weather", "path": "/echo-secret"})
    assert SECRET not in got["body"] and "***" in got["body"]
    with pytest.raises(LinkError) as ei:
        await node.ask("caller", "fetch", {"link": "weather", "path": "/slow"})
    assert SECRET not in str(ei.value.to_dict())
    logger = logging.getLogger("minihermes.test.redact")
    logger.addFilter(RedactSecrets(links.secrets()))
    with caplog.at_level(logging.INFO, logger="minihermes.test.redact"):
        logger.info("calling with %s", SECRET)
    assert SECRET not in caplog.text and "***" in caplog.text
    assert SECRET not in repr(links._links["weather"])


def test_link_base_url_must_be_http():
    with pytest.raises(ValueError):
        ServiceLink(name="x", base_url="file:///etc/passwd")
