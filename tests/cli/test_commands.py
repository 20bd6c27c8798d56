"""Scripting commands: the same ops embedded (``--data-dir``) and against a server (``--url``), JSON output,
"not enabled" for absent subsystems, structured errors as exit codes."""

from __future__ import annotations

import json

import pytest
from rich.console import Console
from typer.testing import CliRunner

from minihermes.cli.commands import NotEnabled, op_command, pick_op
from minihermes.cli.main import app
from minihermes.cli.skills import export_files, import_files, skill_files

runner = CliRunner()


def _json(result) -> dict:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_memory_commands_on_the_local_data_dir(tmp_path):
    d = ["--data-dir", str(tmp_path / "data")]
    stored = _json(runner.invoke(app, ["memory", "store", "colour", "teal", "--tier", "core", *d, "--json"]))
    assert stored["key"] == "colour" and stored["created"] is True
    listed = _json(runner.invoke(app, ["memory", "list", *d, "--json"]))
    assert [(m["key"], m["value"], m["tier"]) for m in listed["memories"]] == [("colour", "teal", "core")]
    found = _json(runner.invoke(app, ["memory", "search", "teal", *d, "--json"]))
    assert found["memories"][0]["key"] == "colour"
    table = runner.invoke(app, ["memory", "list", *d])
    assert table.exit_code == 0 and "colour" in table.stdout and "teal" in table.stdout
    forgot = _json(runner.invoke(app, ["memory", "forget", "colour", *d, "--json"]))
    assert forgot["deleted"] is True
    assert _json(runner.invoke(app, ["memory", "list", *d, "--json"]))["memories"] == []


def test_memory_list_hides_episodes_unless_asked(tmp_path):
    d = ["--data-dir", str(tmp_path / "data")]
    fact = {"key": "colour", "value": "teal"}
    episode = {"key": "episode:1", "value": "asked about the weather", "kind": "episodic"}
    for args in (fact, episode):
        _json(runner.invoke(app, ["call", "memory", "store_memory", json.dumps(args), *d]))

    def keys(*options: str) -> list[str]:
        listed = _json(runner.invoke(app, ["memory", "list", *options, *d, "--json"]))
        return sorted(m["key"] for m in listed["memories"])

    assert keys() == ["colour"]
    assert keys("--episodes") == ["colour", "episode:1"]
    assert keys("--kind", "episodic") == ["episode:1"]
    assert keys("--episodes", "--offset", "1") == ["episode:1"]


def test_errors_and_absent_actors_have_their_exit_codes(tmp_path):
    d = ["--data-dir", str(tmp_path / "data")]
    bad = runner.invoke(app, ["memory", "store", "k", "v", "--scope", "galaxy", *d])
    assert bad.exit_code == 1 and "invalid_argument" in bad.stderr and "scope" in bad.stderr
    absent = runner.invoke(app, ["call", "no_such_actor", "op", *d])
    assert absent.exit_code == 3 and "not enabled" in absent.stderr
    not_json = runner.invoke(app, ["call", "memory", "list_memories", "{nope", *d])
    assert not_json.exit_code == 2
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    unusable = runner.invoke(app, ["memory", "list", "--data-dir", str(blocked / "data")])
    assert unusable.exit_code == 1 and "error" in unusable.stderr and "Traceback" not in unusable.output
    listed = _json(runner.invoke(app, ["call", "tool_executor", "list_tools", "{}", *d]))
    assert "calculator" in [t["name"] for t in listed["tools"]]


def test_a_running_server_is_reached_with_url(tmp_path):
    # A url nobody listens on: a connection failure is a structured error, not a traceback.
    out = runner.invoke(app, ["memory", "list", "--url", "http://127.0.0.1:9", "--json"])
    assert out.exit_code == 1 and "connection_failed" in out.stderr


async def test_kanban_ops_through_the_http_api(remote):
    console = Console(record=True)
    created = await op_command("kanban", ("create", "create_task"), {"title": "Ship", "body": None})(
        remote, console
    )
    task_id = created["task_id"]
    moved = await op_command("kanban", ("move",), {"task_id": task_id, "status": "doing"})(remote, console)
    assert moved["to"] == "doing"
    listed = await op_command("kanban", ("list",), {"status": "doing"})(remote, console)
    assert [t["title"] for t in listed["tasks"]] == ["Ship"]
    from minihermes.cli._backend import CommandError

    with pytest.raises(CommandError) as e:
        await op_command("kanban", ("show",), {"task_id": "t99"})(remote, console)
    assert e.value.code == "not_found" and e.value.field == "task_id"
    with pytest.raises(NotEnabled, match="goals is not enabled"):
        await pick_op(remote, "goals", ("list_goals",))
    with pytest.raises(CommandError, match="offers none of"):
        await pick_op(remote, "kanban", ("archive_board",))


async def test_skills_import_and_export_with_progress(remote, tmp_path):
    src = tmp_path / "in"
    for name in ("deploy", "triage"):
        (src / name).mkdir(parents=True)
        (src / name / "SKILL.md").write_text(f"---\nname: {name}\n---\nSteps for {name}.\n")
    (src / "broken").mkdir()
    (src / "broken" / "SKILL.md").write_text("no front matter")
    files = skill_files(src)
    assert [p.parent.name for p in files] == ["broken", "deploy", "triage"]
    progress = Console(record=True, width=120)
    reply = await import_files(remote, progress, files)
    assert [s["name"] for s in reply["imported"]] == ["deploy", "triage"]
    assert reply["status"] == "partial" and reply["failed"][0]["file"].endswith("broken/SKILL.md")
    shown = progress.export_text()  # export_text empties the record: read it once
    assert "importing skills" in shown and "3/3" in shown

    out = tmp_path / "out"
    exported = await export_files(remote, Console(record=True), out, "")
    assert exported["count"] == 2
    assert (out / "deploy" / "SKILL.md").read_text() == "---\nname: deploy\n---\nSteps for deploy.\n"


async def test_export_never_writes_outside_the_folder(remote, tmp_path):
    await remote.ask("skill_store", "import_skills", {"documents": ["---\nname: ../../evil\n---\nx\n"]})
    out = tmp_path / "out"
    await export_files(remote, Console(record=True), out, "")
    written = [p for p in tmp_path.rglob("SKILL.md")]
    assert written and all(out in p.parents for p in written)


def test_keys_are_made_listed_and_revoked_in_the_named_data_dir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    d = ["--data-dir", str(tmp_path / "keys-dir")]
    made = runner.invoke(app, ["keys", "create", "--tenant", "acme", "--principal", "ann", *d])
    assert made.exit_code == 0, made.output
    key = made.stdout.strip()
    (row,) = runner.invoke(app, ["keys", "list", *d]).stdout.splitlines()
    key_id = row.split("\t")[0]
    assert row.split("\t")[1:5] == ["acme", "ann", "user", "active"] and key not in row
    assert runner.invoke(app, ["keys", "revoke", key_id, *d]).stdout.strip() == "revoked"
    assert runner.invoke(app, ["keys", "list", *d]).stdout.split("\t")[4] == "revoked"
    assert not (tmp_path / "data").exists()  # the default data dir was never used
