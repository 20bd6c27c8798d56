"""``minihermes chat``: a terminal chat with the agent, embedded or against a running server.

Turns stream: the answer's text as it is produced and each tool call as it starts and ends. Embedded, the
chat watches the session's live topic (``session:<id>``) while the turn runs; against a server it reads the
Server-Sent Events of ``POST /api/v1/sessions/{id}/messages`` (``"stream": true``), and falls back to a plain
``agent.chat`` call on a server without that endpoint. Slash commands reach the other services; a subsystem
the node does not run answers "not enabled". The help and the Tab completions offer only the commands the
caller may use (the server's catalog for their credential; ``/approve`` and ``/deny`` to admins).

Ctrl-C while a turn runs stops it (``agent.cancel_turn``: a running tool's process is killed, the turn is
recorded as stopped) and the chat goes on; a second Ctrl-C before the turn has stopped leaves the chat. At the
prompt, Ctrl-C leaves as before.

The caller's notifications (a reminder that fired, a scheduled run's answer) are shown when the chat starts
(the unread ones, then marked read) and as they arrive while it is open: printed above the prompt while it
waits for a line (the line being typed is drawn again below), after the turn while one runs; ``/notifications``
lists the latest ones (``_inbox.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shlex
import signal
import sys
import threading
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from rich.console import Console
from rich.markup import escape

from minihermes.runtime import ConfigError

from ._backend import Backend, CommandError, Embedded, Remote, open_backend, reply_body, unreachable
from ._inbox import Inbox
from ._sse import sse_events
from .commands import NotEnabled, pick_op

ReadLine = Callable[[str], Awaitable[str]]


@dataclass(frozen=True)
class Slash:
    """A slash command, offered to a caller who may call one of ``needs`` (always, when empty)."""

    name: str
    usage: str
    what: str
    needs: tuple[tuple[str, str], ...] = ()
    admin: bool = False
    """Deciding on others' requests is an admin's job (the guardrails' rule): offered to admins only."""


COMMANDS = (
    Slash("/new", "/new", "start a new session"),
    Slash(
        "/model",
        "/model [P [M]]",
        "list providers, or switch this session to provider P (and model M)",
        (("llm_gateway", "switch_provider"),),
    ),
    Slash(
        "/skills",
        "/skills [QUERY]",
        "list skills, or search them",
        (("skill_store", "list_skills"), ("skill_store", "search_skills")),
    ),
    Slash(
        "/memory",
        "/memory [list | search Q | store KEY VALUE | forget KEY]",
        "memories",
        (("memory", "list_memories"), ("memory", "store_memory")),
    ),
    Slash("/goal", "/goal [TEXT]", "list goals, or set one for this session", (("goals", "list_goals"),)),
    Slash(
        "/approve",
        "/approve [ID]",
        "list approvals waiting for a person, or approve one",
        (("guardrails", "approve"),),
        admin=True,
    ),
    Slash("/deny", "/deny ID", "deny an approval", (("guardrails", "deny"),), admin=True),
    Slash("/history", "/history", "this session's messages", (("agent", "get_history"),)),
    Slash("/tools", "/tools", "the tools", (("tool_executor", "list_tools"),)),
    Slash(
        "/notifications",
        "/notifications",
        "your latest notifications (reminders, scheduled runs' answers)",
        (("notifications", "list_notifications"),),
    ),
    Slash("/help", "/help", "this help"),
    Slash("/quit", "/quit", "leave (Ctrl-D too)"),
)


def help_text(commands: tuple[Slash, ...] | list[Slash]) -> str:
    rows = [f"  {c.usage:<22}{c.what}" if len(c.usage) < 22 else f"  {c.usage}" for c in commands]
    return "Commands:\n" + "\n".join(rows)


DEFAULT_SESSION = "cli"
PROMPT = "you> "


async def run_chat(*, session: str, url: str | None, data_dir: Path, token: str | None) -> int:
    console = Console()
    try:
        async with open_backend(url=url, data_dir=data_dir, token=token) as backend:
            loop = ChatLoop(console, backend, session)
            if sys.stdin.isatty():
                return await loop.run(_terminal_reader(loop))
            loop.redraw = lambda: PROMPT  # piped input: the prompt again after a notification
            return await loop.run(_stdin_line)
    except CommandError as e:  # no server there, a credential needed, the data dir busy
        _fail(f"{e.code}: {e.message}")
    except (OSError, ConfigError) as e:  # the data dir cannot be used
        _fail(str(e))
    return 1


def _fail(message: str) -> None:
    Console(stderr=True).print(f"[red]error[/red] {escape(message)}", soft_wrap=True, highlight=False)


def _terminal_reader(loop: ChatLoop) -> ReadLine:
    """Lines read with ``readline``: history, editing, and Tab completing the commands the caller may use."""
    try:
        import readline
    except ImportError:
        return _stdin_line

    def complete(text: str, state: int) -> str | None:
        if " " in readline.get_line_buffer().lstrip():
            return None  # completing commands, not their arguments
        matches = [name for name in loop.command_names() if name.startswith(text)]
        return matches[state] if state < len(matches) else None

    readline.set_completer_delims(" \t\n")
    readline.set_completer(complete)
    readline.parse_and_bind("tab: complete")
    # A notification printed while a line is typed: the prompt and that line are drawn again below it.
    loop.redraw = lambda: PROMPT + readline.get_line_buffer()

    async def read(prompt: str) -> str:
        return await _in_thread(lambda: input(prompt))  # EOFError at Ctrl-D

    return read


async def _stdin_line(prompt: str) -> str:
    def read() -> str:
        sys.stdout.write(prompt)
        sys.stdout.flush()
        line = sys.stdin.readline()
        if not line:
            raise EOFError
        return line

    return await _in_thread(read)


async def _in_thread(read: Callable[[], str]) -> str:
    """``read`` in a daemon thread: a line still being read when the chat leaves (Ctrl-C at the prompt) must
    not keep the process from exiting, as a thread of the loop's executor would."""
    loop = asyncio.get_running_loop()
    got: asyncio.Future[str] = loop.create_future()

    def settle(line: str, error: BaseException | None) -> None:
        if got.done():
            return
        if error is not None:
            got.set_exception(error)
        else:
            got.set_result(line)

    def work() -> None:
        try:
            line, error = read(), None
        except BaseException as e:  # EOFError, or what the terminal raised
            line, error = "", e
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
            loop.call_soon_threadsafe(settle, line, error)

    threading.Thread(target=work, name="chat-input", daemon=True).start()
    return await got


class Quit(Exception):
    """A second Ctrl-C while a turn was being stopped: leave the chat."""


@contextlib.contextmanager
def on_interrupt(handler: Callable[[], None]) -> Iterator[bool]:
    """Call ``handler`` on SIGINT (Ctrl-C) instead of the default, restoring what was there after; yields
    False where the loop cannot take the signal (not the main thread, another platform)."""
    loop = asyncio.get_running_loop()
    previous = signal.getsignal(signal.SIGINT)
    try:
        loop.add_signal_handler(signal.SIGINT, handler)
    except (NotImplementedError, RuntimeError, ValueError):
        yield False
        return
    try:
        yield True
    finally:
        loop.remove_signal_handler(signal.SIGINT)
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


class Renderer:
    """Shows one turn's live events: text as it streams, tool calls as they start and end."""

    def __init__(self, console: Console, can_approve: bool = True) -> None:
        self.console = console
        self.can_approve = can_approve
        self.streamed_text = False
        self._mid_line = False

    def event(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        c = self.console
        if kind == "text_delta":
            text = str(event.get("text", ""))
            if not self._mid_line:
                c.print("[bold green]agent>[/bold green] ", end="")
            c.print(escape(text), end="", soft_wrap=True, highlight=False)
            self.streamed_text = True
            self._mid_line = True
        elif kind == "tool_call_start":
            self._newline()
            args = json.dumps(event.get("input", {}), ensure_ascii=False)
            c.print(
                f"[cyan]⚙ {escape(str(event.get('name')))}[/cyan] {escape(_short(args, 200))}",
                highlight=False,
            )
        elif kind == "tool_call_end":
            self._newline()
            mark = "[red]✗[/red]" if event.get("is_error") else "[green]✓[/green]"
            ms = event.get("duration_ms")
            took = f" [dim]{ms:.0f} ms[/dim]" if isinstance(ms, int | float) else ""
            c.print(
                f"  {mark} {escape(str(event.get('name')))}{took} {escape(_short(str(event.get('result', '')), 200))}",
                highlight=False,
            )
        elif kind == "dropped":
            self._newline()
            c.print(f"[dim]({event.get('count')} live events skipped)[/dim]")

    def _newline(self) -> None:
        if self._mid_line:
            self.console.print()
            self._mid_line = False

    def reply(self, reply: dict[str, Any]) -> None:
        """The turn's end: the whole answer unless it already streamed, then what it cost."""
        meta = f"[dim]({reply.get('tool_calls', 0)} tool calls, {reply.get('iterations', 0)} LLM calls)[/dim]"
        if reply.get("status") == "cancelled":
            self._newline()
            self.console.print(f"[yellow]stopped[/yellow] the turn was stopped {meta}", highlight=False)
            return
        if reply.get("status") == "paused":
            self._newline()
            then = (
                f"/approve {reply.get('approval_id')}"
                if self.can_approve
                else f"(waiting for an admin's decision on approval {reply.get('approval_id')})"
            )
            self.console.print(f"[yellow]paused[/yellow] {escape(str(reply.get('response', '')))}  {then}")
            return
        if self.streamed_text:
            self._newline()
            self.console.print(meta)
            return
        self.console.print(f"[bold green]agent>[/bold green] {escape(str(reply.get('response', '')))} {meta}")


def _note(note: dict[str, Any]) -> str:
    """One notification as rich markup: its text, then where it came from and when, dimmed."""
    import time

    created = note.get("created_at")
    when = (
        time.strftime("%Y-%m-%d %H:%M", time.localtime(created)) if isinstance(created, int | float) else ""
    )
    about = " · ".join(x for x in (str(note.get("source") or ""), when) if x)
    return f"{escape(str(note.get('text', '')))}" + (f" [dim]({escape(about)})[/dim]" if about else "")


def _short(text: str, limit: int) -> str:
    text = text.replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 1] + "…"


class ChatLoop:
    """Reads lines, runs turns with live output, and answers slash commands."""

    def __init__(self, console: Console, backend: Backend, session: str) -> None:
        self.console = console
        self.backend = backend
        self.session = session
        self._own_sessions = False
        self.commands: list[Slash] = list(COMMANDS)
        """The commands this caller may use (``_start`` narrows them): the help and completions."""
        self.inbox: Inbox | None = None
        """The caller's notifications, when the node runs them and the caller may read them."""
        self.redraw: Callable[[], str] | None = None
        """What to write again after a notification printed while the prompt waits (the prompt and the line
        typed so far); None: nothing (a reader that shows no prompt)."""
        self._at_prompt = False
        self._pending: list[dict[str, Any]] = []
        self._marking: set[asyncio.Future[None]] = set()

    def command_names(self) -> list[str]:
        return [c.name for c in self.commands]

    @property
    def can_approve(self) -> bool:
        return "/approve" in self.command_names()

    async def _start(self) -> None:
        """Ask who the caller is: the commands offered are those their roles allow. A server caller with only
        the ``user`` role may chat only in sessions they created: such a caller gets a session of their own
        instead of the shared default name (an explicit --session is kept)."""
        roles = await self.backend.roles()
        self.commands = [c for c in COMMANDS if await self._offered(c, roles)]
        if "/notifications" in self.command_names():
            self.inbox = Inbox(self.backend, can_mark=await self.backend.may("notifications", "mark_read"))
        if not isinstance(self.backend, Remote) or roles & {"admin", "viewer"}:
            return
        self._own_sessions = True
        if self.session == DEFAULT_SESSION:
            self.session = await self._create_session()

    async def _offered(self, command: Slash, roles: frozenset[str]) -> bool:
        if command.admin and "admin" not in roles:
            return False
        if not command.needs:
            return True
        for actor, op in command.needs:
            if await self.backend.may(actor, op):
                return True
        return False

    async def _create_session(self) -> str:
        reply = await self.backend.ask("session_manager", "create_session", {"channel": "cli"})
        return str(reply["session_id"])

    async def run(self, read_line: ReadLine) -> int:
        try:
            await self._start()
        except CommandError as e:
            _fail(f"{e.code}: {e.message}")
            return 1
        self.console.print(
            f"[bold]MiniHermes[/bold] session [cyan]{self.session}[/cyan] ({self.backend.where}). "
            "/help for commands, /quit to leave."
        )
        await self._say_if_offline()
        await self._show_unread()
        watcher = asyncio.ensure_future(self.inbox.watch(self._arrived)) if self.inbox else None
        try:
            return await self._lines(read_line)
        finally:
            if watcher is not None:
                watcher.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await watcher
            if self._marking:  # what was shown is marked read before the backend closes
                await asyncio.wait(self._marking, timeout=10)

    async def _lines(self, read_line: ReadLine) -> int:
        while True:
            self._flush_notifications()
            self._at_prompt = True
            reading = asyncio.ensure_future(read_line(PROMPT))
            interrupted: list[bool] = []

            def leave(reading: asyncio.Future[str] = reading, interrupted: list[bool] = interrupted) -> None:
                interrupted.append(True)
                reading.cancel()

            try:
                with on_interrupt(leave):  # Ctrl-C at the prompt: leave
                    line = (await reading).strip()
            except EOFError:
                self.console.print()
                return 0
            except asyncio.CancelledError:
                if not interrupted:
                    raise
                self.console.print()
                return 130
            finally:
                self._at_prompt = False
            if not line:
                continue
            try:
                if line.startswith("/"):
                    if await self.command(line) == "quit":
                        return 0
                    continue
                await self.turn(line)
            except Quit:
                self.console.print()
                return 130
            except NotEnabled as e:
                self.console.print(f"[yellow]not enabled[/yellow]: {e}")
            except CommandError as e:
                if e.code == "connection_failed":  # the server is gone: say so once, and leave
                    _fail(f"{e.code}: {e.message}")
                    return 1
                self.console.print(f"[red]error[/red] {e.code}: {escape(e.message)}", soft_wrap=True)
            except Exception as e:  # anything else a command met: report it, keep the chat going
                self.console.print(f"[red]error[/red] {type(e).__name__}: {escape(str(e))}", soft_wrap=True)

    # -- turns --------------------------------------------------------------------------------------------

    async def turn(self, message: str) -> dict[str, Any]:
        """Run one turn with live output. Ctrl-C stops it (its reply then says so); a second one leaves."""
        renderer = Renderer(self.console, self.can_approve)
        running = asyncio.ensure_future(self._run_turn(message, renderer))
        stopping: list[asyncio.Future[None]] = []

        def interrupted() -> None:
            if stopping:  # the second Ctrl-C: leave
                running.cancel()
                return
            renderer._newline()
            self.console.print("[yellow]stopping the turn…[/yellow] [dim](Ctrl-C again to quit)[/dim]")
            stopping.append(asyncio.ensure_future(self._stop_turn()))

        with on_interrupt(interrupted):
            try:
                reply = await running
            except asyncio.CancelledError:
                if stopping and running.cancelled():
                    raise Quit() from None
                raise
            finally:
                for task in stopping:
                    task.cancel()
        renderer.reply(reply)
        return reply

    async def _run_turn(self, message: str, renderer: Renderer) -> dict[str, Any]:
        if isinstance(self.backend, Embedded):
            return await self._embedded_turn(self.backend, message, renderer)
        if isinstance(self.backend, Remote):
            return await self._remote_turn(self.backend, message, renderer)
        reply: dict[str, Any] = await self.backend.ask(
            "agent", "chat", {"message": message, "session_id": self.session}
        )
        return reply

    async def _stop_turn(self) -> None:
        """``agent.cancel_turn`` for this session; the turn's own reply then says it stopped."""
        try:
            await self.backend.ask("agent", "cancel_turn", {"session_id": self.session}, timeout=30)
        except CommandError as e:
            self.console.print(f"[red]could not stop the turn[/red] {e.code}: {escape(e.message)}")

    async def _embedded_turn(self, backend: Embedded, message: str, renderer: Renderer) -> dict[str, Any]:
        from minihermes.agent.agent import session_topic

        # Subscribe before asking: the first events are published as soon as the turn starts.
        with_sub = backend.node.subscribe(session_topic(self.session), ctx=backend.ctx)
        try:
            ask = asyncio.ensure_future(
                backend.ask("agent", "chat", {"message": message, "session_id": self.session})
            )
            while not ask.done():
                getter = asyncio.ensure_future(with_sub.get())
                done, _ = await asyncio.wait({ask, getter}, return_when=asyncio.FIRST_COMPLETED)
                if getter in done:
                    renderer.event(getter.result())
                else:
                    getter.cancel()
            while (event := with_sub.get_nowait()) is not None:  # what came in with the reply
                renderer.event(event)
            reply: dict[str, Any] = ask.result()
            return reply
        finally:
            with_sub.close()

    async def _remote_turn(self, backend: Remote, message: str, renderer: Renderer) -> dict[str, Any]:
        import httpx

        path = f"/api/v1/sessions/{quote(self.session, safe='')}/messages"
        final: dict[str, Any] | None = None
        try:
            async with backend.client.stream("POST", path, json={"content": message, "stream": True}) as resp:
                if resp.status_code in (404, 405):
                    # A server without streaming (or a session it refuses: agent.chat says which).
                    reply: dict[str, Any] = await backend.ask(
                        "agent", "chat", {"message": message, "session_id": self.session}
                    )
                    return reply
                if resp.status_code >= 400:
                    await resp.aread()
                    reply_body(resp)  # raises the API's structured error
                async for event in sse_events(resp.aiter_lines()):
                    kind = event.get("type")
                    if kind == "final":
                        final = event.get("reply", event)
                    elif kind == "error":
                        err = event.get("error", event)
                        raise CommandError(str(err.get("code", "error")), str(err.get("message", "")))
                    else:
                        renderer.event(event)
        except httpx.HTTPError as e:
            raise unreachable(backend.where, e) from None
        if final is None:
            raise CommandError("stream_ended", "the stream ended without a final reply")
        return final

    # -- slash commands -----------------------------------------------------------------------------------

    async def command(self, line: str) -> str | None:
        try:
            cmd, *args = shlex.split(line)
        except ValueError as e:
            self.console.print(f"[red]error[/red] {e}")
            return None
        c, ask = self.console, self.backend.ask
        if cmd in ("/quit", "/exit"):
            return "quit"
        if cmd == "/help":
            c.print(escape(help_text(self.commands)), highlight=False)
        elif cmd == "/new":
            self.session = (
                await self._create_session() if self._own_sessions else f"cli-{uuid.uuid4().hex[:8]}"
            )
            c.print(f"new session [cyan]{self.session}[/cyan]")
        elif cmd == "/history":
            for m in (await ask("agent", "get_history", {"session_id": self.session}))["messages"]:
                c.print(f"[dim]{m['role']:>9}[/dim] {escape(str(m.get('content', ''))[:300])}")
        elif cmd == "/notifications":
            await self._notifications()
        elif cmd == "/tools":
            for t in (await ask("tool_executor", "list_tools", {}))["tools"]:
                c.print(f"[cyan]{t['name']}[/cyan] {escape(t.get('description', ''))}")
        elif cmd == "/model":
            await self._model(args)
        elif cmd == "/skills":
            await self._skills(args)
        elif cmd == "/memory":
            await self._memory(args)
        elif cmd == "/goal":
            await self._goal(args)
        elif cmd in ("/approve", "/approvals") and not args:
            await self._approvals()
        elif cmd in ("/approve", "/deny"):
            try:
                reply = await ask("guardrails", cmd[1:], {"approval_id": args[0]})
            except CommandError as e:
                if e.code == "permission_denied" and "own request" in e.message:
                    e.message += (
                        " (another admin decides: the dashboard, or minihermes chat --url ... --token-env"
                        " with that admin's key)"
                    )
                raise
            c.print(f"{reply.get('decision')}")
            if reply.get("turn"):
                Renderer(c, self.can_approve).reply(reply["turn"])
        else:
            c.print(f"unknown command {escape(cmd)}; /help lists them")
        return None

    # -- notifications ------------------------------------------------------------------------------------

    async def _show_unread(self) -> None:
        """The unread notifications, as the chat starts; then they are read."""
        if self.inbox is None:
            return
        try:
            notes = await self.inbox.unread()
        except CommandError:
            return  # the inbox cannot be read now: the chat goes on without it
        if notes:
            self.console.print(f"[bold magenta]Reminders[/bold magenta] ({len(notes)} new):", highlight=False)
            for note in notes:
                self.console.print(f"  {_note(note)}", highlight=False, soft_wrap=True)
            await self.inbox.mark_read(notes)

    def _arrived(self, notes: list[dict[str, Any]]) -> None:
        """New notifications from the live feed: shown now if the prompt waits, else after the turn."""
        self._pending.extend(notes)
        if self._at_prompt:
            self._flush_notifications()

    def _flush_notifications(self) -> None:
        if not self._pending or self.inbox is None:
            return
        notes, self._pending = self._pending, []
        out = self.console.file
        redraw = self._at_prompt and self.redraw is not None
        if redraw:  # clear the prompt's line (a terminal), or end it (piped output)
            out.write("\r\x1b[2K" if self.console.is_terminal else "\n")
        for note in notes:
            self.console.print(
                f"[bold magenta]Reminder:[/bold magenta] {_note(note)}", highlight=False, soft_wrap=True
            )
        if redraw and self.redraw is not None:
            out.write(self.redraw())
            out.flush()
        marking = asyncio.ensure_future(self.inbox.mark_read(notes))
        self._marking.add(marking)
        marking.add_done_callback(self._marking.discard)

    async def _notifications(self) -> None:
        if self.inbox is None:
            raise NotEnabled("notifications", self.backend.where)
        notes = await self.inbox.recent()
        if not notes:
            self.console.print("[dim]no notifications[/dim]")
            return
        for note in notes:
            mark = "[dim]    [/dim]" if note.get("read") else "[magenta]new [/magenta]"
            self.console.print(f"{mark}{_note(note)}", highlight=False, soft_wrap=True)
        self.inbox.shown.update(str(n["id"]) for n in notes if n.get("id"))
        await self.inbox.mark_read(notes)

    async def _say_if_offline(self) -> None:
        """When the offline model answers, say so once, with where a real model is connected."""
        try:
            listing = await self.backend.ask("llm_gateway", "list_providers", {})
        except CommandError:
            return  # not allowed to read the providers, or no gateway: nothing to say
        active = listing.get("active") or {}
        kinds = {p.get("name"): p.get("kind") for p in listing.get("providers", [])}
        if (kinds.get(active.get("provider")) or active.get("provider")) != "simulated":
            return
        connect = (
            "Connect a real model with /model NAME after an admin registers one"
            if "/model" in self.command_names()
            else "An admin can connect a real model"
        )
        self.console.print(
            "[yellow]Offline model active[/yellow]: it does simple requests (arithmetic, memory, files, "
            f"reminders, goals) and says when it cannot. {connect} (docs/providers.md; what the offline model "
            "understands: docs/offline-model.md).",
            highlight=False,
        )

    async def _model(self, args: list[str]) -> None:
        if not args:
            listing = await self.backend.ask("llm_gateway", "list_providers", {})
            for p in listing["providers"]:
                mark = "[green]*[/green]" if p.get("active") else " "
                self.console.print(
                    f"{mark} {p['name']:<12} {p['kind']:<10} {p.get('model') or '-'} [dim]{p.get('circuit')}[/dim]"
                )
            return
        payload = {"provider": args[0], "session_id": self.session}
        if len(args) > 1:
            payload["model"] = args[1]
        reply = await self.backend.ask("llm_gateway", "switch_provider", payload)
        self.console.print(f"provider {reply.get('provider')} model {reply.get('model')} (this session)")

    async def _skills(self, args: list[str]) -> None:
        if args:
            op = await pick_op(self.backend, "skill_store", ("search_skills",))
            reply = await self.backend.ask("skill_store", op, {"query": " ".join(args), "limit": 10})
        else:
            op = await pick_op(self.backend, "skill_store", ("list_skills",))
            reply = await self.backend.ask("skill_store", op, {"limit": 50})
        skills = reply.get("skills", [])
        if not skills:
            self.console.print("[dim]no skills[/dim]")
        for s in skills:
            pin = " [magenta]pinned[/magenta]" if s.get("pinned") else ""
            self.console.print(
                f"[cyan]{escape(str(s.get('name')))}[/cyan] [dim]{s.get('status', '')}{pin}[/dim] "
                f"{escape(_short(str(s.get('description', '')), 120))}"
            )

    async def _memory(self, args: list[str]) -> None:
        sub, rest = (args[0], args[1:]) if args else ("list", [])
        ask = self.backend.ask
        if sub == "list":
            found = (await ask("memory", "list_memories", {"limit": 50}))["memories"]
        elif sub == "search" and rest:
            found = (await ask("memory", "search_memories", {"query": " ".join(rest), "limit": 10}))[
                "memories"
            ]
        elif sub == "store" and len(rest) >= 2:
            reply = await ask("memory", "store_memory", {"key": rest[0], "value": " ".join(rest[1:])})
            self.console.print(f"remembered [cyan]{escape(reply['key'])}[/cyan]")
            return
        elif sub == "forget" and rest:
            reply = await ask("memory", "delete_memory", {"key": rest[0]})
            self.console.print("forgotten" if reply.get("deleted") else "nothing to forget")
            return
        else:
            self.console.print("usage: /memory [list | search Q | store KEY VALUE | forget KEY]")
            return
        if not found:
            self.console.print("[dim]no memories[/dim]")
        for m in found:
            self.console.print(
                f"[cyan]{escape(str(m['key']))}[/cyan] = {escape(str(m.get('value')))} [dim]{m.get('scope')}/{m.get('tier', '')}[/dim]"
            )

    async def _goal(self, args: list[str]) -> None:
        if args:
            op = await pick_op(self.backend, "goals", ("set_goal",))
            reply = await self.backend.ask("goals", op, {"text": " ".join(args), "session_id": self.session})
            self.console.print(f"goal set [dim]{escape(str(reply.get('goal_id', '')))}[/dim]")
            return
        op = await pick_op(self.backend, "goals", ("list_goals",))
        goals = (await self.backend.ask("goals", op, {"session_id": self.session})).get("goals", [])
        if not goals:
            self.console.print("[dim]no goals[/dim]")
        for g in goals:
            text = g.get("text") or g.get("goal") or ""
            self.console.print(
                f"[cyan]{escape(str(g.get('goal_id', '')))}[/cyan] {escape(str(text))} [dim]{g.get('status', '')}[/dim]"
            )

    async def _approvals(self) -> None:
        approvals = (await self.backend.ask("guardrails", "list_approvals", {}))["approvals"]
        if not approvals:
            self.console.print("[dim]no approvals waiting[/dim]")
        for a in approvals:
            args = escape(_short(json.dumps(a["input"], ensure_ascii=False), 200))
            self.console.print(
                f"[yellow]{a['approval_id']}[/yellow] {escape(a['tool'])} {args} [dim]session={a['session_id']}[/dim]"
            )
