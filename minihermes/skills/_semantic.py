"""What a skill's embedding is computed from; the embedder itself is ``minihermes.context.embeddings``."""

from __future__ import annotations

from typing import Any


def skill_text(record: dict[str, Any]) -> str:
    """What a skill's vector is computed from: what it is for, not its steps."""
    return " ".join([record["name"].replace("-", " "), record["description"], *record.get("triggers", [])])
