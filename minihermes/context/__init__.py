"""Context: what the agent puts in front of the model and what it keeps afterwards.

Compression of long histories (``ContextCompressor``), token counting, prompt assembly (``SOUL.md``,
project context, stable prefix, per-turn section), secret redaction, the session-search index, memory
ranking (relevance times temporal decay) and forgetting across stores.
"""

from .compressor import ContextCompressor
from .redact import redact, redact_text
from .tokens import count_tokens, default_counter, messages_tokens, set_default_counter

__all__ = [
    "ContextCompressor",
    "count_tokens",
    "default_counter",
    "messages_tokens",
    "redact",
    "redact_text",
    "set_default_counter",
]
