"""Actor classes: declared durable state, named handlers, and their argument checking.

An actor is a class deriving from one of the behaviors (``GenServer``, ``GenEvent``, ``GenFSM``,
``Workflow``). Durable fields are declared with ``state()``; handlers with ``@call`` (request-reply, reached by
``ask``) and ``@cast`` (fire-and-forget, reached by ``send``)::

    class Counter(GenServer):
        count: int = state(default=0)

        @call
        def add(self, amount: int = 1) -> dict:
            self.count += amount
            return {"count": self.count}

Handler parameters are the op's arguments: a parameter without a default is required, and every argument is
checked against its annotation before the handler runs, so a handler never sees a missing or mistyped value.
A handler whose only parameter is a pydantic model (``async def store(self, args: StoreArgs)``) gets the
whole payload validated as that model instead.

``Actor.ops()`` lists a class's ops (``Op``: name, kind, arguments, declared access, ...): what the HTTP
catalog, the CLI and the permission model read.
"""

from __future__ import annotations

import inspect
import json
import sys
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from itertools import repeat
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar, Literal, TypeVar, overload

import orjson

from ._errors import InvalidArgument

if TYPE_CHECKING:
    from pydantic import BaseModel

    from ._host import Host

F = TypeVar("F", bound=Callable[..., Any])
_MISSING: Any = object()


# ------------------------------------------------------------------------------------------------ state fields


class StateField:
    """Marks a class attribute as durable actor state (checkpointed and restored)."""

    __slots__ = ("append_only", "default", "default_factory", "name", "type")

    def __init__(
        self, default: Any, default_factory: Callable[[], Any] | None, append_only: bool = False
    ) -> None:
        self.default = default
        self.default_factory = default_factory
        self.name = ""
        self.type: Any = Any
        self.append_only = append_only

    def make_default(self) -> Any:
        if self.default_factory is not None:
            return self.default_factory()
        return self.default


def state(
    default: Any = None, *, default_factory: Callable[[], Any] | None = None, append_only: bool = False
) -> Any:
    """Declare a durable state field. Values must be JSON-serializable.

    ``append_only=True`` (a list, ``default_factory=list``): the list only grows by appending, or is
    replaced as a whole; each checkpoint then writes the items appended since the previous one instead of
    the whole list (``runtime._statelog``: what it relies on)."""
    if default_factory is None and isinstance(default, (list, dict, set)):
        raise TypeError("mutable state defaults must use default_factory=")
    if append_only and default_factory is not list:
        raise TypeError("an append-only state field is a list: declare it with default_factory=list")
    return StateField(default, default_factory, append_only)


# ------------------------------------------------------------------------------------------------ handlers


Checker = Callable[[str, str, Any], Any]
"""check(op, field, value) -> value (possibly converted); raises InvalidArgument."""


@dataclass(slots=True)
class Param:
    name: str
    required: bool
    default: Any
    check: Checker | None


@dataclass(slots=True)
class Handler:
    op: str
    kind: Literal["call", "cast"]
    fn: Callable[..., Any]
    is_async: bool
    params: dict[str, Param]
    var_kw: bool
    internal: bool = False
    states: frozenset[str] | None = None
    """GenFSM: the states this handler is allowed in (``in_states``)."""
    inline: bool = False
    """A plain (not async) handler: a call (``ask``) or a cast (``send``) runs in its sender's task when the
    actor is idle (``Cell.call_inline``)."""
    access: str | None = None
    """The access class the op declares (``@call(access="read")``): who may call it from outside, read by
    the permission model (``minihermes.permissions``) when it builds a node's table, never per message.
    None: undeclared (admin-only unless the table classifies it)."""
    concurrent: bool = False
    """A call that runs at once beside whatever handler the actor is running, never queued behind it
    (``@call(concurrent=True)``; see ``call``)."""
    model: type[BaseModel] | None = None
    """The handler's only parameter is this pydantic model: the payload is validated as it (``bind``)."""
    model_param: str = ""
    """The name of that parameter."""

    def bind(self, payload: dict[str, Any]) -> dict[str, Any]:
        """Check payload against the signature; returns the keyword arguments for the handler."""
        if not isinstance(payload, dict):
            raise InvalidArgument(f"{self.op}: arguments must be an object", op=self.op)
        if self.model is not None:
            return {self.model_param: _validate_model(self.op, self.model, payload)}
        params = self.params
        kwargs: dict[str, Any] = {}
        for key, value in payload.items():
            p = params.get(key)
            if p is None:
                if key == "op" or self.var_kw:
                    if key != "op":
                        kwargs[key] = value
                    continue
                raise InvalidArgument(
                    f"{self.op}: unknown argument '{key}' (expected: {', '.join(params) or 'none'})",
                    op=self.op,
                    field=key,
                )
            kwargs[key] = value if p.check is None else p.check(self.op, key, value)
        if len(kwargs) < len(params):
            for p in params.values():
                if p.required and p.name not in kwargs:
                    raise InvalidArgument(
                        f"{self.op}: missing required argument '{p.name}'", op=self.op, field=p.name
                    )
        return kwargs

    def unbind(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        """The payload ``bind`` made ``kwargs`` from, to pass a message on (a GenEvent forwarding it)."""
        if self.model is not None:
            return kwargs[self.model_param].model_dump()  # type: ignore[no-any-return]
        return dict(kwargs)


def _validate_model(op: str, model: type[BaseModel], payload: dict[str, Any]) -> BaseModel:
    """``payload`` as ``model``: an ``InvalidArgument`` naming the first bad field, as the per-parameter
    checks do. Unknown keys are refused whatever the model's ``extra`` (``op`` is ignored) unless it is
    ``"allow"``."""
    from pydantic import ValidationError

    if "op" in payload:
        payload = {k: v for k, v in payload.items() if k != "op"}
    if model.model_config.get("extra") != "allow":
        fields = model.model_fields
        for key in payload:
            if key not in fields:
                raise InvalidArgument(
                    f"{op}: unknown argument '{key}' (expected: {', '.join(fields) or 'none'})",
                    op=op,
                    field=key,
                )
    try:
        return model.model_validate(payload)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ()))
        if first.get("type") == "missing":
            raise InvalidArgument(f"{op}: missing required argument '{where}'", op=op, field=where) from None
        raise InvalidArgument(f"{op}: argument '{where}': {first.get('msg')}", op=op, field=where) from None


@overload
def call(fn: F, /) -> F: ...
@overload
def call(
    *, name: str | None = None, access: str | None = None, concurrent: bool = False
) -> Callable[[F], F]: ...
def call(
    fn: Any = None, /, *, name: str | None = None, access: str | None = None, concurrent: bool = False
) -> Any:
    """Declare a request-reply handler (reached with ``ask``). ``access``: the op's access class
    (``read``, ``write``, ``observe`` or ``admin``; see ``minihermes.permissions``).

    ``concurrent=True``: while the instance runs, the call is handled at once in the caller's task, beside
    the handler the actor may be running, instead of waiting in the mailbox behind it (an actor not active
    yet is activated through its mailbox as usual). For ops that signal a long-running handler (stopping
    a turn): such a handler shares the instance with the running one, so it must not rely on the mailbox's
    one-at-a-time order, and saves what it changes itself (``host.save_soon``, ``host.wait_saved``)."""
    deco = _mark(fn, "call", name, access)
    if concurrent:
        if fn is not None:
            raise TypeError("concurrent= needs the decorator form: @call(concurrent=True)")
        mark = deco

        def deco(f: Any) -> Any:
            f.__minihermes_concurrent__ = True
            return mark(f)

    return deco


@overload
def cast(fn: F, /) -> F: ...
@overload
def cast(*, name: str | None = None, access: str | None = None) -> Callable[[F], F]: ...
def cast(fn: Any = None, /, *, name: str | None = None, access: str | None = None) -> Any:
    """Declare a fire-and-forget handler (reached with ``send``; ``ask`` gets ``{"status": "accepted"}``).
    ``access`` as for ``call``."""
    return _mark(fn, "cast", name, access)


def _mark(fn: Any, kind: str, name: str | None, access: str | None = None) -> Any:
    if access is not None and not isinstance(access, str):
        raise TypeError(f"access must be the name of an access class, got {access!r}")

    def deco(f: Any) -> Any:
        f.__minihermes_handler__ = (kind, name or f.__name__)
        f.__minihermes_access__ = access
        return f

    return deco(fn) if fn is not None else deco


# ------------------------------------------------------------------------------------------------ checkers


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _bad(op: str, field: str, value: Any, expected: str) -> InvalidArgument:
    got = "null" if value is None else type(value).__name__
    return InvalidArgument(
        f"{op}: argument '{field}' must be {expected}, got {got}", op=op, field=field, expected=expected
    )


def make_checker(tp: Any) -> Checker | None:
    """A fast checker for an annotation; None means any value is accepted."""
    if tp is Any or tp is inspect.Parameter.empty or tp is object:
        return None
    origin = typing.get_origin(tp)
    if tp is str or tp is bytes:

        def check_str(op: str, field: str, v: Any) -> Any:
            if isinstance(v, tp):
                return v
            raise _bad(op, field, v, "a string")

        return check_str
    if tp is bool:

        def check_bool(op: str, field: str, v: Any) -> Any:
            if v is True or v is False:
                return v
            raise _bad(op, field, v, "a boolean")

        return check_bool
    if tp is int:

        def check_int(op: str, field: str, v: Any) -> Any:
            if type(v) is int:
                return v
            if type(v) is float and v.is_integer():
                return int(v)
            raise _bad(op, field, v, "an integer")

        return check_int
    if tp is float:

        def check_float(op: str, field: str, v: Any) -> Any:
            if type(v) is float or type(v) is int:
                return v
            raise _bad(op, field, v, "a number")

        return check_float
    if tp is dict or origin is dict:
        return _container(dict, "an object", tp)
    if tp is list or origin is list:
        return _container(list, "a list", tp)
    if tp is type(None):

        def check_none(op: str, field: str, v: Any) -> Any:
            if v is None:
                return v
            raise _bad(op, field, v, "null")

        return check_none
    if origin is typing.Union or origin is types.UnionType:
        options = typing.get_args(tp)
        inner = [make_checker(o) for o in options if o is not type(None)]
        allow_none = type(None) in options
        expected = " or ".join(_type_name(o) for o in options)
        if len(inner) == 1 and inner[0] is not None:
            only = inner[0]

            def check_optional(op: str, field: str, v: Any) -> Any:
                return v if v is None and allow_none else only(op, field, v)

            return check_optional

        def check_union(op: str, field: str, v: Any) -> Any:
            if v is None and allow_none:
                return v
            for c in inner:
                if c is None:
                    return v
                try:
                    return c(op, field, v)
                except InvalidArgument:
                    continue
            raise _bad(op, field, v, expected)

        return check_union
    if origin is Literal:
        allowed = typing.get_args(tp)

        def check_literal(op: str, field: str, v: Any) -> Any:
            if v in allowed and any(type(v) is type(a) for a in allowed):
                return v
            raise InvalidArgument(
                f"{op}: argument '{field}' must be one of {list(allowed)}",
                op=op,
                field=field,
                expected=list(allowed),
            )

        return check_literal
    return _pydantic_checker(tp)


def _container(kind: type, expected: str, tp: Any) -> Checker:
    args = typing.get_args(tp)
    item = make_checker(args[-1]) if args else None
    # Items that only need to be of one container type (``list[dict[str, Any]]``, a message list that grows
    # with a session): one isinstance each here instead of a checker call each.
    item_kind: type | None = getattr(item, "only_kind", None)

    def check(op: str, field: str, v: Any) -> Any:
        if not isinstance(v, kind):
            raise _bad(op, field, v, expected)
        if item is None:
            return v
        seq: Any = v
        if kind is dict:
            for x in list(seq.values()):
                item(op, field, x)
            return v
        if item_kind is not None and all(map(isinstance, seq, repeat(item_kind))):
            return v
        for x in list(seq):
            try:
                item(op, field, x)
            except InvalidArgument:
                # Checked again under its indexed name, for the message (the happy path skips formatting).
                i = next(j for j, y in enumerate(seq) if y is x)
                item(op, f"{field}[{i}]", x)
                raise
        return v

    if item is None:
        check.only_kind = kind  # type: ignore[attr-defined]
    return check


def _pydantic_checker(tp: Any) -> Checker:
    from pydantic import TypeAdapter, ValidationError

    adapter = TypeAdapter(tp)

    def check(op: str, field: str, v: Any) -> Any:
        try:
            return adapter.validate_python(v)
        except ValidationError as e:
            first = e.errors()[0]
            loc = ".".join(str(p) for p in first.get("loc", ()))
            where = f"{field}.{loc}" if loc else field
            raise InvalidArgument(
                f"{op}: argument '{where}': {first.get('msg')}", op=op, field=where
            ) from None

    return check


def build_handler(kind: str, op: str, fn: Callable[..., Any], hints: dict[str, Any]) -> Handler:
    sig = inspect.signature(fn)
    params: dict[str, Param] = {}
    var_kw = False
    for i, p in enumerate(sig.parameters.values()):
        if i == 0:
            continue  # self
        if p.kind is p.VAR_KEYWORD:
            var_kw = True
            continue
        if p.kind in (p.VAR_POSITIONAL, p.POSITIONAL_ONLY):
            raise TypeError(f"handler {op}: only keyword-compatible parameters are supported")
        required = p.default is inspect.Parameter.empty
        params[p.name] = Param(
            p.name, required, None if required else p.default, make_checker(hints.get(p.name, Any))
        )
    # The only parameter a pydantic model: the payload is that model (``bind``); beside others, one argument.
    model = _model_class(hints.get(next(iter(params)), Any)) if len(params) == 1 and not var_kw else None
    is_async = inspect.iscoroutinefunction(fn)
    return Handler(
        op=op,
        kind=kind,  # type: ignore[arg-type]
        fn=fn,
        is_async=is_async,
        params=params,
        var_kw=var_kw,
        internal=op.startswith("__"),
        states=getattr(fn, "__minihermes_states__", None),
        inline=not is_async,
        access=getattr(fn, "__minihermes_access__", None),
        concurrent=kind == "call" and bool(getattr(fn, "__minihermes_concurrent__", False)),
        model=model,
        model_param=next(iter(params)) if model is not None else "",
    )


def _model_class(tp: Any) -> type[BaseModel] | None:
    """``tp`` if it is a pydantic model class."""
    if not isinstance(tp, type):
        return None
    from pydantic import BaseModel

    return tp if issubclass(tp, BaseModel) else None


# ------------------------------------------------------------------------------------------------ ops


@dataclass(frozen=True, slots=True)
class OpParam:
    """One argument of an op."""

    name: str
    required: bool
    default: Any
    """None where the argument is required."""
    annotation: Any
    """Its declared type (``Any`` where none is declared)."""


@dataclass(frozen=True, slots=True)
class Op:
    """One op of an actor class, as ``Actor.ops()`` lists it: what a way in (the HTTP catalog, the CLI, the
    permission model) needs to know of it without reading the handler."""

    name: str
    kind: Literal["call", "cast"]
    """``call``: request-reply (``ask``); ``cast``: fire-and-forget (``send``)."""
    params: Mapping[str, OpParam]
    """Its arguments: the handler's parameters, or the fields of the model it takes."""
    accepts_extra: bool
    """Arguments beyond ``params`` are taken (a handler with ``**kwargs``, a model with ``extra="allow"``)."""
    model: type[BaseModel] | None
    """The pydantic model the payload is validated as, if the handler takes one."""
    access: str | None
    """The access class it declares (``@call(access=...)``); None: undeclared."""
    concurrent: bool
    """``@call(concurrent=True)``."""
    summary: str
    """The first line of its docstring."""
    doc: str
    """Its whole docstring, dedented."""


def _op(h: Handler) -> Op:
    doc = inspect.cleandoc(h.fn.__doc__) if h.fn.__doc__ else ""
    params: dict[str, OpParam] = {}
    if h.model is not None:
        for name, f in h.model.model_fields.items():
            required = f.is_required()
            default = None if required else f.get_default(call_default_factory=True)
            params[name] = OpParam(name, required, default, f.annotation)
        extra = h.model.model_config.get("extra") == "allow"
    else:
        try:
            hints = typing.get_type_hints(h.fn)
        except Exception:  # an unresolvable annotation must not hide the op
            hints = {}
        for name, p in h.params.items():
            params[name] = OpParam(name, p.required, p.default, hints.get(name, Any))
        extra = h.var_kw
    return Op(
        name=h.op,
        kind=h.kind,
        params=MappingProxyType(params),
        accepts_extra=extra,
        model=h.model,
        access=h.access,
        concurrent=h.concurrent,
        summary=doc.split("\n", 1)[0],
        doc=doc,
    )


# ------------------------------------------------------------------------------------------------ the base


class Actor:
    """Base of every actor. Subclass a behavior rather than this class directly."""

    behavior: ClassVar[str] = "Actor"
    state_version: ClassVar[int] = 1
    """Bump when the shape of the state changes, and teach ``migrate_state`` the old shape."""
    checkpoint_interval: ClassVar[int] = 1
    """Checkpoint every N messages. 1 (default): nothing confirmed to a caller is ever lost."""
    mailbox_capacity: ClassVar[int] = 0
    """0: use the node's default."""

    _state_fields: ClassVar[dict[str, StateField]] = {}
    _plain_fields: ClassVar[tuple[str, ...]] = ()
    """The state fields ``dump_state`` writes: all but the append-only ones."""
    _log_fields: ClassVar[tuple[str, ...]] = ()
    """The append-only state fields (saved item by item, ``runtime._statelog``)."""
    _handlers: ClassVar[dict[str, Handler]] = {}
    """The runtime's dispatch table. Outside the runtime read ``ops()``."""
    _ops: ClassVar[Mapping[str, Op] | None] = None
    Args: ClassVar[type[BaseModel] | None] = None
    """The actor's arguments (its spec's ``args``) as a pydantic model, ``extra="forbid"`` (derive from
    ``minihermes.runtime.ActorArgs``). The app config checks each actor's args against it when it loads, so
    an unknown or ill-typed key fails at start-up naming the known ones. ``on_init`` still gets the dict.
    None: the args are not checked."""

    actor_id: str
    host: Host
    preloaded: Any = None
    """The result of the function ``preload`` returned, for ``on_init`` (None without one)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        fields: dict[str, StateField] = {}
        handlers: dict[str, Handler] = {}
        for base in reversed(cls.__mro__[1:]):
            fields.update(getattr(base, "_state_fields", {}))
            handlers.update(getattr(base, "_handlers", {}))
        for name, value in list(vars(cls).items()):
            if isinstance(value, StateField):
                value.name = name
                value.type = _field_type(cls, name)
                fields[name] = value
        for value in list(vars(cls).values()):
            mark = getattr(value, "__minihermes_handler__", None)
            if mark is None:
                continue
            kind, op = mark
            try:
                fn_hints = typing.get_type_hints(value)
            except Exception:
                fn_hints = {}
            handlers[op] = build_handler(kind, op, value, fn_hints)
        cls._state_fields = fields
        cls._plain_fields = tuple(n for n, f in fields.items() if not f.append_only)
        cls._log_fields = tuple(n for n, f in fields.items() if f.append_only)
        cls._handlers = handlers
        cls._validate_class()

    @classmethod
    def _validate_class(cls) -> None:
        """Behaviors add their own class-definition checks here."""

    @classmethod
    def ops(cls) -> Mapping[str, Op]:
        """The class's ops by name (sorted), the runtime's own (``__``-prefixed) left out. Built once per
        class: read it where a way in is set up, not per message."""
        ops = cls.__dict__.get("_ops")
        if ops is None:
            ops = MappingProxyType({op: _op(h) for op, h in sorted(cls._handlers.items()) if not h.internal})
            cls._ops = ops
        return ops

    def __init__(self) -> None:
        for name, f in self._state_fields.items():
            setattr(self, name, f.make_default())

    # -- hooks -------------------------------------------------------------------------------------------

    def preload(self, actor_id: str, args: dict[str, Any]) -> Callable[[], Any] | None:
        """Blocking reads every activation needs that do not depend on the state (files beside the actor,
        say), as a function. The node runs it on a store thread in the same trip as the checkpoint read, so
        an activation pays one thread hop for both, and puts its result in ``self.preloaded`` before
        ``on_init``. Keep it short (it holds a reader thread). If it raises, the error is logged and
        ``preloaded`` is None: the actor still activates, and may read again later. Called in the actor's
        system context, before the state is restored. Default: None."""
        return None

    async def on_init(self, actor_id: str, args: dict[str, Any]) -> None:
        """Called on every activation (first start, restart, reactivation) after state is restored."""

    async def on_stop(self, reason: str) -> None:
        """Called when the actor stops normally or is deactivated (not on a crash)."""

    @classmethod
    def migrate_state(cls, from_version: int, data: dict[str, Any]) -> dict[str, Any]:
        """Turn state saved by an older ``state_version`` into the current shape. Default: keep known
        fields, drop unknown ones (missing ones take their defaults)."""
        return data

    # -- state (de)serialization -------------------------------------------------------------------------

    def dump_state(self, append_only: tuple[str, ...] = ()) -> bytes:
        """The state as one JSON document: the append-only fields only where named (the cell keeps short
        ones in the document, long ones in rows of their own)."""
        data = {n: getattr(self, n) for n in self._plain_fields}
        for n in append_only:
            data[n] = getattr(self, n)
        try:
            # orjson: this runs after every message (change detection), and is ~10-25x faster than json.
            return orjson.dumps(data, default=_json_default, option=orjson.OPT_NON_STR_KEYS)
        except orjson.JSONEncodeError:
            # What orjson refuses but JSON can carry (integers beyond 64 bits): the stdlib encoder.
            return _ENCODER.encode(data).encode()

    def load_state(self, data: dict[str, Any]) -> None:
        """Apply saved state; raises ValueError if a field's value does not fit its declared type."""
        for name, f in self._state_fields.items():
            if name not in data:
                setattr(self, name, f.make_default())
                continue
            value = data[name]
            check = make_checker(f.type)
            if check is not None and value is not None:
                try:
                    value = check("restore", name, value)
                except InvalidArgument as e:
                    raise ValueError(e.message) from None
            setattr(self, name, value)


def _field_type(cls: type, name: str) -> Any:
    """One field's annotation, resolved on its own (an unresolvable annotation elsewhere must not blind the
    type checks of every field)."""
    ann = inspect.get_annotations(cls).get(name, Any)
    if isinstance(ann, str):
        module = sys.modules.get(cls.__module__)
        try:
            ann = eval(ann, dict(vars(module)) if module else {}, dict(vars(cls)))  # our own class source
        except Exception:
            return Any
    return ann


def _json_default(o: Any) -> Any:
    if isinstance(o, (set, frozenset, tuple)):
        return list(o)
    if hasattr(o, "model_dump"):
        return o.model_dump(mode="json")
    raise TypeError(f"state value of type {type(o).__name__} is not JSON-serializable")


_ENCODER = json.JSONEncoder(separators=(",", ":"), default=_json_default)
