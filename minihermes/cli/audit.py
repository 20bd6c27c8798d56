"""``minihermes audit ...``: the audit trail's signed retention anchors and its verification (the
``audit_event`` actor: ``export_anchors``, ``verify``), embedded or against a server like every scripting
command.

    minihermes audit anchors > anchors.json          # keep them somewhere the node cannot write
    minihermes audit verify --anchor anchors.json    # the trail against the newest of them
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from ._backend import Backend, CommandError
from ._connection import ConnectedTyper
from .commands import op_command, pick_op, run_command

audit_app = ConnectedTyper(
    help="The audit trail: export its signed anchors, verify it.", no_args_is_help=True
)


@audit_app.command("anchors")
def audit_anchors() -> None:
    """Print the anchors retention signed for this tenant's trail (JSON, oldest first). Each carries the
    node's public key: checking one needs no secret."""
    run_command(op_command("audit_event", ("export_anchors",), {}), as_json=True)


def _anchor(path: Path) -> dict[str, Any]:
    """The anchor in ``path``: one exported anchor, or the newest of an ``audit anchors`` export."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise CommandError("invalid_argument", f"cannot read an anchor from {path}: {e}", "anchor") from None
    if isinstance(value, dict) and isinstance(value.get("anchors"), list):
        value = value["anchors"][-1] if value["anchors"] else None
    if not isinstance(value, dict):
        raise CommandError("invalid_argument", f"{path} holds no anchor", "anchor")
    return value


@audit_app.command("verify")
def audit_verify(
    anchor: Annotated[
        Path | None,
        typer.Option(help="An exported anchor (or an `audit anchors` export: its newest) to verify against."),
    ] = None,
) -> None:
    """Recompute the trail's hash chain (from ``--anchor``: it must also pass through what the anchor
    pinned). Exits 1 when the trail is not intact, naming the first bad sequence number."""

    async def body(backend: Backend, console: Console) -> Any:
        op = await pick_op(backend, "audit_event", ("verify",))
        payload = {} if anchor is None else {"anchor": _anchor(anchor)}
        reply = await backend.ask("audit_event", op, payload)
        if not reply.get("ok"):
            where = reply.get("first_bad_seq")
            raise CommandError("corrupt", f"the trail is not intact at seq {where}: {reply.get('reason')}")
        return reply

    run_command(body)
