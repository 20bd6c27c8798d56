"""File intents: write, read and list files through the offered file tools."""

from __future__ import annotations

import re
from typing import Any

from ._plan import Intent, Item, Note, Outcome, ParseContext, Ref, Step
from ._text import as_text, strip_quotes

_PATH = r"(?P<path>['\"`][^'\"`]+['\"`]|(?:[\w.~-]*/)*[\w~-][\w.~-]*\.[A-Za-z][A-Za-z0-9]{0,9}|(?:\.{1,2}/|/)?(?:[\w.~-]+/)+[\w.~-]*)"
_PATH_PARAMS = ("path", "file", "filename", "file_path", "filepath")
_DIR_PARAMS = ("path", "directory", "dir", "folder")
_CONTENT_PARAMS = ("content", "contents", "text", "data", "body")
_MAX_SHOWN = 2000
_PRONOUN = re.compile(r"^(?:it|that|this|them|the\s+(?:result|answer|contents?|output|text))$", re.I)

# As in _memory: a whitespace run is taken whole and a group after one starts with a non-space, so a long
# run is not rescanned once per split (these run on whatever a chat message holds).

_WRITE = [
    re.compile(
        rf"^(?:write|save|put|store)\s+(?!\s)(?P<content>.*?\S)\s+(?:to|in|into)\s+(?:the\s+)?(?:file\s+)?{_PATH}$",
        re.I,
    ),
    re.compile(
        rf"^(?:create|make|write)\s+(?:a\s+|the\s+)?(?:new\s+)?file\s+(?:called\s+|named\s+)?{_PATH}\s+"
        r"(?:with|containing|saying)\s+(?!\s)(?:the\s+(?!\s))?(?:content|text)?\s*(?::\s*)?(?!\s)(?P<content>.+)$",
        re.I,
    ),
    re.compile(
        rf"^(?:write|append)\s+(?:to\s+)?(?:the\s+)?(?:file\s+)?{_PATH}\s*:\s*(?!\s)(?P<content>.+)$", re.I
    ),
]
_READ = [
    re.compile(
        r"^(?:read|open|show(?:\s+me)?|display|print|cat|view|get)\s+(?:me\s+)?(?:the\s+)?(?:contents?\s+of\s+)?"
        rf"(?:the\s+)?(?:file\s+)?{_PATH}$",
        re.I,
    ),
    re.compile(rf"^what(?:'s|\s+is)\s+in\s+(?:the\s+)?(?:file\s+)?{_PATH}$", re.I),
]
_LIST = [
    re.compile(
        r"^(?:list|show(?:\s+me)?|what)\s+(?:are\s+)?(?:all\s+)?(?:the\s+)?files(?:\s+(?:are\s+)?(?:there\s+)?"
        r"(?:in|under|inside)\s+(?:the\s+)?(?:folder\s+|directory\s+|dir\s+)?(?P<dir>\S+?))?$",
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
        path, content = strip_quotes(match.group("path")), strip_quotes(match.group("content"))
        tool = ctx.toolbox.find("write_file")
        if tool is None:
            return [Note(f"I can't write to {path}: no file-writing tool is available here.")]
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
        return f"I wrote {len(written)} characters to {step.subject}."


class ReadFile(Intent):
    """'read P', 'show me P', 'what is in P'."""

    name = "read_file"

    def parse(self, clause: str, ctx: ParseContext) -> list[Item] | None:
        match = _match(_READ, clause)
        if match is None:
            return None
        path = strip_quotes(match.group("path"))
        tool = ctx.toolbox.find("read_file")
        if tool is None:
            return [Note(f"I can't read {path}: no file-reading tool is available here.")]
        args = {ctx.toolbox.param(tool, _PATH_PARAMS): path}
        return [Step(ctx.key(), self.name, tool.name, args, subject=path, produces=True)]

    def describe(self, step: Step, outcome: Outcome) -> str:
        text = outcome.value or outcome.content
        if len(text) > _MAX_SHOWN:
            text = text[:_MAX_SHOWN] + "\n[...]"
        return f"Here is {step.subject}:\n{text}" if text else f"{step.subject} is empty."


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
            return [Note(f"I can't list the files in {where}: no file-listing tool is available here.")]
        args: dict[str, Any] = {}
        param = ctx.toolbox.has_param(tool, _DIR_PARAMS)
        if directory or (param and param in ctx.toolbox.required(tool)):
            args[param or _DIR_PARAMS[0]] = directory or "."
        return [Step(ctx.key(), self.name, tool.name, args, subject=where, produces=True)]

    def describe(self, step: Step, outcome: Outcome) -> str:
        names = _file_names(outcome)
        if not names:
            return f"There are no files in {step.subject}."
        return f"Files in {step.subject}: {', '.join(names)}."


def _file_names(outcome: Outcome) -> list[str]:
    data = outcome.data
    if isinstance(data, dict):
        data = next((data[k] for k in ("files", "entries", "items", "result", "names") if k in data), None)
    if isinstance(data, list):
        return [as_text(i.get("name") or i.get("path")) if isinstance(i, dict) else as_text(i) for i in data]
    if isinstance(data, str):
        return [line.strip() for line in data.splitlines() if line.strip()]
    return []
