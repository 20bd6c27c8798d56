"""The provider-neutral shapes: what the gateway sends to a provider and what comes back.

Every adapter translates ``CompletionRequest`` into its wire format and its wire format back into
``Completion`` (or a stream of ``StreamEvent``), so the agent loop never knows which provider answered.
All models are pydantic, so they cross actor boundaries as plain dicts (``model_dump`` / ``model_validate``).
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

Role = Literal["system", "user", "assistant", "tool"]

StopReason = Literal["end_turn", "tool_use", "max_tokens", "stop_sequence", "refusal"]
"""Why the model stopped. ``tool_use`` if and only if the completion carries tool calls."""


class ToolCall(BaseModel):
    """A tool invocation requested by the model. ``input`` is always a JSON object."""

    model_config = ConfigDict(frozen=True)

    id: str
    name: str
    input: dict[str, Any] = Field(default_factory=dict)


class ToolSpec(BaseModel):
    """A tool offered to the model: its name, what it does, and a JSON Schema for its input."""

    model_config = ConfigDict(frozen=True)

    name: str
    description: str = ""
    input_schema: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})


class Message(BaseModel):
    """One conversation message in an OpenAI-like neutral form.

    ``assistant`` messages may carry ``tool_calls``; ``tool`` messages answer one call by ``tool_call_id``
    and may flag ``is_error``. Non-string content (a tool's dict result) is stored as JSON text, because
    every provider takes text there. Unknown keys (e.g. a transcript's ``stop_reason``) are ignored.
    """

    model_config = ConfigDict(frozen=True, extra="ignore")

    role: Role
    content: str = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    tool_call_id: str | None = None
    is_error: bool = False

    @field_validator("content", mode="before")
    @classmethod
    def _content_as_text(cls, value: Any) -> Any:
        if value is None:
            return ""
        if isinstance(value, dict | list):
            return json.dumps(value, ensure_ascii=False)
        return value

    @model_validator(mode="after")
    def _check_role_fields(self) -> Message:
        if self.tool_calls and self.role != "assistant":
            raise ValueError(f"only assistant messages carry tool_calls, not {self.role!r}")
        if self.role == "tool" and not self.tool_call_id:
            raise ValueError("a tool message needs the tool_call_id it answers")
        return self


class ReadOnlyDict(dict[str, Any]):
    """A dict nobody changes once made. The gateway validates such a message or tool spec once and reuses
    the result at every later call, instead of validating a session's whole history (and the tool list) again
    at each step; a plain dict is validated every time. What is computed from one (``ViewMemo``) is kept on
    it, so it lives and dies with the view."""

    __slots__ = ("_memo",)
    _memo: dict[Any, Any]

    def _read_only(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(f"a {type(self).__name__} is read-only")

    __setitem__ = __delitem__ = _read_only
    clear = pop = popitem = setdefault = update = __ior__ = _read_only


V = TypeVar("V")


class ViewMemo(Generic[V]):
    """One kind of value computed from read-only dicts (a validated model, a token count), kept on the dict
    itself: a lookup is an attribute read, not a search, and the value goes with its dict. Each memo is its
    own key, so two memos never see each other's values; an equal copy of a dict is another dict; anything
    other than a ``ReadOnlyDict`` is never remembered (it may change)."""

    __slots__ = ()

    def get(self, view: object) -> V | None:
        memo: dict[ViewMemo[Any], Any] | None = getattr(view, "_memo", None)
        return None if memo is None else memo.get(self)

    def put(self, view: object, value: V) -> None:
        if not isinstance(view, ReadOnlyDict):
            return
        memo: dict[ViewMemo[Any], Any] | None = getattr(view, "_memo", None)
        if memo is None:
            view._memo = {self: value}
        else:
            memo[self] = value


class MessageView(ReadOnlyDict):
    """A chat message as a read-only dict (the agent's view of one history message). ``_checked`` holds its
    validated ``Message`` once the gateway made it."""

    __slots__ = ("_checked",)
    _checked: Message


class ToolView(ReadOnlyDict):
    """A tool spec (name, description, input_schema) as a read-only dict (the agent's tool list)."""

    __slots__ = ()


class CompletionRequest(BaseModel):
    """Everything a provider needs for one completion.

    ``model`` overrides the provider's configured model when set. ``cache_prefix_messages`` says how many
    leading messages are byte-stable across calls (system prompt, injected skills, earlier turns): adapters
    that support explicit prompt caching put their cache breakpoints there, and on the tools.
    """

    model_config = ConfigDict(frozen=True)

    messages: list[Message]
    tools: list[ToolSpec] = Field(default_factory=list)
    model: str | None = None
    max_tokens: int = Field(default=1024, gt=0)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    cache_prefix_messages: int = Field(default=0, ge=0)

    @property
    def system_text(self) -> str:
        """All system messages joined, the way providers without a system role see them."""
        return "\n\n".join(m.content for m in self.messages if m.role == "system")


class Usage(BaseModel):
    """Token accounting, normalized across providers.

    ``input_tokens`` is the whole prompt, cached part included (Anthropic reports cache reads and writes
    apart; they are added back here so budgets compare across providers). ``cached_tokens`` is the part
    served from the prompt cache, ``cache_write_tokens`` the part written to it.
    """

    model_config = ConfigDict(frozen=True)

    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    cache_write_tokens: int = 0


class Completion(BaseModel):
    """The normalized answer of any provider (as a dict: ``{content, stop_reason, tool_calls, usage}``)."""

    model_config = ConfigDict(frozen=True)

    content: str = ""
    stop_reason: StopReason = "end_turn"
    tool_calls: list[ToolCall] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    provider: str = ""
    model: str = ""


class TextDelta(BaseModel):
    """A piece of assistant text, in order."""

    model_config = ConfigDict(frozen=True)

    type: Literal["text_delta"] = "text_delta"
    text: str


class ToolCallStart(BaseModel):
    """The model began a tool call; ``index`` identifies it in later delta/end events."""

    model_config = ConfigDict(frozen=True)

    type: Literal["tool_call_start"] = "tool_call_start"
    index: int
    id: str
    name: str


class ToolCallDelta(BaseModel):
    """A fragment of a tool call's JSON arguments, as the provider sent it (not parseable on its own)."""

    model_config = ConfigDict(frozen=True)

    type: Literal["tool_call_delta"] = "tool_call_delta"
    index: int
    arguments: str


class ToolCallEnd(BaseModel):
    """A tool call is complete and its arguments parsed."""

    model_config = ConfigDict(frozen=True)

    type: Literal["tool_call_end"] = "tool_call_end"
    index: int
    tool_call: ToolCall


class Done(BaseModel):
    """The last event of every successful stream: the same ``Completion`` ``complete`` would return."""

    model_config = ConfigDict(frozen=True)

    type: Literal["done"] = "done"
    completion: Completion


StreamEvent = Annotated[
    TextDelta | ToolCallStart | ToolCallDelta | ToolCallEnd | Done, Field(discriminator="type")
]
