"""What the simulated model says without a tool: greetings, "what can you do", and "I can't" (a refusal says
what could not be done, what it understands here, and where to get more)."""

from __future__ import annotations

import re

from ._plan import Note, Plan
from ._text import ROLE_NAMES, Toolbox

_THANKS = ("thanks", "thank you", "cheers", "thx")


def too_long(size: str, limit: int) -> str:
    unit = size.split(" ", 1)[1]
    return (
        f"I can't work with a message of {size}: I'm the offline simulated model and I read requests of up "
        f"to {limit:,} {unit}. Please send a shorter one."
    )


_CAPABILITIES = (
    (("calculator",), "arithmetic", '"what is 12 * 7", "calculate 1,250 + 750, then double it"'),
    (("memory_store",), "remembering facts", '"my dog\'s name is Biscuit, please remember that"'),
    (
        ("memory_recall", "memory_search"),
        "recalling them",
        '"what\'s my dog called?", "search my memory for dog"',
    ),
    (("memory_delete",), "forgetting them", '"forget my dog\'s name"'),
    (("write_file",), "writing files", '"make a file called packing.txt with: socks, charger"'),
    (("read_file",), "reading files", '"read packing.txt"'),
    (("list_files",), "listing files", '"list the files"'),
    (
        ("kanban_create", "kanban_list"),
        "kanban tasks",
        '"add renew insurance to my to-do list", "show my to-do list"',
    ),
    (
        ("cron_schedule", "cron_list", "cron_pause", "cron_resume", "cron_delete"),
        "reminders",
        '"remind me every Monday at 9am to water the plants", "list my reminders"',
    ),
    (("goal_set", "goal_list", "goal_complete", "goal_clear"), "goals", '"my goal is to run a marathon"'),
)
"""Each family the model understands, with examples, listed when any of its tools is offered or can be found
through find_tools (kanban may be offered with kanban_list but not kanban_create, as a turn that only reads
the board is)."""
OFFLINE_DOCS = "docs/offline-model.md"
PROVIDER_DOCS = "docs/providers.md"
_HOW_ARE_YOU = ("how are you", "how's it going", "how are things", "how do you do")
_WHO = ("who are you", "what are you", "what is your name", "what's your name")
_HELP = (
    "help", "help me", "can you help me", "what can you do", "what do you understand", "what can i ask",
    "what can i ask you",
)  # fmt: skip
_BYE = ("bye", "goodbye", "good night", "see you", "see you later")


def understood_tools(toolbox: Toolbox) -> list[str]:
    """The offered tools the offline model knows how to use from plain requests (it lists no others)."""
    return [tool.name for role in ROLE_NAMES if (tool := toolbox.find(role)) is not None]


def _families(toolbox: Toolbox) -> list[tuple[str, str]]:
    """(family, examples) of what the model can do in this chat: its tools are offered, or find_tools finds
    them."""
    return [
        (what, examples)
        for roles, what, examples in _CAPABILITIES
        if any(toolbox.find(role) is not None or toolbox.findable(role) is not None for role in roles)
    ]


def _abilities(toolbox: Toolbox) -> str:
    found = [what for what, _ in _families(toolbox)]
    if not found:
        return "no tools are available in this chat, so I can only chat"
    listed = ", ".join(found[:-1]) + (f" and {found[-1]}" if len(found) > 1 else found[0])
    return f"I understand simple requests for {listed}"


def _pointer() -> str:
    return (
        f"I'm the offline model built into MiniHermes; what I understand is in {OFFLINE_DOCS}. "
        f"For anything else, connect a real model: see {PROVIDER_DOCS}."
    )


def _quote(text: str) -> str:
    text = " ".join(text.split())
    return f'"{text if len(text) <= 200 else text[:200] + "..."}"'


def chat_reply(text: str, unknown: list[str], toolbox: Toolbox) -> str:
    # What is left to answer: the clauses that were not courtesies ("hi, how are you" -> "how are you").
    asked = " ".join(unknown) if unknown else text
    lowered = " ".join(re.sub(r"[^\w\s']", " ", asked.lower()).split())
    tools = understood_tools(toolbox)
    offer = f"Here I can use: {', '.join(tools)}." if tools else "No tools I understand are available here."
    if not unknown:  # greetings, thanks and goodbyes only
        if any(word in lowered for word in _THANKS):
            return (
                "You're welcome! Anything else?" if not lowered.endswith(_BYE) else "You're welcome. Goodbye!"
            )
        if lowered.endswith(_BYE):
            return "Goodbye!"
        return (
            f"Hello! I'm MiniHermes, running on the offline model. {_abilities(toolbox)}. {offer} "
            "What would you like to do?"
        )
    if lowered in _HOW_ARE_YOU:
        return "I'm fine, thanks! What would you like to do?"
    if lowered in _WHO:
        return f"I'm MiniHermes, running on the offline model. {_abilities(toolbox)}. {offer}"
    if lowered in _HELP:
        return _help(toolbox, offer)
    if lowered in _BYE:
        return "Goodbye!"
    verb = "answer" if text.strip().endswith("?") or lowered.split(" ", 1)[0] in _QUESTION else "do"
    return f"I can't {verb} {_quote(text)}: {_abilities(toolbox)}. {_pointer()}"


def _help(toolbox: Toolbox, offer: str) -> str:
    """What the model can do here, each family with examples of how to ask, and nothing it cannot."""
    families = _families(toolbox)
    if not families:
        return f"{_abilities(toolbox)}. {_pointer()}"
    lines = [f"- {what}: {examples}" for what, examples in families]
    return (
        f"{_abilities(toolbox)}. For example:\n"
        + "\n".join(lines)
        + f"\nMore examples: {OFFLINE_DOCS}. {offer} "
        f"For anything else, connect a real model: see {PROVIDER_DOCS}."
    )


_QUESTION = (
    "what",
    "who",
    "why",
    "how",
    "when",
    "where",
    "which",
    "what's",
    "is",
    "are",
    "can",
    "do",
    "does",
)


def refusal(plan: Plan, cannot: list[Note], toolbox: Toolbox) -> str:
    """Nothing done: what could not be, and how to get it done."""
    parts = [note.text for note in cannot]
    if plan.unknown:
        parts.append(
            f"I can't do {' or '.join(_quote(c) for c in plan.unknown)}: I don't understand that part."
        )
    doable = [item for item in plan.items if not (isinstance(item, Note) and item.cannot)]
    if doable:
        parts.append("So I haven't done any of the request (I do a request whole or not at all).")
    if plan.unknown or not all(note.standalone for note in cannot):
        abilities = _abilities(toolbox)
        parts.append(f"{abilities[:1].upper()}{abilities[1:]}. {_pointer()}")
    text = " ".join(parts)
    return text if text.startswith("I can't") else f"I can't do that. {text}"
