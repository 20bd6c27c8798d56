"""Context: what the agent puts in front of the model and what it keeps afterwards.

Compression of long histories (``ContextCompressor``), token counting, prompt assembly (``SOUL.md``,
project context, stable prefix, per-turn section), secret redaction, text analysis for search (``analyze``,
``query_terms``, ``snippet``), the session-search index, memory
ranking (relevance times temporal decay) and forgetting across stores.
"""

from ._text import analyze, query_terms, search_query_terms, search_stem, search_terms, snippet
from .context_compressor import ContextCompressor
from .redact import redact, redact_text
from .tokens import count_tokens, default_counter, messages_tokens, set_default_counter

__all__ = [
    "ContextCompressor",
    "analyze",
    "count_tokens",
    "default_counter",
    "messages_tokens",
    "query_terms",
    "redact",
    "redact_text",
    "search_query_terms",
    "search_stem",
    "search_terms",
    "set_default_counter",
    "snippet",
]
