"""File intents: write, read and list files through the offered file tools."""

from __future__ import annotations

import re
from typing import Any

from ._plan import Intent, Item, Note, Outcome, ParseContext, Ref, Step
from ._text import REDACTED, SECRETS_BELONG, as_text, strip_quotes

_PATH = r"(?P<path>['\"`][^'\"`]+['\"`]|(?:[\w.~-]*/)*[\w~-][\w.~-]*\.[A-Za-z][A-Za-z0-9]{0,9}|(?:\.{1,2}/|/)?(?:[\w.~-]+/)+[\w.~-]*)"
_PATH_PARAMS = ("path", "file", "filename", "file_path", "filepath")
_DIR_PARAMS = ("path", "directory", "dir", "folder")
_CONTENT_PARAMS = ("content", "contents", "text", "data", "body")
_MAX_SHOWN = 2000
_PRONOUN = re.compile(r"^(?:it|that|this|them|the\s+(?:result|answer|contents?|output|text))$", re.I)

# As in _memory: a whitespace run is taken whole and a group after one starts with a non-space, so a long
# run is not rescanned once per split (these run on whatever a chat message holds).

_A_FILE = r"(?:(?:the\s+|a\s+|an\s+)?(?:new\s+)?(?:text\s+)?file\s+(?:(?:called|named)\s+)?)?"
_WRITE = [
    re.compile(
        rf"^(?:write|save|put|store)\s+(?!\s)(?P<content>.*?\S)\s+(?:to|in|into)\s+{_A_FILE}{_PATH}$",
        re.I,
    ),
    re.compile(
        rf"^(?:create|make|write|start)\s+{_A_FILE}{_PATH}\s+(?:with|containing|saying|that\s+says|which\s+says)"
        r"(?:\s*:)?\s+(?!\s)(?:the\s+(?!\s))?(?:(?:content|contents|text)\b)?\s*(?::\s*)?(?!\s)(?P<content>(?s:.+))$",
        re.I,
    ),
    re.compile(
        rf"^(?:write|append)\s+(?:to\s+)?(?:the\s+)?(?:file\s+)?{_PATH}\s*:\s*(?!\s)(?P<content>.+)$", re.I
    ),
    re.compile(rf"^(?:create|make|touch)\s+(?:an\s+)?(?P<content>)empty\s+{_A_FILE}{_PATH}$", re.I),
]
_READ = [
    re.compile(
        r"^(?:read|open|show(?:\s+me)?|display|print|cat|view|get)\s+(?:me\s+)?(?:the\s+)?(?:contents?\s+of\s+)?"
        rf"(?:the\s+)?(?:file\s+)?{_PATH}$",
        re.I,
    ),
    re.compile(
        rf"^(?:(?:show|tell)\s+me\s+)?what(?:'s|\s+is)\s+(?:in|inside)\s+(?:the\s+)?(?:file\s+)?{_PATH}$",
        re.I,
    ),
    re.compile(rf"^what\s+does\s+(?:the\s+)?(?:file\s+)?{_PATH}\s+(?:say|contain)$", re.I),
]
_READ_BACK = re.compile(
    r"^(?:read|show|display|print|give)\s+(?:me\s+)?(?:it|that|this|the\s+file|what\s+(?:it\s+says|is\s+in\s+it))"
    r"(?:\s+back)?(?:\s+to\s+me)?$|^what(?:'s|\s+is)\s+in\s+it(?:\s+now)?$",
    re.I,
)
_LIST_WORDS = re.compile(
    r"^(?:the\s+)?(?:lines?|items?|entries|list|words)\s*:?\s*(?!\s)(?P<items>.+)$", re.I
)
_LIST_SPLIT = re.compile(r"\s*,\s*(?:and\s+)?|\s+and\s+", re.I)


def _content(text: str) -> str:
    """What to write: a quoted value as it is; "the lines a, b and c" as the lines a, b and c."""
    text = text.strip()
    quoted = strip_quotes(text)
    if quoted != text:
        return quoted
    listed = _LIST_WORDS.match(text)
    if listed is None:
        return text
    lines = [strip_quotes(item) for item in _LIST_SPLIT.split(listed.group("items")) if item.strip()]
    return "\n".join(lines)


_LIST = [
    re.compile(
        r"^(?:list|show(?:\s+me)?|what)\s+(?:are\s+)?(?:all\s+)?(?:the\s+|my\s+)?files(?:\s+(?:are\s+)?(?:there\s+)?"
        r"(?:in|under|inside)\s+(?:the\s+)?(?:folder\s+|directory\s+|dir\s+)?(?P<dir>\S+?)|\s+are\s+there"
        r"|\s+do\s+(?:i|you|we)\s+have)?$",
        re.I,
    ),
    re.compile(r"^(?:ls|list\s+(?:the\s+)?(?:folder|directory|dir))(?:\s+(?P<dir>\S+))?$", re.I),
]


def _match(patterns: list[re.Pattern[str]], clause: str) -> re.Match[str] | None:
    return next((m for p in patterns if (m := p.match(clause))), None)


class WriteFile(Intent):
    """'write C to P', 'create a file P with C'; "write it to P" writes an earlier result."""

    name = "write_file"

    def parse(self, clause: str, ctx: ParseContext) -> list[Item] | None:
        match = _match(_WRITE, clause)
        if match is None:
            return None
        path, content = strip_quotes(match.group("path")), _content(match.group("content"))
        tool = ctx.toolbox.find("write_file")
        if tool is None:
            return [Note(f"I can't write to {path}: no file-writing tool is available here.", cannot=True)]
        if REDACTED in content:
            return [
                Note(
                    f"I can't write that to {path}: it holds a secret, which was removed from your message "
                    f"before I saw it, so nothing was written. {SECRETS_BELONG}",
                    cannot=True,
                    standalone=True,
                )
            ]
        value: str | Ref = content
        source = ctx.last_result() if _PRONOUN.match(content) else None
        if source is not None:
            # "read a.txt and write it to b.txt": the content is the earlier step's result.
            value = Ref(source.key) if isinstance(source, Step) else source.value
        content_param = ctx.toolbox.param(tool, _CONTENT_PARAMS)
        args = {ctx.toolbox.param(tool, _PATH_PARAMS): path, content_param: value}
        return [Step(ctx.key(), self.name, tool.name, args, subject=path, form=content_param)]

    def describe(self, step: Step, outcome: Outcome) -> str:
        written = as_text(outcome.call.input.get(step.form, ""))
        if not written:
            return f"I created {step.subject} (empty)."
        return f"I wrote {len(written)} character{'' if len(written) == 1 else 's'} to {step.subject}."


class ReadFile(Intent):
    """'read P', 'show me P', 'what is in P'; 'read it back' reads the file the request just wrote."""

    name = "read_file"

    def parse(self, clause: str, ctx: ParseContext) -> list[Item] | None:
        match = _match(_READ, clause)
        if match is not None:
            path = strip_quotes(match.group("path"))
        elif _READ_BACK.match(clause):
            earlier = [
                item.subject
                for item in ctx.items
                if isinstance(item, Step) and item.intent in (WriteFile.name, ReadFile.name)
            ]
            if not earlier:
                return [Note(f'I can\'t tell which file "{clause}" means.', cannot=True)]
            path = earlier[-1]
        else:
            return None
        tool = ctx.toolbox.find("read_file")
        if tool is None:
            return [Note(f"I can't read {path}: no file-reading tool is available here.", cannot=True)]
        args = {ctx.toolbox.param(tool, _PATH_PARAMS): path}
        return [Step(ctx.key(), self.name, tool.name, args, subject=path, produces=True)]

    def describe(self, step: Step, outcome: Outcome) -> str:
        text = outcome.text
        if len(text) > _MAX_SHOWN:
            text = text[:_MAX_SHOWN] + "\n[...]"
        if not text:
            return f"{step.subject} is empty."
        if outcome.untrusted:
            # Outside content is shown as quoted data, never as the model's own words.
            return f"Here is {step.subject} (its content, quoted as data):\n{quote_block(text)}"
        return f"Here is {step.subject}:\n{text}"


def quote_block(text: str) -> str:
    fence = "```"
    while fence in text:
        fence += "`"
    return f"{fence}\n{text}\n{fence}"


class ListFiles(Intent):
    """'list the files (in D)', 'ls D'."""

    name = "list_files"

    def parse(self, clause: str, ctx: ParseContext) -> list[Item] | None:
        match = _match(_LIST, clause)
        if match is None:
            return None
        directory = strip_quotes(match.group("dir") or "")
        tool = ctx.toolbox.find("list_files")
        where = directory or "the workspace"
        if tool is None:
            return [
                Note(
                    f"I can't list the files in {where}: no file-listing tool is available here.", cannot=True
                )
            ]
        args: dict[str, Any] = {}
        param = ctx.toolbox.has_param(tool, _DIR_PARAMS)
        if directory or (param and param in ctx.toolbox.required(tool)):
            args[param or _DIR_PARAMS[0]] = directory or "."
        return [Step(ctx.key(), self.name, tool.name, args, subject=where, produces=True)]

    def describe(self, step: Step, outcome: Outcome) -> str:
        names = _file_names(outcome)
        if names is None:
            return f"The {step.tool} tool returned:\n{quote_block(outcome.text)}"
        if not names:
            return f"There are no files in {step.subject}."
        return f"Files in {step.subject}: {', '.join(names)}."


def _file_names(outcome: Outcome) -> list[str] | None:
    """The names a listing holds, or None when its shape is not one the model knows."""
    data = outcome.data
    if isinstance(data, dict):
        data = next((data[k] for k in ("files", "entries", "items", "result", "names") if k in data), None)
    if isinstance(data, list):
        return [as_text(i.get("name") or i.get("path")) if isinstance(i, dict) else as_text(i) for i in data]
    if isinstance(data, str):
        return [line.strip() for line in data.splitlines() if line.strip()]
    return None
