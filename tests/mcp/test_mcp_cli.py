"""``minihermes mcp ...`` on a local data dir: add (streamable HTTP), list, remove, and bad input."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from minihermes.cli.main import app

runner = CliRunner()


def test_add_list_remove_a_server(tmp_path, http_server):
    d = ["--data-dir", str(tmp_path / "data")]
    added = runner.invoke(
        app,
        [
            "mcp",
            "add",
            "web",
            "--server-url",
            http_server,
            "--header",
            "X-Token: abc",
            "--tool",
            "add",
            "--no-review",
            *d,
            "--json",
        ],
    )
    assert added.exit_code == 0, added.output
    assert json.loads(added.stdout)["tools"] == ["mcp_web_add"]

    listed = runner.invoke(app, ["mcp", "list", *d, "--json"])
    (server,) = json.loads(listed.stdout)["servers"]
    assert server["name"] == "web" and server["review"] is False and server["headers"] == {"X-Token": "***"}
    table = runner.invoke(app, ["mcp", "list", *d])
    assert "web" in table.stdout and "mcp_web_add" in table.stdout

    tools = json.loads(runner.invoke(app, ["call", "tool_executor", "list_tools", "{}", *d]).stdout)["tools"]
    assert "mcp_web_add" in [t["name"] for t in tools]

    removed = runner.invoke(app, ["mcp", "remove", "web", *d, "--json"])
    assert json.loads(removed.stdout)["removed_tools"] == ["mcp_web_add"]
    again = runner.invoke(app, ["mcp", "remove", "web", *d])
    assert again.exit_code == 1 and "not_found" in again.stderr


def test_bad_input_is_refused_before_anything_runs(tmp_path):
    d = ["--data-dir", str(tmp_path / "data")]
    both = runner.invoke(app, ["mcp", "add", "x", "--command", "c", "--server-url", "http://h/mcp", *d])
    assert both.exit_code == 2
    bad_env = runner.invoke(app, ["mcp", "add", "x", "--command", "c", "--env", "NOEQUALS", *d])
    assert bad_env.exit_code == 2 and "NAME=VALUE" in bad_env.output
    bad_url = runner.invoke(app, ["mcp", "add", "x", "--server-url", "file:///etc/passwd", *d])
    assert bad_url.exit_code == 1 and "invalid_argument" in bad_url.stderr and "url" in bad_url.stderr
