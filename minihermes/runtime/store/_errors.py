"""Exceptions raised by store backends (bad input raises plain ``ValueError`` / ``TypeError``)."""

from __future__ import annotations


class StoreError(Exception):
    """Base class for store failures that are not caused by bad arguments."""


class StoreClosedError(StoreError):
    """The store was used before ``open()`` or after ``close()``."""


class FencedOut(StoreError):
    """A fenced checkpoint write or claim was refused: a newer holder of the actor's lease (a higher fence)
    has claimed it since, so this holder's state is stale and must not be written."""


def fenced_out(key: tuple[str, str, str]) -> FencedOut:
    """The ``FencedOut`` for the checkpoint of ``(tenant, ns, actor_id)``."""
    return FencedOut(f"checkpoint of {key[2]!r} ({key[0]}/{key[1]}) was claimed by a newer lease holder")


class SchemaVersionError(StoreError):
    """The database was written by a newer MiniHermes (or is not a MiniHermes database)."""
