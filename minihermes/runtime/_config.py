"""The app config (TOML): node settings, retention, service links and the supervision tree, in the
``app-config.toml`` format of docs/configuration.md. A bad config fails at start-up with a message naming the field."""

from __future__ import annotations

import difflib
import importlib
import re
import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator

from ._actor import Actor
from ._errors import ConfigError
from ._links import ServiceLink
from ._node import NodeOptions
from ._spec import ActorSpec, SupervisorSpec
from .store import RetentionRule

_ACTOR_TYPES: dict[str, type[Actor]] = {}


def register_actor_type(role: str, cls: type[Actor]) -> None:
    """Make ``cls`` available to configs as ``role = "<role>"``."""
    if not (isinstance(cls, type) and issubclass(cls, Actor)):
        raise TypeError(f"{cls!r} is not an Actor class")
    _ACTOR_TYPES[role] = cls


def known_roles() -> list[str]:
    return sorted(_ACTOR_TYPES)


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}


def parse_duration(value: Any) -> float:
    """Seconds from 30, 2.5, "500ms", "30s", "10m", "1h", "7d"."""
    if isinstance(value, bool):
        raise ValueError("expected a duration")
    if isinstance(value, (int, float)):
        if value < 0:
            raise ValueError("duration must be >= 0")
        return float(value)
    if isinstance(value, str):
        m = _DURATION.match(value)
        if m:
            return float(m.group(1)) * _UNITS[m.group(2)]
    raise ValueError(f"expected a duration like 30, '500ms', '10m', '1h', got {value!r}")


Duration = Annotated[float, BeforeValidator(parse_duration)]
"""Seconds, given as 30, 2.5, "500ms", "10m", "1h" (``parse_duration``): for ``ActorArgs`` fields."""


class ActorArgs(BaseModel):
    """Base of an actor's ``Args`` model: unknown keys are errors (see ``Actor.Args``)."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class FacetModel(_Model):
    type: Literal["virtual_actor", "durability", "tenancy", "mailbox", "restart_intensity"]
    priority: int = 0
    config: dict[str, Any] = Field(default_factory=dict)


class ChildModel(_Model):
    name: str = Field(pattern=r"^[A-Za-z][A-Za-z0-9_\-]{0,63}$")
    role: str | None = None
    actor_type: str | None = None
    behavior_kind: Literal["GenServer", "GenEvent", "GenFSM", "Workflow"] | None = None
    restart: Literal["permanent", "transient", "temporary"] = "permanent"
    args: dict[str, Any] = Field(default_factory=dict)
    facets: list[FacetModel] = Field(default_factory=list)
    supervisor: SupervisorModel | None = None


class SupervisorModel(_Model):
    strategy: Literal["one_for_one", "rest_for_one", "one_for_all"] = "one_for_one"
    max_restarts: int = Field(default=10, ge=0)
    max_restart_window_seconds: float = Field(default=60.0, gt=0)
    children: list[ChildModel] = Field(default_factory=list)


class NodeModel(_Model):
    id: str = Field(default="node-1", pattern=r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$")
    data_dir: str = "./data"
    backend: str = "sqlite"
    backend_options: dict[str, Any] = Field(default_factory=dict)
    mailbox_capacity: int = Field(default=1000, ge=1)
    max_inflight: int = Field(default=10_000, ge=1)
    tenant_max_share: float = Field(default=0.5, gt=0, le=1)
    ask_timeout_seconds: float = Field(default=30.0, gt=0)
    shutdown_deadline_seconds: float = Field(default=10.0, ge=0)
    inline_calls: bool = True
    shared_data_dir: bool = False
    """Several node processes on this SQLite data dir on purpose (each its own ``id``): no data-dir lock."""


class RuleModel(_Model):
    kind: Literal["events", "dead_letters", "kv", "blobs", "tuples", "quarantine", "checkpoints"]
    selector: str = "*"
    max_age: Any = None
    max_count: int | None = Field(default=None, ge=0)
    event_types: list[str] = Field(default_factory=list)
    """kind "events": remove the content of these kinds' entries instead of trimming the stream."""

    @field_validator("max_age")
    @classmethod
    def _age(cls, v: Any) -> float | None:
        return None if v is None else parse_duration(v)


class RetentionModel(_Model):
    interval: Any = "1h"
    rules: list[RuleModel] = Field(default_factory=list)

    @field_validator("interval")
    @classmethod
    def _interval(cls, v: Any) -> float:
        return parse_duration(v)


class LinkModel(_Model):
    base_url: str
    methods: list[str] = Field(default_factory=lambda: ["GET", "POST", "PUT", "PATCH", "DELETE"])
    headers: dict[str, str] = Field(default_factory=dict)
    credential_env: str | None = None
    auth_header: str = "Authorization"
    auth_scheme: str = "Bearer"
    timeout: Any = 30.0
    max_response_bytes: int = Field(default=5_000_000, ge=1)

    @field_validator("timeout")
    @classmethod
    def _timeout(cls, v: Any) -> float:
        return parse_duration(v)


class ClusterModel(_Model):
    """``[cluster]``: join other nodes over NATS (see docs/cluster.md). Off unless ``enabled``; the URL, user,
    password and secret may come from the environment (``MINIHERMES_NATS_URL``, ...) instead."""

    enabled: bool = False
    fabric: str = "nats"
    """The fabric, by name (``minihermes.runtime.register_fabric``); the built-in one is ``nats``."""
    name: str = Field(default="minihermes", pattern=r"^[A-Za-z0-9][A-Za-z0-9_\-]{0,31}$")
    nats_url: str | None = None
    user: str | None = None
    password_env: str = "MINIHERMES_NATS_PASSWORD"
    credentials_file: str | None = None
    """A NATS ``.creds`` file (JWT + nkey seed) instead of user/password."""
    secret_env: str = "MINIHERMES_CLUSTER_SECRET"
    secret_file: str | None = None
    """The cluster secret (HMAC key over every fabric message): this file, else the env variable."""
    tls_ca: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    heartbeat: Any = 1.0
    node_ttl: Any = 3.0
    """A node whose heartbeat is this old is dead: its actors may be activated elsewhere (>= 3 heartbeats)."""

    @field_validator("heartbeat", "node_ttl")
    @classmethod
    def _durations(cls, v: Any) -> float:
        d = parse_duration(v)
        if d <= 0:
            raise ValueError("must be > 0")
        return d


class HttpModel(_Model):
    """``[http]``: the HTTP API's load shedding (``minihermes.api.SheddingConfig``; docs/configuration.md).
    Unset limits are derived from the machine when the server starts."""

    load_shedding: bool = True
    max_concurrent_requests: int | None = Field(default=None, ge=1)
    max_queued_requests: int | None = Field(default=None, ge=0)
    queue_timeout: Any = 10.0
    tenant_max_share: float = Field(default=0.5, gt=0, le=1)
    idempotency_window: Any = 86400.0
    """How long an ``Idempotency-Key`` is remembered (``minihermes.api``'s ``idempotency_window``)."""

    @field_validator("queue_timeout", "idempotency_window")
    @classmethod
    def _queue_timeout(cls, v: Any) -> float:
        d = parse_duration(v)
        if d <= 0:
            raise ValueError("must be > 0")
        return d


class AppModel(_Model):
    node: NodeModel = Field(default_factory=NodeModel)
    http: HttpModel = Field(default_factory=HttpModel)
    cluster: ClusterModel = Field(default_factory=ClusterModel)
    retention: RetentionModel = Field(default_factory=RetentionModel)
    service_links: dict[str, LinkModel] = Field(default_factory=dict)
    supervisor: SupervisorModel = Field(default_factory=SupervisorModel)


class AppConfig:
    """A validated app config: what ``Node`` needs, built from TOML."""

    def __init__(self, model: AppModel, source: str = "<config>") -> None:
        self.model = model
        self.source = source
        self.tree = _build_supervisor("supervisor", "root", model.supervisor, "permanent")
        self._node_options: NodeOptions | None = None
        self.links: dict[str, ServiceLink] = {}
        for name, link in model.service_links.items():
            try:
                self.links[name] = ServiceLink(
                    name=name,
                    base_url=link.base_url,
                    methods=tuple(m.upper() for m in link.methods),
                    headers=link.headers,
                    credential_env=link.credential_env,
                    auth_header=link.auth_header,
                    auth_scheme=link.auth_scheme,
                    timeout=link.timeout,
                    max_response_bytes=link.max_response_bytes,
                )
            except ValueError as e:
                raise ConfigError(f"service_links.{name}.base_url", str(e)) from None

    @property
    def node_options(self) -> NodeOptions:
        """Built from the model when read, so changes to ``model.node`` after loading take effect; an
        assigned NodeOptions replaces them."""
        if self._node_options is not None:
            return self._node_options
        n, retention = self.model.node, self.model.retention
        return NodeOptions(
            node_id=n.id,
            mailbox_capacity=n.mailbox_capacity,
            max_inflight=n.max_inflight,
            tenant_max_share=n.tenant_max_share,
            ask_timeout=n.ask_timeout_seconds,
            shutdown_deadline=n.shutdown_deadline_seconds,
            inline_calls=n.inline_calls,
            retention=[
                RetentionRule(r.kind, r.selector, r.max_age, r.max_count, tuple(r.event_types))
                for r in retention.rules
            ],
            retention_interval=retention.interval,
        )

    @node_options.setter
    def node_options(self, value: NodeOptions) -> None:
        self._node_options = value

    @property
    def data_dir(self) -> Path:
        return Path(self.model.node.data_dir)

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "<config>") -> AppConfig:
        try:
            model = AppModel.model_validate(data)
        except ValidationError as e:
            first = e.errors()[0]
            raise ConfigError(_loc(first.get("loc", ())), str(first.get("msg"))) from None
        return cls(model, source)

    @classmethod
    def from_toml(cls, text: str, source: str = "<config>") -> AppConfig:
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(source, f"invalid TOML: {e}") from None
        return cls.from_dict(data, source)

    @classmethod
    def load(cls, path: str | Path) -> AppConfig:
        p = Path(path)
        try:
            text = p.read_text(encoding="utf-8")
        except OSError as e:
            raise ConfigError(str(p), f"cannot read: {e.strerror}") from None
        return cls.from_toml(text, str(p))


def _loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "<root>"


def _resolve_role(where: str, role: str) -> type[Actor]:
    cls = _ACTOR_TYPES.get(role)
    if cls is not None:
        return cls
    if ":" in role:
        module, _, attr = role.partition(":")
        try:
            obj = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as e:
            raise ConfigError(where, f"cannot import {role!r}: {e}") from None
        if isinstance(obj, type) and issubclass(obj, Actor):
            return obj
        raise ConfigError(where, f"{role!r} is not an Actor class")
    hint = difflib.get_close_matches(role, list(_ACTOR_TYPES), n=1)
    extra = f"; did you mean {hint[0]!r}?" if hint else ""
    raise ConfigError(where, f"unknown role {role!r} (known: {', '.join(known_roles()) or 'none'}){extra}")


def _build_supervisor(where: str, name: str, m: SupervisorModel, restart: str) -> SupervisorSpec:
    children: list[ActorSpec | SupervisorSpec] = []
    seen: set[str] = set()
    for i, c in enumerate(m.children):
        at = f"{where}.children[{i}]"
        if c.name in seen:
            raise ConfigError(f"{at}.name", f"duplicate child name {c.name!r}")
        seen.add(c.name)
        if c.supervisor is not None:
            if c.role:
                raise ConfigError(at, "a child has either a role or a supervisor, not both")
            children.append(_build_supervisor(f"{at}.supervisor", c.name, c.supervisor, c.restart))
        else:
            children.append(_build_actor(at, c))
    return SupervisorSpec(
        name=name,
        strategy=m.strategy,
        max_restarts=m.max_restarts,
        max_restart_window=m.max_restart_window_seconds,
        children=children,
        restart=restart,  # type: ignore[arg-type]
    )


def _build_actor(at: str, c: ChildModel) -> ActorSpec:
    role = c.role or c.actor_type
    if not role:
        raise ConfigError(f"{at}.role", "missing (which actor class runs here)")
    cls = _resolve_role(f"{at}.role", role)
    if c.behavior_kind and c.behavior_kind != cls.behavior:
        raise ConfigError(
            f"{at}.behavior_kind", f"{c.behavior_kind!r} does not match {cls.__name__} (a {cls.behavior})"
        )
    _check_args(f"{at}.args", cls, c.args)
    spec = ActorSpec(name=c.name, cls=cls, args=dict(c.args), restart=c.restart)
    for j, f in enumerate(sorted(c.facets, key=lambda f: -f.priority)):
        fat = f"{at}.facets[{c.facets.index(f)}].config"
        cfg = dict(f.config)
        try:
            if f.type == "virtual_actor":
                spec.virtual = True
                spec.key_field = _opt_str(cfg.pop("key_field", None), "key_field")
                if "idle_timeout" in cfg:
                    spec.idle_timeout = parse_duration(cfg.pop("idle_timeout"))
                act = cfg.pop("activation_strategy", "lazy")
                if act not in ("lazy", "eager"):
                    raise ValueError("activation_strategy must be 'lazy' or 'eager'")
                spec.activation = act
            elif f.type == "durability":
                if "checkpoint_interval" in cfg:
                    spec.checkpoint_interval = _pos_int(cfg.pop("checkpoint_interval"), "checkpoint_interval")
            elif f.type == "tenancy":
                spec.per_tenant = _bool(cfg.pop("per_tenant", True), "per_tenant")
            elif f.type == "mailbox":
                spec.mailbox_capacity = _pos_int(cfg.pop("capacity"), "capacity")
            elif f.type == "restart_intensity":
                spec.max_restarts = _pos_int(cfg.pop("max_restarts", spec.max_restarts), "max_restarts")
                spec.max_restart_window = parse_duration(cfg.pop("window", spec.max_restart_window))
        except KeyError as e:
            raise ConfigError(f"{fat}.{e.args[0]}", "missing") from None
        except ValueError as e:
            raise ConfigError(fat, str(e)) from None
        if cfg:
            raise ConfigError(f"{fat}.{next(iter(cfg))}", f"unknown setting for facet {f.type!r}")
        del j
    if spec.virtual and spec.per_tenant:
        raise ConfigError(f"{at}.facets", "virtual actors are already per tenant; drop the tenancy facet")
    return spec


def _check_args(where: str, cls: type[Actor], args: dict[str, Any]) -> None:
    """``args`` against ``cls.Args`` (if it declares one); a ``ConfigError`` naming the first bad key and
    every known one. Checked only: the actor's ``on_init`` gets the args as written."""
    model = cls.Args
    if model is None:
        return
    try:
        model.model_validate(args)
    except ValidationError as e:
        first = e.errors()[0]
        loc = tuple(first.get("loc", ()))
        known = ", ".join(model.model_fields) or "none"
        at = f"{where}.{_loc(loc)}" if loc else where
        if first.get("type") == "extra_forbidden":
            raise ConfigError(at, f"unknown argument of {cls.__name__} (known: {known})") from None
        raise ConfigError(at, f"{first.get('msg')} (known: {known})") from None


def _pos_int(v: Any, name: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValueError(f"{name} must be a positive integer")
    return v


def _bool(v: Any, name: str) -> bool:
    if not isinstance(v, bool):
        raise ValueError(f"{name} must be true or false")
    return v


def _opt_str(v: Any, name: str) -> str | None:
    if v is not None and not isinstance(v, str):
        raise ValueError(f"{name} must be a string")
    return v


ChildModel.model_rebuild()
