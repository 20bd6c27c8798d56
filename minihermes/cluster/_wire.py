"""What travels between nodes: signed JSON bodies, the subjects they travel on, and the KV key names.

Every body a node publishes (requests, replies, wake-ups, topic events) and every value it writes to the
cluster's KV buckets carries an HMAC-SHA256 over the subject (or key) and the bytes, keyed by the cluster
secret. NATS permissions already keep other users off the fabric's subjects; the MAC is the second lock: a
client that got onto the bus without the secret cannot make a node act for any tenant.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from typing import Any

import orjson

from minihermes.runtime import ActorError

SIG_HEADER = "Mh-Sig"
MAX_SKEW = 60.0
"""Seconds a signed body stays valid (clocks of the nodes may differ by this much)."""


class Unauthenticated(ActorError):
    """A fabric message without a valid signature from a node of this cluster."""

    code = "unauthenticated"


def digest(text: str, n: int = 16) -> str:
    """A short, subject- and key-safe name for arbitrary text (node ids, cell keys, topics)."""
    return hashlib.sha256(text.encode()).hexdigest()[:n]


class Subjects:
    """Subject and bucket names of one cluster; ``name`` keeps two clusters on one server apart."""

    def __init__(self, name: str) -> None:
        self.prefix = f"mh.{name}"
        self.requests_wildcard = f"{self.prefix}.req.*"
        self.channels = f"{self.prefix}.chan"
        self.reminders = f"{self.prefix}.rem"
        self.topics_wildcard = f"{self.prefix}.topic.*"
        self.nodes_bucket = f"mh_{name}_nodes"
        self.leases_bucket = f"mh_{name}_leases"

    def requests(self, node_id: str) -> str:
        return f"{self.prefix}.req.{digest(node_id)}"

    def topic(self, scope: tuple[str, str], topic: str) -> str:
        return f"{self.prefix}.topic.{digest(f'{scope[0]}/{scope[1]}/{topic}', 24)}"

    @staticmethod
    def node_key(node_id: str) -> str:
        return f"n.{digest(node_id)}"

    @staticmethod
    def lease_key(ck: tuple[tuple[str, str], str, str]) -> str:
        (tenant, ns), name, key = ck
        return f"l.{digest(orjson.dumps([tenant, ns, name, key]).decode(), 32)}"


class Signer:
    """Signs and checks fabric bodies with the cluster secret."""

    def __init__(self, secret: bytes) -> None:
        if len(secret) < 16:
            raise ValueError("the cluster secret must be at least 16 bytes")
        self._secret = secret

    def mac(self, where: str, data: bytes) -> str:
        return hmac.new(self._secret, where.encode() + b"\n" + data, hashlib.sha256).hexdigest()

    def seal(self, where: str, body: dict[str, Any]) -> tuple[bytes, dict[str, str]]:
        """Serialized body (stamped with the time) and the headers carrying its MAC."""
        body["ts"] = time.time()
        data = orjson.dumps(body)
        return data, {SIG_HEADER: self.mac(where, data)}

    def open(self, where: str, data: bytes, headers: dict[str, str] | None) -> dict[str, Any]:
        """The body if its MAC is right and it is recent; ``Unauthenticated`` otherwise."""
        sig = (headers or {}).get(SIG_HEADER, "")
        if not sig or not hmac.compare_digest(sig, self.mac(where, data)):
            raise Unauthenticated("fabric message without a valid cluster signature")
        body = orjson.loads(data)
        if not isinstance(body, dict) or abs(time.time() - float(body.get("ts", 0))) > MAX_SKEW:
            raise Unauthenticated("fabric message is stale or malformed")
        return body

    def seal_value(self, key: str, body: dict[str, Any]) -> bytes:
        """A KV value: the body with its MAC inside (KV entries carry no headers)."""
        body["ts"] = time.time()
        data = orjson.dumps(body)
        return orjson.dumps({"b": data.decode(), "s": self.mac(key, data)})

    def open_value(self, key: str, value: bytes | None) -> dict[str, Any] | None:
        """The body of a KV value, or None when it is missing, forged or malformed."""
        if not value:
            return None
        try:
            outer = orjson.loads(value)
            data = outer["b"].encode()
            if not hmac.compare_digest(str(outer["s"]), self.mac(key, data)):
                return None
            body = orjson.loads(data)
        except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError):
            return None
        return body if isinstance(body, dict) else None
