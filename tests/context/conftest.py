"""Fixtures shared with the agent tests: ``make_node`` (real SQLite store, manual clock) and contexts."""

from __future__ import annotations

from tests.agent.conftest import ACME, ACME_USER, ACME_VIEWER, GLOBEX, clock, make_node

__all__ = ["ACME", "ACME_USER", "ACME_VIEWER", "GLOBEX", "clock", "make_node"]
