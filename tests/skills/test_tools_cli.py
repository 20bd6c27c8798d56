"""``minihermes tools``: list and delete a self-written tool on the local data dir (issue 23)."""

from __future__ import annotations

import json

from tests.cli._served import cli, ok_json

TOOL = {
    "name": "add_numbers",
    "description": "Add two numbers",
    "parameters": {"a": "number", "b": "number"},
    "code": "def run(a, b):\n    return {'sum': a + b}\n",
    "test": "assert run(a=2, b=3) == {'sum': 5}\n",
}


def test_a_tool_is_listed_shown_and_deleted_from_the_command_line(tmp_path):
    d = ["--data-dir", str(tmp_path / "data")]
    made = cli("call", "skill_tools", "create_tool", json.dumps(TOOL), *d)
    assert made.exit_code == 0 and json.loads(made.stdout)["status"] == "ok", made.output
    assert [t["name"] for t in ok_json("tools", "list", *d)["tools"]] == ["add_numbers"]
    table = cli("tools", "list", *d)
    assert table.exit_code == 0 and "add_numbers" in table.stdout
    assert ok_json("tools", "show", "add_numbers", *d)["code"] == TOOL["code"]
    gone = ok_json("tools", "delete", "add_numbers", *d)
    assert gone["deleted"] is True and gone["versions"] == 1
    assert ok_json("tools", "list", *d)["tools"] == []
    again = cli("tools", "delete", "add_numbers", *d)
    assert again.exit_code == 1 and "not_found" in again.stderr
    listed = cli("call", "tool_executor", "list_tools", "{}", *d)
    assert "add_numbers" not in [t["name"] for t in json.loads(listed.stdout)["tools"]]
