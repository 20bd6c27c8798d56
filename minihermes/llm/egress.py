"""Where a URL a tenant names may make the node connect: the SSRF guard of provider ``base_url`` and MCP ``url``.

On a node that serves tenants who do not own the machine, a tenant admin names URLs the node then connects
to (an LLM provider's ``base_url``, an MCP server's ``url``). Left open, that reaches what only the machine
should: the node's own admin ports on loopback, cloud metadata (169.254.169.254), services on the host's
private network. ``EgressPolicy`` says what such a URL may reach: any public address, and a loopback,
link-local, private (RFC 1918, fc00::/7, 100.64/10), multicast, unspecified or reserved one only where the
node's operator lists it (``allowed_egress``: ``"host:port"``, ``"host"``, ``"[v6]:port"``, a CIDR network,
or ``"*"`` for anything, which one-owner nodes get). IPv6 forms that embed an IPv4 address (mapped,
6to4, Teredo, NAT64) are judged by that address.

Checked twice:

- **when the URL is registered** (``check_url``): an IP literal, or every address its name resolves to, must
  be allowed, else ``PermissionDenied`` naming the setting. A name that does not resolve now is accepted:
  it reaches nothing yet, and the connection is checked anyway.
- **at every request** (``httpx_transport`` / ``httpx2_transport``, an HTTP transport the provider
  adapters and the MCP client are built with): the name is resolved, every address checked, and the
  request sent to the checked address itself (the URL's host pinned to it, TLS still verified against the
  name through ``sni_hostname``), so a DNS answer that changes between the check and the connection
  (rebinding) cannot slip a forbidden address in. A redirect is a new request through the same transport:
  it is refused before connecting when it points at a forbidden address, whichever client follows it.

Not covered: a name the operator lists is connected as it resolves (the operator vouches for it); a
provider kind added outside the package whose client does not use these transports is checked only at
registration and by ``llm_gateway`` before it builds a client; proxies are not used by guarded clients
(an explicit transport makes httpx ignore ``HTTP(S)_PROXY``); ``minihermes doctor`` probes as the
operator, unguarded. The sandbox has no network at all; service links are the operator's own URLs.
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import re
import socket
import time
from dataclasses import dataclass
from types import ModuleType
from typing import Any
from urllib.parse import urlsplit

from minihermes.runtime import PermissionDenied

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

ENV_VAR = "MINIHERMES_ALLOWED_EGRESS"
"""The node-wide default of every ``allowed_egress`` arg (comma-separated entries), read by the app."""
RESOLVE_TIMEOUT = 5.0
_PIN_SECONDS = 10.0
"""How long a transport reuses an address it checked (it connects to that address, never re-resolved)."""
_HOST = re.compile(r"^[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,251}[A-Za-z0-9_])?$")
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


class EgressRefused(Exception):
    """A connection the policy forbids; the message names the address, why, and the setting."""


@dataclass(frozen=True)
class EgressPolicy:
    """What a tenant-set URL may reach (see the module docstring). ``setting`` names where the operator
    widens it, for error messages."""

    allow_all: bool = False
    hosts: frozenset[tuple[str, int | None]] = frozenset()
    networks: tuple[IPNetwork, ...] = ()
    setting: str = "allowed_egress"
    entries: tuple[str, ...] = ()
    """The entries as the operator wrote them."""

    @classmethod
    def parse(cls, entries: list[str] | tuple[str, ...] | None, setting: str) -> EgressPolicy:
        """The policy of an ``allowed_egress`` list (None: public addresses only); ``ValueError`` naming a bad
        entry."""
        if entries is None:
            return cls(setting=setting)
        if isinstance(entries, str) or not isinstance(entries, list | tuple):
            raise ValueError('must be a list of "host:port", "host", CIDR networks or "*"')
        hosts: set[tuple[str, int | None]] = set()
        networks: list[IPNetwork] = []
        for entry in entries:
            if not isinstance(entry, str) or not entry.strip():
                raise ValueError(f"{entry!r} is not a host, host:port, network or '*'")
            text = entry.strip()
            if text == "*":
                return cls(allow_all=True, setting=setting, entries=("*",))
            if "/" in text:
                try:
                    networks.append(ipaddress.ip_network(text, strict=False))
                except ValueError:
                    raise ValueError(f"{text!r} is not a network (e.g. 10.0.0.0/8, fd00::/8)") from None
                continue
            hosts.add(_host_entry(text))
        return cls(
            hosts=frozenset(hosts),
            networks=tuple(networks),
            setting=setting,
            entries=tuple(str(e).strip() for e in entries),
        )

    def names(self, host: str, port: int) -> bool:
        """The operator listed this name (or literal address) for this port, or for any port."""
        key = _normal(host)
        return (key, port) in self.hosts or (key, None) in self.hosts

    def why_not(self, address: IPAddress, port: int) -> str | None:
        """Why a connection to ``address:port`` is refused (``"loopback"``, ``"private"``, ...), or None."""
        if self.allow_all:
            return None
        kind = forbidden_kind(address)
        if kind is None or any(address in net for net in self.networks):
            return None
        if (str(address), port) in self.hosts or (str(address), None) in self.hosts:
            return None
        return kind

    async def address_for(self, host: str, port: int, *, what: str = "") -> str | None:
        """The checked address to connect to for ``host:port``; None when the host may be connected as it is
        (everything allowed, or a name the operator listed). ``EgressRefused`` when the host is, or resolves
        to, any address this policy forbids; ``OSError`` when the name does not resolve."""
        if self.allow_all or self.names(host, port):
            return None
        literal = _literal(host)
        addresses = [literal] if literal is not None else await resolve(host, port)
        for address in addresses:
            kind = self.why_not(address, port)
            if kind is not None:
                raise EgressRefused(self.refusal(host, address, kind, what))
        return str(addresses[0])

    def refusal(self, host: str, address: IPAddress, kind: str, what: str = "") -> str:
        said = f"{host}" if _literal(host) is not None else f"{host} (resolves to {address})"
        return (
            f"{what or 'the URL'} names {said}, a {kind} address, which this node does not let tenants reach; "
            f"the node's operator may allow it with {self.setting}"
        )


def _normal(host: str) -> str:
    literal = _literal(host)
    return str(literal) if literal is not None else host.lower().rstrip(".")


def _literal(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host.strip("[]").split("%", 1)[0])
    except ValueError:
        return None


def _host_entry(text: str) -> tuple[str, int | None]:
    host, port = text, ""
    if text.startswith("["):
        inner, bracket, rest = text[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            raise ValueError(f"{text!r} is not [address]:port")
        host, port = inner, rest[1:]
    elif text.count(":") == 1:
        host, port = text.split(":")
    number: int | None = None
    if port or text.endswith(":"):
        if not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{text!r}: the port must be 1-65535")
        number = int(port)
    if _literal(host) is None and not _HOST.match(host):
        raise ValueError(f"{text!r} is not a host name or address")
    return _normal(host), number


def forbidden_kind(address: IPAddress) -> str | None:
    """What makes ``address`` internal (``"loopback"``, ``"link-local"``, ``"private"``, ``"multicast"``,
    ``"unspecified"``, ``"reserved"``), or None for a public address."""
    if isinstance(address, ipaddress.IPv6Address):
        embedded = address.ipv4_mapped or address.sixtofour or (address.teredo or (None, None))[1]
        if embedded is None and address in _NAT64:
            embedded = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        if embedded is not None:  # the packet goes to the IPv4 address inside
            return forbidden_kind(embedded)
    if address.is_unspecified:
        return "unspecified"
    if address.is_loopback:
        return "loopback"
    if address.is_link_local:
        return "link-local"
    if address.is_multicast:
        return "multicast"
    if address.is_reserved:
        return "reserved"
    if address.is_private:
        return "private"
    if not address.is_global:
        return "reserved"
    return None


async def resolve(host: str, port: int, timeout: float = RESOLVE_TIMEOUT) -> list[IPAddress]:
    """Every address ``host`` resolves to (in the resolver's order); ``OSError`` when it does not resolve."""
    loop = asyncio.get_running_loop()
    try:
        infos = await asyncio.wait_for(
            loop.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP), timeout
        )
    except TimeoutError:
        raise OSError(f"resolving {host} took longer than {timeout:g}s") from None
    out: list[IPAddress] = []
    for *_, sockaddr in infos:
        address = ipaddress.ip_address(str(sockaddr[0]).split("%", 1)[0])
        if address not in out:
            out.append(address)
    if not out:
        raise OSError(f"{host} resolves to no address")
    return out


async def check_url(url: str, policy: EgressPolicy, *, op: str, field: str, what: str = "") -> None:
    """``PermissionDenied`` (naming ``field`` and the policy's setting) when ``url``'s host is, or resolves to,
    an address ``policy`` forbids. A name that does not resolve passes: the connection is checked again."""
    if policy.allow_all:
        return
    parts = urlsplit(url)
    host = parts.hostname or ""
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        port = 443 if parts.scheme == "https" else 80
    try:
        await policy.address_for(host, port, what=what or field)
    except EgressRefused as refused:
        raise PermissionDenied(f"{op}: {refused}", op=op, field=field) from None
    except OSError:
        return


def split_env(value: str) -> list[str]:
    """The entries of ``MINIHERMES_ALLOWED_EGRESS`` (separated by commas or spaces)."""
    return [part for part in re.split(r"[,\s]+", value) if part]


# -- guarded HTTP transports --------------------------------------------------------------------------


class _GuardedTransport:
    """An async transport of ``httpx`` or ``httpx2`` that checks every request's address (see the module
    docstring) and sends the request to that address; a refusal is the library's ``ConnectError``."""

    def __init__(self, lib: ModuleType, policy: EgressPolicy, inner: Any) -> None:
        self._lib = lib
        self._policy = policy
        self._inner = inner
        self._pinned: dict[tuple[str, int], tuple[float, str | None]] = {}

    async def _address(self, host: str, port: int) -> str | None:
        now = time.monotonic()
        cached = self._pinned.get((host, port))
        if cached is not None and cached[0] > now:
            return cached[1]
        address = await self._policy.address_for(host, port)
        if len(self._pinned) > 64:
            self._pinned.clear()
        self._pinned[(host, port)] = (now + _PIN_SECONDS, address)
        return address

    async def handle_async_request(self, request: Any) -> Any:
        url = request.url
        port = url.port or (443 if url.scheme == "https" else 80)
        try:
            address = await self._address(url.host, port)
        except EgressRefused as refused:
            raise self._lib.ConnectError(str(refused), request=request) from None
        except OSError as e:
            raise self._lib.ConnectError(f"cannot resolve {url.host}: {e}", request=request) from None
        if address is None or address == url.host:
            return await self._inner.handle_async_request(request)
        pinned = self._lib.Request(
            request.method,
            url.copy_with(host=address),
            headers=request.headers,  # keeps Host: the name
            stream=request.stream,
            extensions={**request.extensions, "sni_hostname": url.host},
        )
        return await self._inner.handle_async_request(pinned)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> _GuardedTransport:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self._inner.__aexit__(*exc)


@functools.cache
def _subclass(lib: ModuleType) -> type[_GuardedTransport]:
    # A subclass of the library's own base class too, for code that checks ``isinstance`` on transports.
    return type("GuardedTransport", (_GuardedTransport, lib.AsyncBaseTransport), {})


def _transport(lib: ModuleType, policy: EgressPolicy, verify: Any, limits: Any) -> Any:
    options: dict[str, Any] = {"verify": verify}
    if limits is not None:
        options["limits"] = limits
    return _subclass(lib)(lib, policy, lib.AsyncHTTPTransport(**options))


def httpx_transport(policy: EgressPolicy, *, verify: Any = True, limits: Any = None) -> Any:
    """An ``httpx.AsyncBaseTransport`` that connects only where ``policy`` allows."""
    import httpx

    return _transport(httpx, policy, verify, limits)


def httpx2_transport(policy: EgressPolicy, *, verify: Any = True, limits: Any = None) -> Any:
    """The same for ``httpx2`` (the official SDKs' and the MCP client's HTTP library)."""
    import httpx2

    return _transport(httpx2, policy, verify, limits)


__all__ = [
    "ENV_VAR",
    "EgressPolicy",
    "EgressRefused",
    "check_url",
    "forbidden_kind",
    "httpx2_transport",
    "httpx_transport",
    "resolve",
    "split_env",
]
