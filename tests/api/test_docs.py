"""docs/http-api.md stays true: its permission table is the code's, and its curl examples work as written."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from minihermes.app import build_agent_node, default_config
from minihermes.permissions import ACCESS_ROLES, DEFAULT_PERMISSIONS

DOC = Path(__file__).resolve().parents[2] / "docs" / "http-api.md"


def test_permission_table_in_the_docs_matches_the_code(tmp_path: Path) -> None:
    # What the agent app enforces: each op's declared access class under the table's overrides.
    effective = DEFAULT_PERMISSIONS.for_node(build_agent_node(default_config(tmp_path / "data")))
    text = DOC.read_text()
    block = text.split("<!-- permission-table:start -->")[1].split("<!-- permission-table:end -->")[0]
    rows = re.findall(r"^\| `([^`]+)` \| `([^`]+)` \| (\w+) \| ([\w, ]+) \|$", block, re.M)
    documented = {(a, o): acc for a, o, acc, _ in rows}
    assert documented == effective.entries()
    for _, _, acc, roles in rows:
        assert set(roles.split(", ")) == ACCESS_ROLES[acc]


async def test_seed_curl_examples_work_as_written(client: Any) -> None:
    c = client(base_url="http://localhost:8091")
    examples = re.findall(
        r"curl -X POST http://localhost:8091(/api/v1/actors/\S+)\s*(?:\\\n\s*)?-d '(.*?)'",
        DOC.read_text(),
        re.S,
    )
    assert len(examples) >= 9
    ran = 0
    for path, body in examples:
        actor = path.split("/")[4]
        # curl -d sends application/x-www-form-urlencoded
        r = await c.post(path, content=body, headers={"content-type": "application/x-www-form-urlencoded"})
        if actor == "agent":  # not in this test node; the agent's own tests run these flows end to end
            assert r.status_code == 404 and r.json()["error"]["code"] == "actor_not_found"
            continue
        assert r.status_code == 200, (path, r.text)
        ran += 1
    assert ran >= 7
