"""``minihermes chat``: a terminal chat with the agent, embedded or against a running server."""

from __future__ import annotations

import asyncio
import sys
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from rich.console import Console

Ask = Callable[[str, str, dict[str, Any]], Awaitable[Any]]

HELP = """Commands:
  /new              start a new session
  /history          show this session's messages
  /tools            list the tools
  /model P [M]      switch provider (and model) for this session
  /approvals        list approvals waiting for a person
  /approve ID       approve a paused tool call      /deny ID   deny it
  /help             this help                        /quit      leave (Ctrl-D too)"""


async def run_chat(*, session: str, url: str | None, data_dir: Path, token: str | None) -> int:
    console = Console()
    if url:
        return await _remote(console, session, url, token)
    from minihermes.embed import MiniHermes

    async with MiniHermes(data_dir=data_dir) as mh:

        async def ask(actor: str, op: str, payload: dict[str, Any]) -> Any:
            return await mh.ask(actor, op, payload, timeout=300)

        return await _loop(console, session, ask)


async def _remote(console: Console, session: str, url: str, token: str | None) -> int:
    import httpx

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx.AsyncClient(base_url=url.rstrip("/"), headers=headers, timeout=310) as client:

        async def ask(actor: str, op: str, payload: dict[str, Any]) -> Any:
            resp = await client.post(f"/api/v1/actors/{actor}/{op}", json=payload)
            body = resp.json()
            if resp.status_code >= 400:
                err = body.get("error", {}) if isinstance(body, dict) else {}
                raise ChatError(f"{err.get('code', resp.status_code)}: {err.get('message', resp.text)}")
            return body

        return await _loop(console, session, ask)


class ChatError(Exception):
    pass


async def _loop(console: Console, session: str, ask: Ask) -> int:
    console.print(
        f"[bold]MiniHermes[/bold] session [cyan]{session}[/cyan]. /help for commands, /quit to leave."
    )
    while True:
        try:
            line = await asyncio.to_thread(_read, "you> ")
        except EOFError:
            console.print()
            return 0
        line = line.strip()
        if not line:
            continue
        try:
            if line.startswith("/"):
                result = await _command(console, line, session, ask)
                if result == "quit":
                    return 0
                if result and result.startswith("session:"):
                    session = result.split(":", 1)[1]
                continue
            reply = await ask("agent", "chat", {"message": line, "session_id": session})
            _show_reply(console, reply)
        except ChatError as e:
            console.print(f"[red]error[/red] {e}")
        except Exception as e:  # an actor error or a connection failure: report, keep the chat going
            msg = getattr(e, "message", None) or str(e)
            console.print(f"[red]error[/red] {getattr(e, 'code', type(e).__name__)}: {msg}")


def _read(prompt: str) -> str:
    sys.stdout.write(prompt)
    sys.stdout.flush()
    line = sys.stdin.readline()
    if not line:
        raise EOFError
    return line


def _show_reply(console: Console, reply: dict[str, Any]) -> None:
    meta = f"[dim]({reply.get('tool_calls', 0)} tool calls, {reply.get('iterations', 0)} LLM calls)[/dim]"
    if reply.get("status") == "paused":
        console.print(
            f"[yellow]paused[/yellow] {reply.get('response', '')}  /approve {reply.get('approval_id')}"
        )
        return
    console.print(f"[bold green]agent>[/bold green] {reply.get('response', '')} {meta}")


async def _command(console: Console, line: str, session: str, ask: Ask) -> str | None:
    cmd, *args = line.split()
    if cmd in ("/quit", "/exit"):
        return "quit"
    if cmd == "/help":
        console.print(HELP)
    elif cmd == "/new":
        new = f"cli-{uuid.uuid4().hex[:8]}"
        console.print(f"new session [cyan]{new}[/cyan]")
        return f"session:{new}"
    elif cmd == "/history":
        for m in (await ask("agent", "get_history", {"session_id": session}))["messages"]:
            console.print(f"[dim]{m['role']:>9}[/dim] {str(m.get('content', ''))[:300]}")
    elif cmd == "/tools":
        for t in (await ask("tool_executor", "list_tools", {}))["tools"]:
            console.print(f"[cyan]{t['name']}[/cyan] {t.get('description', '')}")
    elif cmd == "/model" and args:
        payload = {"provider": args[0], "session_id": session}
        if len(args) > 1:
            payload["model"] = args[1]
        reply = await ask("llm_gateway", "switch_provider", payload)
        console.print(f"provider {reply.get('provider')} model {reply.get('model')}")
    elif cmd == "/approvals":
        for a in (await ask("guardrails", "list_approvals", {}))["approvals"]:
            console.print(f"{a['approval_id']} {a['tool']} {a['input']} session={a['session_id']}")
    elif cmd in ("/approve", "/deny") and args:
        reply = await ask("guardrails", cmd[1:], {"approval_id": args[0]})
        console.print(f"{reply.get('decision')}")
        if reply.get("turn"):
            _show_reply(console, reply["turn"])
    else:
        console.print(f"unknown command {cmd}; /help lists them")
    return None
