"""Outbound HTTP through named service links: the only way an actor reaches the network.

A link is declared in config with a base URL; an actor names the link and a path, never a URL, so it cannot
reach any other host. Credentials are attached here and never returned to the actor, logged, or left in an
error message.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urljoin, urlsplit

import httpx

from ._errors import ActorError, InvalidArgument, NotFound

log = logging.getLogger("minihermes.runtime.links")

_SAFE_RESPONSE_HEADERS = {"content-type", "content-length", "retry-after", "etag", "last-modified", "date"}


class LinkError(ActorError):
    code = "link_error"
    http_status = 502


@dataclass(slots=True)
class ServiceLink:
    name: str
    base_url: str
    methods: tuple[str, ...] = ("GET", "POST", "PUT", "PATCH", "DELETE")
    headers: dict[str, str] = field(default_factory=dict)
    credential_env: str | None = None
    """Environment variable holding a secret, sent as ``auth_header: auth_scheme <secret>``."""
    auth_header: str = "Authorization"
    auth_scheme: str = "Bearer"
    timeout: float = 30.0
    max_response_bytes: int = 5_000_000
    secret: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        parts = urlsplit(self.base_url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"service link {self.name}: base_url must be an absolute http(s) URL")
        if not self.base_url.endswith("/"):
            self.base_url += "/"
        if self.credential_env and self.secret is None:
            self.secret = os.environ.get(self.credential_env)


class ServiceLinks:
    """The node's declared links and one shared HTTP client."""

    def __init__(
        self, links: dict[str, ServiceLink], transport: httpx.AsyncBaseTransport | None = None
    ) -> None:
        self._links = links
        self._transport = transport
        self._client: httpx.AsyncClient | None = None

    def names(self) -> list[str]:
        return sorted(self._links)

    def secrets(self) -> list[str]:
        return [link.secret for link in self._links.values() if link.secret]

    def check(self, link_name: str, method: str, path: str) -> None:
        """Raise what ``fetch`` would for this target (an unknown link, a method it does not allow, a path
        that is not relative to it), without sending anything: for targets stored to be called later."""
        self._resolve(link_name, method, path)

    def _resolve(self, link_name: str, method: str, path: str) -> tuple[ServiceLink, str]:
        link = self._links.get(link_name)
        if link is None:
            raise NotFound(f"no service link named '{link_name}'", link=link_name)
        method = method.upper()
        if method not in link.methods:
            raise InvalidArgument(f"method {method} is not allowed on link '{link_name}'", field="method")
        if not isinstance(path, str) or "://" in path or path.startswith("//") or "\\" in path:
            raise InvalidArgument("path must be a relative path on the link", field="path")
        segments = path.split("?", 1)[0].split("/")
        if any(s in ("..", ".") or s.lower() in ("%2e%2e", "%2e") for s in segments):
            raise InvalidArgument("path must not contain '.' or '..' segments", field="path")
        url = urljoin(link.base_url, path.lstrip("/"))
        base, target = urlsplit(link.base_url), urlsplit(url)
        if (target.scheme, target.netloc) != (base.scheme, base.netloc) or not target.path.startswith(
            base.path
        ):
            raise InvalidArgument("path leaves the link's base URL", field="path")
        return link, url

    async def fetch(
        self,
        link_name: str,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        link, url = self._resolve(link_name, method, path)
        out_headers = {**link.headers, **(headers or {})}
        if any(k.lower() == link.auth_header.lower() for k in (headers or {})):
            raise InvalidArgument(f"the {link.auth_header} header is set by the link", field="headers")
        if link.secret:
            out_headers[link.auth_header] = f"{link.auth_scheme} {link.secret}".strip()
        if self._client is None:
            self._client = httpx.AsyncClient(transport=self._transport, follow_redirects=False)
        try:
            resp = await self._client.request(
                method.upper(), url, json=json, params=params, headers=out_headers, timeout=link.timeout
            )
        except httpx.TimeoutException:
            raise LinkError(f"link '{link_name}' timed out after {link.timeout:g}s", link=link_name) from None
        except httpx.HTTPError as e:
            raise LinkError(
                f"link '{link_name}' failed: {self._scrub(type(e).__name__)}", link=link_name
            ) from None
        body_bytes = resp.content[: link.max_response_bytes]
        body: Any
        if "json" in resp.headers.get("content-type", ""):
            try:
                body = resp.json()
            except ValueError:
                body = self._scrub(body_bytes.decode("utf-8", "replace"))
        else:
            body = self._scrub(body_bytes.decode("utf-8", "replace"))
        return {
            "status": resp.status_code,
            "headers": {k: v for k, v in resp.headers.items() if k.lower() in _SAFE_RESPONSE_HEADERS},
            "body": body,
        }

    def _scrub(self, text: str) -> str:
        for s in self.secrets():
            text = text.replace(s, "***")
        return text

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None


class RedactSecrets(logging.Filter):
    """A logging filter that replaces known secret values in every record with ***."""

    def __init__(self, secrets: list[str]) -> None:
        super().__init__()
        self.secrets = [s for s in secrets if s and len(s) >= 4]

    def filter(self, record: logging.LogRecord) -> bool:
        if not self.secrets:
            return True
        msg = record.getMessage()
        clean = msg
        for s in self.secrets:
            clean = clean.replace(s, "***")
        if clean != msg:
            record.msg, record.args = clean, None
        return True
