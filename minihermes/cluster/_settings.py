"""How a node joins the cluster: NATS server, credentials, TLS, the cluster secret and the timings."""

from __future__ import annotations

import os
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from minihermes.runtime import ConfigError

if TYPE_CHECKING:
    from minihermes.runtime import ClusterModel


@dataclass(frozen=True, slots=True)
class ClusterSettings:
    """Everything the fabric needs; ``from_model`` resolves a ``[cluster]`` section and the environment."""

    nats_url: str
    secret: bytes
    name: str = "minihermes"
    user: str | None = None
    password: str | None = None
    credentials_file: str | None = None
    tls_ca: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    heartbeat: float = 1.0
    node_ttl: float = 3.0

    def __post_init__(self) -> None:
        if self.node_ttl < 3 * self.heartbeat:
            raise ConfigError("cluster.node_ttl", "must be at least three times the heartbeat")
        if len(self.secret) < 16:
            raise ConfigError("cluster.secret", "the cluster secret must be at least 16 bytes")

    @classmethod
    def from_model(cls, m: ClusterModel, env: dict[str, str] | None = None) -> ClusterSettings:
        e = os.environ if env is None else env
        url = m.nats_url or e.get("MINIHERMES_NATS_URL")
        if not url:
            raise ConfigError("cluster.nats_url", "missing (or set MINIHERMES_NATS_URL)")
        if m.secret_file:
            try:
                secret = Path(m.secret_file).read_bytes().strip()
            except OSError as err:
                raise ConfigError("cluster.secret_file", f"cannot read: {err.strerror}") from None
        else:
            secret = e.get(m.secret_env, "").encode()
        if not secret:
            raise ConfigError("cluster.secret_env", f"no cluster secret: set {m.secret_env} or secret_file")
        user = m.user or e.get("MINIHERMES_NATS_USER") or None
        return cls(
            nats_url=url,
            secret=secret,
            name=m.name,
            user=user,
            password=e.get(m.password_env) or None,
            credentials_file=m.credentials_file or e.get("MINIHERMES_NATS_CREDS") or None,
            tls_ca=m.tls_ca,
            tls_cert=m.tls_cert,
            tls_key=m.tls_key,
            heartbeat=float(m.heartbeat),
            node_ttl=float(m.node_ttl),
        )

    def connect_options(self, node_id: str) -> dict[str, Any]:
        """Keyword arguments for ``nats.connect``."""
        opts: dict[str, Any] = {
            "servers": [u.strip() for u in self.nats_url.split(",") if u.strip()],
            "name": f"minihermes:{node_id}",
            "max_reconnect_attempts": -1,
            "reconnect_time_wait": 0.2,
            "connect_timeout": 5,
            "allow_reconnect": True,
        }
        if self.credentials_file:
            opts["user_credentials"] = self.credentials_file
        elif self.user:
            opts["user"] = self.user
            opts["password"] = self.password or ""
        if self.tls_ca or self.tls_cert:
            ctx = ssl.create_default_context(cafile=self.tls_ca)
            if self.tls_cert:
                ctx.load_cert_chain(self.tls_cert, self.tls_key)
            opts["tls"] = ctx
        return opts
