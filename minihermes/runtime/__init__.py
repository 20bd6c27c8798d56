"""The MiniHermes actor runtime: supervised, durable, tenant-scoped actors.

The runtime knows nothing about agents. Public names::

    from minihermes.runtime import GenServer, call, cast, state, Node, ...
"""

from ._actor import Actor, Op, OpParam, state
from ._actor import call as call
from ._actor import cast as cast
from ._app import build_node
from ._behaviors import GenEvent, GenFSM, GenServer, in_states
from ._cell import Cell, CellKey, Deferred
from ._clock import Clock, ManualClock, SystemClock
from ._config import (
    ActorArgs,
    AppConfig,
    ClusterModel,
    Duration,
    known_roles,
    parse_duration,
    register_actor_type,
)
from ._context import (
    DEFAULT_NAMESPACE,
    DEFAULT_TENANT,
    SYSTEM_CONTEXT,
    SYSTEM_TENANT,
    RequestContext,
    current_context,
    reset_context,
    set_context,
)
from ._datadir import DataDirBusy, DataDirLock, running_node
from ._directory import RegistryEntry
from ._errors import (
    ActorCrashed,
    ActorError,
    ActorNotFound,
    AskTimeout,
    ConfigError,
    Conflict,
    InvalidArgument,
    InvalidTransition,
    NotFound,
    Overloaded,
    PermissionDenied,
    ShuttingDown,
    UnknownOp,
    WorkflowCancelled,
)
from ._fabric import Fabric, FabricFactory, NodePort, fabric_names, get_fabric, open_fabric, register_fabric
from ._host import Host
from ._links import LinkError, RedactSecrets, ServiceLink, ServiceLinks
from ._loop import loop_name, tune_gc
from ._loop import run as run_loop
from ._metrics import Metrics
from ._node import MAX_KEY_CHARS, SYSTEM_SCOPE, Node, NodeOptions, valid_key
from ._pubsub import Bridge, PubSub, Subscription
from ._spec import ActorSpec, SupervisorSpec
from ._workflow import Workflow

__all__ = [
    "DEFAULT_NAMESPACE",
    "DEFAULT_TENANT",
    "MAX_KEY_CHARS",
    "SYSTEM_CONTEXT",
    "SYSTEM_SCOPE",
    "SYSTEM_TENANT",
    "Actor",
    "ActorArgs",
    "ActorCrashed",
    "ActorError",
    "ActorNotFound",
    "ActorSpec",
    "AppConfig",
    "AskTimeout",
    "Bridge",
    "Cell",
    "CellKey",
    "Clock",
    "ClusterModel",
    "ConfigError",
    "Conflict",
    "DataDirBusy",
    "DataDirLock",
    "Deferred",
    "Duration",
    "Fabric",
    "FabricFactory",
    "GenEvent",
    "GenFSM",
    "GenServer",
    "Host",
    "InvalidArgument",
    "InvalidTransition",
    "LinkError",
    "ManualClock",
    "Metrics",
    "Node",
    "NodeOptions",
    "NodePort",
    "NotFound",
    "Op",
    "OpParam",
    "Overloaded",
    "PermissionDenied",
    "PubSub",
    "RedactSecrets",
    "RegistryEntry",
    "RequestContext",
    "ServiceLink",
    "ServiceLinks",
    "ShuttingDown",
    "Subscription",
    "SupervisorSpec",
    "SystemClock",
    "UnknownOp",
    "Workflow",
    "WorkflowCancelled",
    "build_node",
    "call",
    "cast",
    "current_context",
    "fabric_names",
    "get_fabric",
    "in_states",
    "known_roles",
    "loop_name",
    "open_fabric",
    "parse_duration",
    "register_actor_type",
    "register_fabric",
    "reset_context",
    "run_loop",
    "running_node",
    "set_context",
    "state",
    "tune_gc",
    "valid_key",
]
