"""What the simulated model says when a tool call failed: what happened, in words, and what to do next.

The answer names what it could not do ("I couldn't read packing.txt"), says why in the words of the error's
code ("packing.txt does not exist", "a reviewer denied it, so nothing was changed"), and gives the next step
that fits the code (check the file name, ask a reviewer, ask an admin, try again later ...). It never quotes
a tool's raw JSON: an error without a readable message is named by its code.
"""

from __future__ import annotations

import json
from typing import Any

from ._plan import Outcome, Step
from ._text import ROLE_NAMES, as_text

_ACTIONS: dict[str, tuple[str, str]] = {
    "read_file": ("read {}", "path"),
    "write_file": ("write {}", "path"),
    "list_files": ("list the files", ""),
    "calculator": ("calculate {}", "expression"),
    "memory_store": ("remember {}", "key"),
    "memory_recall": ("look up {}", "key"),
    "memory_search": ("search your memory for {}", "query"),
    "memory_delete": ("forget {}", "key"),
    "kanban_create": ("add '{}' to your to-do list", "title"),
    "kanban_list": ("show your to-do list", ""),
    "cron_schedule": ("schedule that", ""),
    "cron_list": ("list your reminders", ""),
    "cron_pause": ("pause that reminder", ""),
    "cron_resume": ("resume that reminder", ""),
    "cron_delete": ("delete that reminder", ""),
    "goal_set": ("set the goal '{}'", "goal"),
    "goal_list": ("list your goals", ""),
    "goal_complete": ("complete that goal", ""),
    "goal_clear": ("clear that goal", ""),
}
"""What a call of each role does, as "I couldn't ...", and the input it names (if any)."""
_FILES = frozenset({"read_file", "write_file", "list_files"})
_NEXT = {
    "invalid_input": "Tell me the request again with that detail corrected.",
    "invalid_argument": "Tell me the request again with that detail corrected.",
    "permission_denied": "An admin can give you access if you need it.",
    "timeout": "Try again in a moment, or ask for something smaller.",
    "unavailable": "Try again later; an admin can check that the service is running.",
    "conflict": "Check its current state, then ask again.",
    "exists": "Ask me to overwrite it, or pick another name.",
    "too_large": "Ask for something smaller.",
}
"""The next step for an error code (``not_found`` and ``denied`` depend on the call: see ``failure``)."""


def failure(step: Step, outcome: Outcome) -> str:
    """The answer's sentences for ``step``, whose call failed with ``outcome``."""
    role = _role(step.tool)
    args = outcome.call.input if isinstance(outcome.call.input, dict) else {}
    action = _action(role, step.tool, args)
    said = _words(outcome)
    # A plain-text denial ("[denied: read_file]", as some agents write it) is a denial too.
    code = outcome.code or ("denied" if said.lower().startswith("[denied") else "")
    if code == "denied":
        what, then = _denied(outcome, said)
        return f"I couldn't {action}: {what}. {then}"
    if code == "not_found":
        path = _arg(args, "path")
        if role in _FILES and path and path not in said:
            said = f"{path} does not exist"
        then = (
            "Check the file name (ask me to list the files to see what is there)."
            if role in _FILES
            else "Check the name or id (ask me to list them to see what there is)."
        )
        return f"I couldn't {action}: {said or 'it was not found'}. {then}"
    if code == "tool_not_allowed":
        return f"I couldn't {action}: the {step.tool} tool is not available in this turn."
    if code in _NEXT:
        why = {
            "permission_denied": "you don't have permission for that",
            "timeout": f"the {step.tool} tool took too long and was stopped",
            "unavailable": f"the {step.tool} tool is not available right now",
        }.get(code, "")
        detail = f"{why} ({said})" if why and said else why or said or f"the {step.tool} tool refused it"
        return f"I couldn't {action}: {detail}. {_NEXT[code]}"
    reported = f": {said}" if said else f" ({code})" if code else ""
    return (
        f"I couldn't {action}: the {step.tool} tool returned an error{reported}. I stopped there instead of "
        "retrying; if something in the request was wrong, correct it and ask again."
    )


def _denied(outcome: Outcome, said: str) -> tuple[str, str]:
    """(what happened, what to do next) for a denied call: by a reviewer, or by the guardrails' rules."""
    error = outcome.data.get("error") if isinstance(outcome.data, dict) else None
    reason = str(error.get("reason") or "") if isinstance(error, dict) else ""
    if reason == "reviewer" or (not reason and "reviewer" in said):
        return (
            "a reviewer denied it, so nothing was changed",
            "If it should still be done, ask again and have a reviewer approve it.",
        )
    if reason == "lockdown":
        return (
            "the guardrails are in lockdown, so nothing that changes things runs",
            "An admin can end the lockdown.",
        )
    if reason == "unknown_tool":
        return (
            "no such tool is known here, so nothing was changed",
            "An admin can check that it is registered.",
        )
    if reason == "loop":
        return f"I had already tried it several times ({said})", "Tell me what to change, and I'll try that."
    because = f" ({said})" if said else ""
    return (
        f"the guardrails did not allow it{because}, so nothing was changed",
        "An admin can change the guardrails policy if it should be allowed.",
    )


def _words(outcome: Outcome) -> str:
    """The error's own message, when it is words (never raw JSON), without a final period."""
    text = (outcome.error or "").strip()
    if text[:1] in ("{", "[", '"'):
        try:
            json.loads(text)
        except ValueError:
            pass  # "[denied: read_file]" is words
        else:
            return ""
    return text.rstrip(".")


def _role(tool: str) -> str:
    return next((role for role, names in ROLE_NAMES.items() if tool in names), tool)


def _arg(args: dict[str, Any], name: str) -> str:
    value = args.get(name)
    text = " ".join(as_text(value).split()) if value not in (None, "") else ""
    return text if len(text) <= 60 else text[:59] + "…"


def _action(role: str, tool: str, args: dict[str, Any]) -> str:
    template, name = _ACTIONS.get(role, ("", ""))
    if not template:
        return f"use {tool}"
    if not name:
        return template
    value = _arg(args, name)
    return template.format(value) if value else template.replace(" '{}'", "").replace(" {}", " that")
