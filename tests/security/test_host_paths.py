"""Issue 23, hole 1: paths on the host are the operator's, never a tenant's.

The attack: a tenant admin's ``skill_store.import_skills {path}`` walked the data dir and ``export_skills
{path}`` wrote anywhere; a skill folder named like the data dir brought ``credential.key`` and the database
in as "skill files", read back with ``read_skill_file``. Here: every host path is refused by ask and over HTTP,
an archive named like the data dir imports only its own bytes, no skill, MCP or file op of a served node gives
back a byte of the key or the database, the CLI's folder import/export stays in its root and out of the data
dir, and a secret-shaped import is flagged to the approving admin.
"""

from __future__ import annotations

import base64
import io
import json
import os
import re
import tarfile
import zipfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from minihermes.app import build_agent_node, default_config
from minihermes.cli.main import app as cli_app
from minihermes.runtime import ActorError, Node, RequestContext
from minihermes.skills import bundles
from minihermes.tools.sandbox import isolation_report

from .._server import serve_process
from .world import SECRET, context, token

DB_HEADER = b"SQLite format 3"


def host_paths(data: Path) -> list[str]:
    """Ways to name a folder of the server: absolute, relative, ``~``, the data dir and what is in it."""
    return [
        str(data),
        str(data / "credential.key"),
        str(data / "workspaces"),
        str(data.parent),
        "/",
        "/etc",
        "data",
        "./data",
        "../..",
        "~",
        "~/.ssh",
        "skills",
    ]


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def skill_md(name: str, body: str = "Steps.\n") -> bytes:
    return f"---\nname: {name}\ndescription: A skill called {name}.\n---\n{body}".encode()


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[Node]:
    node = build_agent_node(default_config(tmp_path / "data"))
    await node.start()
    yield node
    await node.stop(deadline=5)


# --------------------------------------------------------------------------------- by ask, any context


async def test_host_paths_are_refused_by_ask_whoever_asks(node: Node, tmp_path: Path) -> None:
    data = tmp_path / "data"
    archive = b64(bundles.write_zip({"ok/SKILL.md": skill_md("ok")}))
    # A tenant admin, another tenant's admin, a user, and the local owner's context: the context decides,
    # and no context is the operator's.
    for ctx in (context("ada"), context("gus"), context("alice"), RequestContext()):
        for path in host_paths(data):
            for op, extra in (
                ("import_skills", {}),
                ("import_skills", {"archive": archive, "approve": True}),
                ("export_skills", {"with_files": True}),
            ):
                with pytest.raises(ActorError) as e:
                    await node.ask("skill_store", op, {"path": path, **extra}, ctx=ctx)
                assert e.value.code == "permission_denied", (ctx.principal, op, path, e.value)
                assert e.value.details.get("field") == "path"
                assert "archive" in e.value.message or "download" in e.value.message
    # Nothing was imported with the refused archive, nothing written where an export was aimed.
    listed = await node.ask("skill_store", "list_skills", {}, ctx=context("ada"))
    assert listed["count"] == 0
    out = tmp_path / "exported"
    with pytest.raises(ActorError):
        await node.ask("skill_store", "export_skills", {"path": str(out)}, ctx=context("ada"))
    assert not out.exists()


# ------------------------------------------------------------------ an archive named like the data dir


def _crafted_zip(data: Path) -> bytes:
    name = data.name
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr(f"{name}/SKILL.md", skill_md(name))
        zf.writestr(f"{name}/notes.md", b"inside the archive\n")
        for member, target in (
            (f"{name}/credential.key", str(data / "credential.key")),  # absolute, into the data dir
            (f"{name}/minihermes.db", "../minihermes.db"),  # relative, out of the folder
            (f"{name}/db", f"../../{name}/minihermes.db"),
        ):
            link = zipfile.ZipInfo(member)
            link.external_attr = 0o120777 << 16
            zf.writestr(link, target)
        zf.writestr(f"{name}/../credential.key", b"forged-by-the-archive")
        zf.writestr(str(data / "credential.key"), b"forged-by-the-archive")
        zf.writestr(str(data / "workspaces" / "acme" / "planted.txt"), b"forged-by-the-archive")
    return buf.getvalue()


def _crafted_tar(data: Path) -> bytes:
    name = data.name
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:

        def add(member: str, content: bytes = b"", kind: bytes = tarfile.REGTYPE, target: str = "") -> None:
            info = tarfile.TarInfo(member)
            info.type = kind
            info.linkname = target
            info.size = len(content) if kind == tarfile.REGTYPE else 0
            tar.addfile(info, io.BytesIO(content) if kind == tarfile.REGTYPE else None)

        add(f"{name}/SKILL.md", skill_md(name))
        add(f"{name}/notes.md", b"inside the archive\n")
        add(f"{name}/key", kind=tarfile.SYMTYPE, target=str(data / "credential.key"))
        add(f"{name}/hard", kind=tarfile.LNKTYPE, target=str(data / "credential.key"))
        add(f"{name}/db", kind=tarfile.LNKTYPE, target="minihermes.db")
        add(f"{name}/../../credential.key", b"forged-by-the-archive")
        add(str(data / "minihermes.db"), b"forged-by-the-archive")
    return buf.getvalue()


async def _all_file_bytes(node: Node, ctx: RequestContext) -> list[bytes]:
    """Every file of every version of every skill the admin sees, SKILL.md included."""
    out = []
    for skill in (await node.ask("skill_store", "list_skills", {}, ctx=ctx))["skills"]:
        for version in range(1, skill["versions"] + 1):
            got = await node.ask(
                "skill_store", "get_skill", {"skill_id": skill["skill_id"], "version": version}, ctx=ctx
            )
            for path in ["SKILL.md", *(f["path"] for f in got["skill"]["files"])]:
                f = await node.ask(
                    "skill_store",
                    "read_skill_file",
                    {"skill_id": skill["skill_id"], "path": path, "version": version},
                    ctx=ctx,
                )
                raw = f["content"].encode() if f["encoding"] == "text" else base64.b64decode(f["content"])
                out.append(raw)
    return out


async def test_an_archive_named_like_the_data_dir_imports_nothing_outside_it(
    node: Node, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    key = (data / "credential.key").read_bytes()
    ada = context("ada")
    for crafted in (_crafted_zip(data), _crafted_tar(data)):
        out = await node.ask(
            "skill_store", "import_skills", {"archive": b64(crafted), "approve": True}, ctx=ada
        )
        [skill] = out["imported"]
        assert skill["name"] == data.name
        got = await node.ask("skill_store", "get_skill", {"skill_id": skill["skill_id"]}, ctx=ada)
        # Only what the archive itself holds: no link out, no absolute or climbing member.
        assert [f["path"] for f in got["skill"]["files"]] == ["notes.md"]
        reasons = " | ".join(f"{r['path']}: {r['reason']}" for r in out["refused"])
        assert "a link out of the folder" in reasons and "unsafe path" in reasons
    for raw in await _all_file_bytes(node, ada):
        assert key not in raw and DB_HEADER not in raw
    assert _planted(tmp_path) == []
    assert (data / "credential.key").read_bytes() == key


def _planted(root: Path) -> list[Path]:
    """Files the archives' climbing or absolute members would have written (the store's own database, which
    may hold anything, aside)."""
    return [
        p
        for p in root.rglob("*")
        if p.is_file()
        and not p.name.startswith("minihermes.db")
        and b"forged-by-the-archive" in p.read_bytes()
    ]


# ------------------------------------------------------------------------------ a secret-shaped import

GITHUB = "ghp_" + "Z9" * 18
PROVIDER = "sk-proj-" + "Q7" * 12


async def test_a_secret_shaped_import_is_flagged_to_the_approving_admin(node: Node) -> None:
    files = {
        "deploy/SKILL.md": skill_md("deploy", f"1. Log in.\n2. Use the token: {GITHUB}\n"),
        "deploy/reference.md": f"# Reference\n\nexport OPENAI_API_KEY={PROVIDER}\n".encode(),
        "deploy/clean.md": b"nothing here\n",
    }
    out = await node.ask(
        "skill_store", "import_skills", {"archive": b64(bundles.write_zip(files))}, ctx=context("alice")
    )
    [imported] = out["imported"]
    assert imported["status"] == "candidate"
    found = {(s["path"], s["kind"]) for s in imported["secret_warnings"]}
    assert ("SKILL.md", "GitHub token") in found and ("reference.md", "LLM provider API key") in found
    assert {s["path"] for s in imported["secret_warnings"]} == {"SKILL.md", "reference.md"}
    lines = {s["path"]: s["line"] for s in imported["secret_warnings"]}
    assert lines == {"SKILL.md": 6, "reference.md": 3}
    messages = [w["message"] for w in out["warnings"] if "shaped like a secret" in w["message"]]
    assert any(m.startswith("reference.md line 3:") and "LLM provider API key" in m for m in messages)
    # The admin who decides sees it on the candidate, named by file and kind, never the secret itself.
    got = await node.ask("skill_store", "get_skill", {"skill_id": imported["skill_id"]}, ctx=context("ada"))
    flagged = got["skill"]["secret_warnings"]
    assert {(s["path"], s["line"], s["kind"], s["version"]) for s in flagged} >= {
        ("SKILL.md", 6, "GitHub token", 1),
        ("reference.md", 3, "LLM provider API key", 1),
    }
    from minihermes.cli.skills import held_back  # what `minihermes skills show` says of a candidate

    said = " ".join(held_back(got["skill"]))
    assert "SKILL.md line 6: GitHub token" in said and "check it before approving" in said
    shown = json.dumps([out["warnings"], imported, flagged, said])
    assert GITHUB not in shown and PROVIDER not in shown and "Z9Z9" not in shown
    # A clean new version clears the flag.
    clean = {"deploy/SKILL.md": skill_md("deploy", "1. Log in with the vault's token.\n")}
    again = await node.ask(
        "skill_store", "import_skills", {"archive": b64(bundles.write_zip(clean))}, ctx=context("alice")
    )
    assert "secret_warnings" not in again["imported"][0]
    got = await node.ask("skill_store", "get_skill", {"skill_id": imported["skill_id"]}, ctx=context("ada"))
    assert got["skill"]["version"] == 2 and "secret_warnings" not in got["skill"]


# -------------------------------------------------------------------------------------- the served node


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    data = tmp_path_factory.mktemp("host-paths") / "data"
    with serve_process(data, ["--jwt-secret-env", "HOST_PATHS_JWT"], env={"HOST_PATHS_JWT": SECRET}) as url:
        yield url, data


@pytest.fixture
async def api(served: tuple[str, Path]) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=served[0], timeout=60) as client:
        yield client


def _as(who: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token(who)}"}


async def test_host_paths_are_refused_over_http(api: httpx.AsyncClient, served: tuple[str, Path]) -> None:
    data = served[1]
    target = data.parent / "exported"
    for who in ("ada", "gus", "alice"):
        for path in [*host_paths(data), str(target)]:
            for op in ("import_skills", "export_skills"):
                r = await api.post(f"/api/v1/actors/skill_store/{op}", json={"path": path}, headers=_as(who))
                if who == "alice" and op == "export_skills":
                    assert r.status_code == 403  # admin-only op: refused by role before anything
                    continue
                assert r.status_code == 403, (who, op, path, r.text)
                error = r.json()["error"]
                assert error["code"] == "permission_denied" and error["field"] == "path", error
    assert not target.exists()


class _Leaks:
    """Every reply, grepped for the key (as stored, decoded, and in base64) and the database's header,
    also inside any string that decodes as base64."""

    def __init__(self, data: Path) -> None:
        key = (data / "credential.key").read_bytes().strip()
        self.needles = [key, base64.urlsafe_b64decode(key), base64.b64encode(key), DB_HEADER]
        self.seen = 0
        self.found: list[str] = []

    def _blobs(self, value: Any) -> Iterator[bytes]:
        if isinstance(value, str):
            yield value.encode()
            compact = value.strip()
            if len(compact) >= 16 and re.fullmatch(r"[A-Za-z0-9+/=_-]+", compact):
                for decode in (base64.b64decode, base64.urlsafe_b64decode):
                    try:
                        yield decode(compact + "=" * (-len(compact) % 4))
                    except ValueError:
                        pass
        elif isinstance(value, dict):
            for v in value.values():
                yield from self._blobs(v)
        elif isinstance(value, list):
            for v in value:
                yield from self._blobs(v)

    def check(self, label: str, body: bytes) -> None:
        self.seen += 1
        try:
            blobs = [body, *self._blobs(json.loads(body))]
        except ValueError:
            blobs = [body]
        for blob in blobs:
            if any(n in blob for n in self.needles):
                self.found.append(f"{label}: {body[:300]!r}")

    def check_zip(self, label: str, body: bytes) -> None:
        with zipfile.ZipFile(io.BytesIO(body)) as zf:
            for name in zf.namelist():
                self.check(f"{label}:{name}", zf.read(name))


_PATHLIKE = re.compile(r"path|dir|file|url|command|cwd|folder|root|args|env")


def _defaults(sid: str, session_id: str) -> dict[str, Any]:
    return {
        "skill_id": sid,
        "name": "probe",
        "transport": "stdio",
        "session_id": session_id,
        "server": "probe",
        "tool": "read",
        "version": 0,
        "reason": "probing",
        "query": "probe",
        "procedure": "1. read_file: read it",
        "description": "probe",
        "input": {},
        "input_schema": {"type": "object"},
        "handler_type": "read_file",
        "passed": True,
        "status": "",
        "turn_id": "t1",
        "user_intent": "probe",
        "user_message": "probe",
        "user_id": "",
    }


def _values(data: Path) -> list[Any]:
    key, db = data / "credential.key", data / "minihermes.db"
    return [
        str(data),
        str(data.parent),
        str(key),
        str(db),
        "credential.key",
        "minihermes.db",
        f"file://{key}",
        "../../../credential.key",
        "../../../../credential.key",
        f"{data.name}/credential.key",
        "~/credential.key",
    ]


async def test_no_http_op_returns_a_byte_of_the_key_or_the_database(
    api: httpx.AsyncClient, served: tuple[str, Path]
) -> None:
    data = served[1]
    leaks = _Leaks(data)
    ada = _as("ada")

    async def post(actor: str, op: str, payload: dict[str, Any], who: dict[str, str] = ada) -> Any:
        r = await api.post(f"/api/v1/actors/{actor}/{op}", json=payload, headers=who)
        leaks.check(f"{actor}.{op} {json.dumps(payload)[:200]}", r.content)
        assert r.status_code < 500, (actor, op, payload, r.status_code, r.text)
        return r.json() if r.content else None

    # Things to aim at: a skill with a file, a session (its workspace), and the crafted archive.
    up = await api.post(
        "/api/v1/skills/import?approve=true",
        content=bundles.write_zip({"probe/SKILL.md": skill_md("probe"), "probe/ref.md": b"# ref\n"}),
        headers=ada,
    )
    assert up.status_code == 200, up.text
    sid = up.json()["imported"][0]["skill_id"]
    crafted = await api.post("/api/v1/skills/import?approve=true", content=_crafted_zip(data), headers=ada)
    leaks.check("upload crafted", crafted.content)
    session_id = (await post("session_manager", "create_session", {}))["session_id"]

    # The attack as it was: export the skill named like the data dir next to it, import the data dir as
    # that skill's folder, read its "files".
    await post("skill_store", "export_skills", {"path": str(data.parent)})
    await post("skill_store", "import_skills", {"path": str(data), "approve": True})
    for skill in (await post("skill_store", "list_skills", {}))["skills"]:
        for path in ("credential.key", "minihermes.db"):
            await post("skill_store", "read_skill_file", {"skill_id": skill["skill_id"], "path": path})

    # Every op of the skill, MCP and tool services, each path-like argument aimed at the data dir.
    catalog = (await api.get("/api/v1/actors", headers=ada)).json()["actors"]
    ops = {
        a["name"]: a["ops"] for a in catalog if a["name"] in ("skill_store", "mcp_manager", "tool_executor")
    }
    assert set(ops) == {"skill_store", "mcp_manager", "tool_executor"}
    base = _defaults(sid, session_id)
    tried = 0
    for actor, listed in ops.items():
        for op in listed:
            params = {p["name"]: p for p in op["params"]}
            payload = {n: base[n] for n, p in params.items() if p["required"] and n in base}
            for name, p in params.items():
                if not _PATHLIKE.search(name):
                    continue
                for value in _values(data):
                    shaped = (
                        [value] if "list" in p["type"] else ({"X": value} if "dict" in p["type"] else value)
                    )
                    await post(actor, op["op"], {**payload, name: shaped})
                    tried += 1
    assert tried > 50

    # The tools the agent runs, with every path-like input aimed at the data dir.
    tools = (await post("tool_executor", "list_tools", {}))["tools"]
    for tool in tools:
        props = (tool.get("input_schema") or tool.get("parameters") or {}).get("properties") or {}
        for prop in [p for p in props if _PATHLIKE.search(p)]:
            for value in _values(data):
                extra = {"name": "probe"} if tool["name"] == "skill_view" else {}
                if tool["name"] == "write_file":
                    extra = {"content": "overwritten"}
                await post(
                    "tool_executor",
                    "execute",
                    {"name": tool["name"], "input": {**extra, prop: value}, "session_id": session_id},
                )
    for name, payload in (
        ("skill_view", {"name": data.name, "path": "credential.key"}),
        ("skill_view", {"name": "probe", "path": "../../credential.key"}),
    ):
        await post("tool_executor", "execute", {"name": name, "input": payload, "session_id": session_id})
    # A tool wrapping a file tool with a fixed path, and the MCP ways of naming a program or a folder.
    await post(
        "tool_executor",
        "register_tool",
        {
            "name": "keyreader",
            "description": "reads a fixed file",
            "input_schema": {"type": "object"},
            "handler_type": "read_file",
            "handler_config": {"fixed_input": {"path": str(data / "credential.key")}},
        },
    )
    await post("tool_executor", "execute", {"name": "keyreader", "input": {}, "session_id": session_id})
    key = str(data / "credential.key")
    for server in (
        {"transport": "stdio", "command": "cat", "args": [key]},
        {"transport": "stdio", "command": "/bin/cat", "args": [key], "cwd": str(data)},
        {"transport": "stdio", "command": "sh", "args": ["-c", f"cat {key}"], "env": {"PATH": str(data)}},
        {"transport": "http", "url": f"file://{key}"},
    ):
        reply = await post("mcp_manager", "add_server", {"name": "probe", **server})
        assert reply["error"]["code"] in ("permission_denied", "invalid_argument"), reply
    if isolation_report().get("level") == "full":  # the sandbox's own confinement (docs/security.md)
        for command in (f"cat {key}", f"base64 {data / 'minihermes.db'}", f"ls -la {data}"):
            await post(
                "tool_executor",
                "execute",
                {"name": "terminal", "input": {"command": command}, "session_id": session_id},
            )

    # The download: a zip of every skill, the crafted one included.
    r = await api.get("/api/v1/skills/export", headers=ada)
    assert r.status_code == 200 and r.headers["content-type"] == "application/zip"
    leaks.check_zip("GET /api/v1/skills/export", r.content)
    assert leaks.found == [], "\n".join(leaks.found[:10])
    assert leaks.seen > 100
    assert (data / "credential.key").read_bytes().strip() == leaks.needles[0]  # not overwritten


async def test_skills_download_as_a_zip_that_imports_back_unchanged(api: httpx.AsyncClient) -> None:
    files = {
        "hello/SKILL.md": skill_md("hello", "Run scripts/hi.py\n"),
        "hello/scripts/hi.py": b"print('hi')\n",
        "hello/assets/logo.bin": bytes(range(256)),
    }
    up = await api.post(
        "/api/v1/skills/import?approve=true",
        content=bundles.write_zip(files, {"hello/scripts/hi.py"}),
        headers=_as("gus"),
    )
    assert up.status_code == 200, up.text
    r = await api.get("/api/v1/skills/export", params={"status": "active"}, headers=_as("gus"))
    assert r.status_code == 200, r.text
    assert r.headers["content-disposition"].startswith("attachment")
    with zipfile.ZipFile(io.BytesIO(r.content)) as zf:
        got = {n: zf.read(n) for n in zf.namelist()}
        assert zf.getinfo("hello/scripts/hi.py").external_attr >> 16 & 0o777 == 0o755
    assert got["hello/scripts/hi.py"] == files["hello/scripts/hi.py"]
    assert got["hello/assets/logo.bin"] == files["hello/assets/logo.bin"]
    back = await api.post("/api/v1/skills/import", content=r.content, headers=_as("gus"))
    assert back.status_code == 200 and back.json()["imported"][0]["unchanged"] is True
    # Admins only, like export_skills; a bad status is a structured 4xx.
    assert (await api.get("/api/v1/skills/export", headers=_as("carol"))).status_code == 403
    bad = await api.get("/api/v1/skills/export", params={"status": "nope"}, headers=_as("gus"))
    assert bad.status_code in (400, 422) and bad.json()["error"]["field"] == "status"


# ----------------------------------------------------------------------------------- the operator's CLI


def _cli(*args: str) -> Any:
    result = CliRunner().invoke(cli_app, list(args))
    assert "Traceback" not in result.output, result.output
    return result


def _skill_folder(root: Path, name: str) -> None:
    (root / name).mkdir(parents=True)
    (root / name / "SKILL.md").write_bytes(skill_md(name))
    (root / name / "notes.md").write_text("notes\n")


def test_cli_folder_import_and_export_stay_in_the_root_and_out_of_the_data_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "skills-root"
    data = root / "data"  # the data dir inside the root: still never read or written
    outside = tmp_path / "elsewhere"
    where = ["--data-dir", str(data), "--json"]
    monkeypatch.setenv("MINIHERMES_SKILLS_IO_ROOT", str(root))
    _skill_folder(root / "in", "hello")
    _skill_folder(outside, "away")

    ok = _cli("skills", "import", str(root / "in"), "--approve", *where)
    assert ok.exit_code == 0, ok.output
    assert [s["name"] for s in json.loads(ok.stdout)["imported"]] == ["hello"]
    out = _cli("skills", "export", str(root / "out"), *where)
    assert out.exit_code == 0, out.output
    assert (root / "out" / "hello" / "notes.md").read_text() == "notes\n"

    key = (data / "credential.key").read_bytes()
    (root / "link-to-data").symlink_to(data)
    (root / "link-out").symlink_to(outside)
    for args in (
        ("import", str(outside)),  # outside the root
        ("import", str(root / "link-out")),  # a link inside the root to a folder outside it
        ("import", str(data)),  # the data dir
        ("import", str(data / "credential.key")),  # a file in it, as an "archive"
        ("import", str(root / "link-to-data")),  # a link to it
        ("export", str(outside / "out")),
        ("export", str(data)),
        ("export", str(data / "workspaces")),
        ("export", str(root / "link-to-data")),
    ):
        refused = _cli("skills", *args, *where)
        assert refused.exit_code == 1, (args, refused.output)
        assert "permission_denied" in refused.stderr, (args, refused.stderr)
        hint = "MINIHERMES_SKILLS_IO_ROOT" if "outside" in refused.stderr else "data dir"
        assert hint in refused.stderr, (args, refused.stderr)
    assert not (outside / "out").exists()
    assert sorted(p.name for p in data.iterdir() if p.name.endswith(".md")) == []

    # The attack's shape: a skill folder named like the data dir, exported next to it (into its parent,
    # the root), would land in the data dir: refused before anything is written.
    (root / "in2" / "data").mkdir(parents=True)
    (root / "in2" / "data" / "SKILL.md").write_bytes(skill_md("data"))
    assert _cli("skills", "import", str(root / "in2"), "--approve", *where).exit_code == 0
    into_parent = _cli("skills", "export", str(root), *where)
    assert into_parent.exit_code == 1 and "data dir" in into_parent.stderr
    assert not (data / "SKILL.md").exists() and not (root / "hello").exists()

    # A folder that holds the data dir is read without it: its files never become a skill's.
    (data / "SKILL.md").write_bytes(skill_md("data-dir"))  # as if planted there
    whole = _cli("skills", "import", str(root), *where)
    assert whole.exit_code == 0, whole.output
    reply = json.loads(whole.stdout)
    assert "data-dir" not in [s["name"] for s in reply["imported"]]
    assert any(r["reason"].startswith("the node's data dir") for r in reply["refused"])
    assert (data / "credential.key").read_bytes() == key


def test_bundles_refuse_the_data_dir_and_links_whoever_calls_them(tmp_path: Path) -> None:
    data = tmp_path / "data"
    (data / "workspaces").mkdir(parents=True)
    (data / "credential.key").write_bytes(b"k" * 44)
    doc = {"name": "data", "folder": "data", "skill_md": "---\nname: data\n---\nx\n", "file_bytes": {}}
    with pytest.raises(ActorError) as e:
        bundles.write_folder("export", str(tmp_path), [doc], protect=[str(data)])
    assert e.value.code == "permission_denied"
    assert not (data / "SKILL.md").exists()
    # A skill folder or a folder on a file's way that is a link is not written through.
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "evil").symlink_to(data / "workspaces")
    evil = {"name": "evil", "skill_md": "---\nname: evil\n---\nx\n", "file_bytes": {"a.txt": b"x"}}
    with pytest.raises(ActorError):
        bundles.write_folder("export", str(tmp_path / "out"), [evil])
    assert not (data / "workspaces" / "SKILL.md").exists()
    (tmp_path / "out2" / "ok").mkdir(parents=True)
    (tmp_path / "out2" / "ok" / "sub").symlink_to(data)
    ok = {"name": "ok", "skill_md": "---\nname: ok\n---\nx\n", "file_bytes": {"sub/credential.key": b"x"}}
    with pytest.raises(ActorError):
        bundles.write_folder("export", str(tmp_path / "out2"), [ok])
    assert (data / "credential.key").read_bytes() == b"k" * 44
    with pytest.raises(ActorError) as e:
        bundles.read_folder("import", str(data), bundles.Limits(), protect=[str(data)])
    assert e.value.code == "permission_denied"
    assert os.path.exists(data / "credential.key")


# ------------------------------------------------------------------------------------------ MCP programs


async def _mcp_node(data: Path, commands: list[str] | None) -> Node:
    from minihermes.runtime import Node as RuntimeNode
    from minihermes.runtime import NodeOptions, SupervisorSpec
    from minihermes.runtime.store import open_store
    from tests.mcp.conftest import specs

    children = specs()
    for spec in children:
        if spec.name == "mcp_manager":  # the node's own setting, not the tests' ["*"]
            spec.args = {} if commands is None else {"stdio_commands": commands}
    node = RuntimeNode(
        open_store("sqlite", data_dir=str(data)),
        SupervisorSpec(name="root", children=children),
        options=NodeOptions(),
    )
    await node.start()
    return node


async def test_a_tenant_starts_only_the_program_the_operator_listed(tmp_path: Path) -> None:
    import sys

    from tests.mcp.conftest import ACME as MCP_ADMIN
    from tests.mcp.conftest import stdio_server

    data = tmp_path / "data"
    # Unset (a node with auth, or a config of its own): no stdio program, and the refusal names the setting.
    node = await _mcp_node(data, None)
    try:
        with pytest.raises(ActorError) as e:
            await node.ask("mcp_manager", "add_server", stdio_server(), ctx=MCP_ADMIN)
        assert e.value.code == "permission_denied" and "stdio_commands" in e.value.message
    finally:
        await node.stop(deadline=5)

    node = await _mcp_node(data, [sys.executable])
    try:
        for extra, field in (
            ({"command": "/bin/sh"}, "command"),
            ({"cwd": str(data)}, "cwd"),
            ({"env": {"PATH": str(tmp_path)}}, "env.PATH"),
            ({"env": {"LD_PRELOAD": str(tmp_path / "evil.so")}}, "env.LD_PRELOAD"),
            ({"env": {"PYTHONSTARTUP": str(tmp_path / "evil.py")}}, "env.PYTHONSTARTUP"),
            ({"env": {"NODE_OPTIONS": "--require /tmp/evil.js"}}, "env.NODE_OPTIONS"),
        ):
            with pytest.raises(ActorError) as e:
                await node.ask("mcp_manager", "add_server", {**stdio_server(), **extra}, ctx=MCP_ADMIN)
            assert e.value.code == "permission_denied" and e.value.details.get("field") == field, extra
            assert "stdio_commands" in e.value.message
        # The listed program with its own, harmless variables runs.
        added = await node.ask(
            "mcp_manager",
            "add_server",
            {**stdio_server(), "env": {"API_TOKEN": "t0ken-value"}},
            ctx=MCP_ADMIN,
            timeout=60,
        )
        assert "mcp_t_add" in added["tools"]
    finally:
        await node.stop(deadline=5)

    # The operator narrows the setting: the stored server starts no more (checked at every start).
    node = await _mcp_node(data, [])
    try:
        with pytest.raises(ActorError) as e:
            await node.ask(
                "mcp_manager",
                "call_tool",
                {"server": "t", "tool": "add", "arguments": {"a": 1, "b": 2}},
                ctx=MCP_ADMIN,
                timeout=60,
            )
        assert e.value.code == "permission_denied" and "stdio_commands" in e.value.message
    finally:
        await node.stop(deadline=5)
