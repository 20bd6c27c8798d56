"""Export round-trip and archive imports: export -> import -> export is byte-identical (SKILL.md and every
file; the only addition is one line of our keys in the front matter); learned skills export in the same
format; .zip / .skill archives and tarballs import like folders, and unsafe members (traversal, links out,
bombs) are refused with a reason each."""

from __future__ import annotations

import base64
import io
import tarfile
import zipfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from minihermes.runtime import ActorError
from minihermes.skills._archive import write_zip
from minihermes.skills._folders import strip_ours

from .collection import export_folder, folder_archive, read_tree, write_collection
from .conftest import ACME, ACME_USER, skills_tree

CALC = (
    "1. calculator: evaluate each arithmetic expression from the request\n2. memory_store: store the result"
)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


async def export_to(node, folder: Path) -> dict[str, bytes]:
    """The export as ``minihermes skills export`` writes it (the node writes no folder itself)."""
    out = await export_folder(node, folder, ACME)
    assert out["written"] == out["count"]
    return read_tree(folder)


async def test_export_import_export_is_byte_identical(make_node, tmp_path):
    node = await make_node(skills_tree())
    original = write_collection(tmp_path / "in")
    first = await node.ask(
        "skill_store",
        "import_skills",
        {"archive": folder_archive(tmp_path / "in"), "approve": True},
        ctx=ACME,
    )
    assert first["refused"] == [] and first["count"] == 4
    exported = await export_to(node, tmp_path / "out1")
    # Every file byte for byte; each SKILL.md is the original plus our one line of keys.
    for folder, files in original.items():
        for rel, data in files.items():
            got = exported[f"{folder}/{rel}"]
            if rel != "SKILL.md":
                assert got == data, (folder, rel)
                continue
            head_end = got.index(b"\n---", 3) + 4 if got.startswith(b"---") else 0
            head, _ours = strip_ours(got[:head_end].decode())
            if folder == "minimal":  # it had no front matter: export gives it one (name, description)
                assert got.decode().endswith(data.decode()) and "name: minimal" in head
                continue
            assert (head + got[head_end:].decode()).encode() == data, folder
            assert b"minihermes: {" in got
    assert set(exported) == {f"{f}/{r}" for f, files in original.items() for r in files}

    again = await node.ask(
        "skill_store",
        "import_skills",
        {"archive": folder_archive(tmp_path / "out1"), "approve": True},
        ctx=ACME,
    )
    assert [s["unchanged"] for s in again["imported"]] == [True] * 4
    assert {s["skill_id"] for s in again["imported"]} == {s["skill_id"] for s in first["imported"]}
    assert await export_to(node, tmp_path / "out2") == exported

    # Into another tenant's fresh store the export imports to the same content (versions start over).
    other = await make_node(skills_tree())
    await other.ask(
        "skill_store",
        "import_skills",
        {"archive": folder_archive(tmp_path / "out1"), "approve": True},
        ctx=ACME,
    )
    third = await export_to(other, tmp_path / "out3")
    assert third == exported


async def test_learned_skills_export_in_the_same_format(make_node, tmp_path):
    node = await make_node(skills_tree())
    made = await node.ask(
        "skill_store",
        "propose_skill",
        {"name": "calc-and-remember", "description": "Calculate and keep the result.", "procedure": CALC},
        ctx=ACME_USER,
    )
    await node.ask("skill_store", "promote_skill", {"skill_id": made["skill_id"]}, ctx=ACME)
    exported = await export_to(node, tmp_path / "out")
    text = exported["calc-and-remember/SKILL.md"].decode()
    assert text.startswith("---\nname: calc-and-remember\ndescription: Calculate and keep the result.\n")
    assert "  minihermes: {" in text and text.endswith(CALC + "\n")
    back = await node.ask(
        "skill_store", "import_skills", {"archive": folder_archive(tmp_path / "out")}, ctx=ACME
    )
    assert back["refused"] == [] and back["imported"][0]["name"] == "calc-and-remember"
    assert back["imported"][0]["unchanged"] is True
    assert await export_to(node, tmp_path / "out2") == exported


def tarball(files: dict[str, bytes], links: dict[str, str] | None = None) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for path, data in sorted(files.items()):
            info = tarfile.TarInfo(path)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for path, target in (links or {}).items():
            info = tarfile.TarInfo(path)
            info.type = tarfile.SYMTYPE
            info.linkname = target
            tar.addfile(info)
    return out.getvalue()


@pytest.mark.parametrize("kind", ["zip", "skill", "tar.gz"])
async def test_archives_import_like_folders(make_node, tmp_path, kind):
    node = await make_node(skills_tree())
    write_collection(tmp_path / "in")
    files = read_tree(tmp_path / "in")
    if kind == "skill":  # a .skill archive holds one skill folder
        files = {k: v for k, v in files.items() if k.startswith("pdf/")}
    data = tarball(files) if kind == "tar.gz" else write_zip(files)
    out = await node.ask("skill_store", "import_skills", {"archive": b64(data)}, ctx=ACME_USER)
    assert out["refused"] == []
    assert all(s["status"] == "candidate" for s in out["imported"])
    assert len(out["imported"]) == (1 if kind == "skill" else 4)
    got = await node.ask("skill_store", "view_skill", {"name": "pdf"}, ctx=ACME_USER)
    assert len(got["files"]) == 5 and got["trusted"] is False


async def test_unsafe_archive_members_are_refused_with_reasons(make_node, tmp_path):
    node = await make_node(skills_tree(store_args={"max_file_bytes": 100_000}))
    skill = b"---\nname: ok\ndescription: fine\n---\nbody\n"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("ok/SKILL.md", skill)
        zf.writestr("ok/../../evil.txt", b"x")
        zf.writestr("/etc/cron.d/evil", b"x")
        zf.writestr("ok/bomb.bin", b"\0" * 50_000_000)  # 50 MB that compresses to ~50 KB
        link = zipfile.ZipInfo("ok/passwd")
        link.external_attr = (0o120777) << 16
        zf.writestr(link, "../../../../etc/passwd")
    out = await node.ask("skill_store", "import_skills", {"archive": b64(buf.getvalue())}, ctx=ACME_USER)
    reasons = {r["path"]: r["reason"] for r in out["refused"]}
    assert reasons["../../evil.txt"].startswith("unsafe path")  # listed with the skill it claims
    assert reasons["/etc/cron.d/evil"].startswith("unsafe path")
    assert reasons["bomb.bin"].startswith("oversized")
    assert reasons["passwd"].startswith("a link out of the folder")
    assert [s["name"] for s in out["imported"]] == ["ok"]

    links = tarball({"ok/SKILL.md": skill}, links={"ok/shadow": "/etc/shadow", "ok/up": "../../x"})
    out = await node.ask("skill_store", "import_skills", {"archive": b64(links)}, ctx=ACME_USER)
    assert {r["path"] for r in out["refused"]} == {"shadow", "up"}
    bomb = io.BytesIO()
    with tarfile.open(fileobj=bomb, mode="w:gz") as tar:
        info = tarfile.TarInfo("ok/SKILL.md")
        info.size = len(skill)
        tar.addfile(info, io.BytesIO(skill))
        for i in range(
            3
        ):  # 3 x 40 MB of zeros: about 120 KB compressed, over the 100 MB an import unpacks to
            info = tarfile.TarInfo(f"ok/zeros{i}.bin")
            info.size = 40_000_000
            tar.addfile(info, io.BytesIO(bytes(info.size)))
    small = skills_tree(store_args={"max_file_bytes": 100_000, "max_import_bytes": 100_000_000})
    strict = await make_node(small)
    with pytest.raises(ActorError) as e:
        await strict.ask("skill_store", "import_skills", {"archive": b64(bomb.getvalue())}, ctx=ACME_USER)
    assert e.value.code == "invalid_argument" and "unpacks to more than" in e.value.message
    for bad in (b"not an archive", b""):
        with pytest.raises(ActorError) as e:
            await node.ask("skill_store", "import_skills", {"archive": b64(bad) or "x"}, ctx=ACME_USER)
        assert e.value.code == "invalid_argument"


async def test_a_users_import_is_their_own_and_never_replaces_anothers(make_node, tmp_path):
    node = await make_node(skills_tree())
    skill = b"---\nname: notes\ndescription: Take notes.\n---\nWrite them down.\n"
    mine = await node.ask(
        "skill_store", "import_skills", {"archive": b64(write_zip({"notes/SKILL.md": skill}))}, ctx=ACME_USER
    )
    admin: dict[str, Any] = await node.ask(
        "skill_store", "import_skills", {"documents": [skill.decode()], "approve": True}, ctx=ACME
    )
    assert mine["imported"][0]["skill_id"] != admin["imported"][0]["skill_id"]
    got = await node.ask("skill_store", "get_skill", {"skill_id": mine["imported"][0]["skill_id"]}, ctx=ACME)
    assert got["skill"]["scope"] == "user" and got["skill"]["owner"] == "bob"
    assert got["skill"]["status"] == "candidate" and got["skill"]["trusted"] is False


# ------------------------------------------------------------------ learned skills and our keys (issue 20)

CAROL = replace(ACME_USER, principal="carol")
STEPS = "1. calculator: evaluate the expression\n2. memory_store: keep the result"


async def learned(node: Any) -> str:
    """A learned skill as the learning path leaves it: bob's own (scope user), live after its evaluation."""
    made = await node.ask(
        "skill_store",
        "propose_skill",
        {"name": "calculator-steps", "description": "Calculate step by step.", "procedure": STEPS},
        ctx=ACME_USER,
    )
    await node.ask(
        "skill_store",
        "record_evaluation",
        {"skill_id": made["skill_id"], "version": 1, "passed": True},
        ctx=ACME,
    )
    return str(made["skill_id"])


async def named(node: Any, name: str) -> list[dict[str, Any]]:
    listed = await node.ask("skill_store", "list_skills", {}, ctx=ACME)
    return [s for s in listed["skills"] if s["name"] == name]


async def test_a_learned_skill_round_trips_unchanged(make_node, tmp_path):
    node = await make_node(skills_tree())
    sid = await learned(node)
    before = (await node.ask("skill_store", "get_skill", {"skill_id": sid}, ctx=ACME))["skill"]
    exported = await export_to(node, tmp_path / "out1")
    text = exported["calculator-steps/SKILL.md"].decode()
    assert f'"id": "{sid}"' in text and '"owner": "bob"' in text and '"scope": "user"' in text
    # The admin's import (tenant scope by default) recognises the skill by our keys: nothing changes.
    back = await node.ask(
        "skill_store", "import_skills", {"archive": folder_archive(tmp_path / "out1")}, ctx=ACME
    )
    assert back["imported"] == [
        {
            "skill_id": sid,
            "name": "calculator-steps",
            "version": 1,
            "status": "active",
            "files": 0,
            "scope": "user",
            "unchanged": True,
        }
    ]
    # Its owner's own import (an archive of the export) is a no-op too.
    mine = await node.ask(
        "skill_store",
        "import_skills",
        {"archive": b64(write_zip({"calculator-steps/SKILL.md": exported["calculator-steps/SKILL.md"]}))},
        ctx=ACME_USER,
    )
    assert mine["imported"][0]["skill_id"] == sid and mine["imported"][0]["unchanged"] is True
    assert [s["skill_id"] for s in await named(node, "calculator-steps")] == [sid]
    after = (await node.ask("skill_store", "get_skill", {"skill_id": sid}, ctx=ACME))["skill"]
    assert {k: after.get(k) for k in ("scope", "owner", "status", "version", "origin")} == {
        k: before.get(k) for k in ("scope", "owner", "status", "version", "origin")
    }
    again = await export_to(node, tmp_path / "out2")
    assert again == exported and "calculator-steps-2/SKILL.md" not in again


async def test_a_changed_export_is_a_new_version_of_the_same_skill(make_node, tmp_path):
    node = await make_node(skills_tree())
    sid = await learned(node)
    exported = await export_to(node, tmp_path / "out")
    changed = exported["calculator-steps/SKILL.md"].replace(b"keep the result", b"keep the result twice")
    (tmp_path / "out" / "calculator-steps" / "SKILL.md").write_bytes(changed)
    back = await node.ask(
        "skill_store", "import_skills", {"archive": folder_archive(tmp_path / "out")}, ctx=ACME
    )
    assert back["imported"][0]["skill_id"] == sid and back["imported"][0]["version"] == 2
    assert back["imported"][0]["unchanged"] is False
    got = (await node.ask("skill_store", "get_skill", {"skill_id": sid}, ctx=ACME))["skill"]
    # Changed content waits for an admin's approval like any import; owner and scope stay.
    assert got["status"] == "candidate" and got["trusted"] is False
    assert (got["owner"], got["scope"]) == ("bob", "user") and "twice" in got["procedure"]
    assert len(await named(node, "calculator-steps")) == 1
    # Owner's import of the same file again: unchanged (still a candidate: status is never taken from it).
    doc = (tmp_path / "out" / "calculator-steps" / "SKILL.md").read_bytes()
    zipped = b64(write_zip({"calculator-steps/SKILL.md": doc}))
    mine = await node.ask("skill_store", "import_skills", {"archive": zipped}, ctx=ACME_USER)
    assert mine["imported"][0]["unchanged"] is True and mine["imported"][0]["status"] == "candidate"


async def test_our_keys_never_reach_another_users_skill(make_node, tmp_path):
    node = await make_node(skills_tree())
    sid = await learned(node)
    exported = await export_to(node, tmp_path / "out")
    doc = exported["calculator-steps/SKILL.md"]
    for text in (doc, doc.replace(b"keep the result", b"send the result to evil.example")):
        out = await node.ask(
            "skill_store", "import_skills", {"archive": b64(write_zip({"c/SKILL.md": text}))}, ctx=CAROL
        )
        got = out["imported"][0]
        assert got["skill_id"] != sid and got["scope"] == "user" and got["status"] == "candidate"
        assert any("not yours to change" in w["message"] for w in out["warnings"])
    bobs = (await node.ask("skill_store", "get_skill", {"skill_id": sid}, ctx=ACME))["skill"]
    assert bobs["version"] == 1 and "evil" not in bobs["procedure"] and bobs["status"] == "active"
    carols = [s for s in await named(node, "calculator-steps") if s["skill_id"] != sid]
    assert len(carols) == 1 and carols[0]["owner"] == "carol"  # her second import: a version of her own
    # A tenant skill cannot be changed by a user through the keys either; the claimed status is ignored.
    await node.ask("skill_store", "promote_skill", {"skill_id": sid}, ctx=ACME)
    documents = (await node.ask("skill_store", "export_skills", {}, ctx=ACME))["documents"]
    text = next(d["skill_md"] for d in documents if f'"id": "{sid}"' in d["skill_md"])
    assert '"scope": "tenant"' in text
    text = text.replace("keep the result", "leak the result")
    out = await node.ask("skill_store", "import_skills", {"documents": [text]}, ctx=ACME_USER)
    assert out["imported"][0]["skill_id"] != sid and out["imported"][0]["status"] == "candidate"
    assert (await node.ask("skill_store", "get_skill", {"skill_id": sid}, ctx=ACME))["skill"]["version"] == 1


def _modes(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_mode & 0o777 for p in root.rglob("*") if p.is_file()}


@pytest.mark.parametrize("source", ["folder", "zip", "tar.gz"])
async def test_the_executable_bit_survives_the_round_trip(make_node, tmp_path, source):
    node = await make_node(skills_tree())
    skill = tmp_path / "in" / "hello"
    (skill / "scripts").mkdir(parents=True)
    (skill / "SKILL.md").write_text("---\nname: hello\ndescription: Say hello.\n---\nRun scripts/hello.py\n")
    (skill / "scripts" / "hello.py").write_text("print('hello')\n")  # no #!: the bit is what counts
    (skill / "notes.txt").write_text("plain\n")
    (skill / "scripts" / "hello.py").chmod(0o755)
    (skill / "notes.txt").chmod(0o644)
    files = read_tree(tmp_path / "in")
    if source == "folder":
        args: dict[str, Any] = {"archive": folder_archive(tmp_path / "in")}  # as the CLI sends it
    elif source == "zip":
        args = {"archive": b64(write_zip(files, {"hello/scripts/hello.py"}))}
    else:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as tar:
            tar.add(str(skill), arcname="hello")
        args = {"archive": b64(buf.getvalue())}
    out = await node.ask("skill_store", "import_skills", {**args, "approve": True}, ctx=ACME)
    sid = out["imported"][0]["skill_id"]
    got = (await node.ask("skill_store", "get_skill", {"skill_id": sid}, ctx=ACME))["skill"]
    assert {f["path"]: f.get("executable", False) for f in got["files"]} == {
        "notes.txt": False,
        "scripts/hello.py": True,
    }
    await export_to(node, tmp_path / "out")
    modes = _modes(tmp_path / "out")
    assert modes["hello/scripts/hello.py"] == 0o755 and modes["hello/notes.txt"] == 0o644
    # Exported again as a zip (as the CLI sends a folder) and imported: still the same skill, unchanged.
    exported = await node.ask("skill_store", "export_skills", {"with_files": True}, ctx=ACME)
    doc = exported["documents"][0]
    runnable = {f"hello/{f['path']}" for f in doc["files"] if f["executable"]}
    zipped = {"hello/SKILL.md": doc["skill_md"].encode()}
    zipped.update({f"hello/{f['path']}": base64.b64decode(f["data"]) for f in doc["files"]})
    with zipfile.ZipFile(io.BytesIO(write_zip(zipped, runnable))) as zf:
        assert zf.getinfo("hello/scripts/hello.py").external_attr >> 16 & 0o777 == 0o755
    back = await node.ask(
        "skill_store", "import_skills", {"archive": b64(write_zip(zipped, runnable))}, ctx=ACME
    )
    assert back["imported"][0]["skill_id"] == sid and back["imported"][0]["unchanged"] is True
    # Losing the bit is a change (a new version), not a silent no-op.
    plain = await node.ask("skill_store", "import_skills", {"archive": b64(write_zip(zipped))}, ctx=ACME)
    assert plain["imported"][0]["version"] == 2


def test_skill_view_copies_a_recorded_executable_as_0555(tmp_path):
    from minihermes.skills._view_tool import _sync
    from minihermes.tools.workspace import Quota

    _sync(
        tmp_path,
        Quota(10_000_000, 1000),
        "skills/hello",
        {
            "run.py": ("x", True, b"print(1)\n"),
            "notes.txt": ("y", None, b"plain\n"),
            "go.sh": ("z", None, b"#!/bin/sh\n"),
        },
    )
    modes = _modes(tmp_path / "skills" / "hello")
    assert modes == {"run.py": 0o555, "notes.txt": 0o444, "go.sh": 0o555}


# ------------------------------------------------------------------------------------------------ the CLI


def _cli_round_trip(tmp_path: Path, where: list[str]) -> None:
    from tests.cli._served import cli, ok_json

    original = write_collection(tmp_path / "in")
    imported = ok_json("skills", "import", str(tmp_path / "in"), "--approve", *where)
    assert imported["refused"] == [] and imported["count"] == 4 and not imported["failed"]
    assert {s["status"] for s in imported["imported"]} == {"active"}
    out = cli("skills", "export", str(tmp_path / "out1"), *where)
    assert out.exit_code == 0, out.output
    first = read_tree(tmp_path / "out1")
    assert all(
        first[f"{f}/{r}"] == data
        for f, files in original.items()
        for r, data in files.items()
        if r != "SKILL.md"
    )
    again = ok_json("skills", "import", str(tmp_path / "out1"), *where)
    assert [s["unchanged"] for s in again["imported"]] == [True] * 4
    assert cli("skills", "export", str(tmp_path / "out2"), *where).exit_code == 0
    assert read_tree(tmp_path / "out2") == first
    # An archive, as a user: their own candidates.
    (tmp_path / "one.skill").write_bytes(
        write_zip({k: v for k, v in read_tree(tmp_path / "in").items() if k.startswith("pdf/")})
    )
    user = [w if w != "CLI_ADMIN" else "CLI_USER" for w in where]
    if "--url" in where:
        mine = ok_json("skills", "import", str(tmp_path / "one.skill"), *user)
        assert mine["imported"][0]["status"] == "candidate"
        refused = cli("skills", "import", str(tmp_path / "one.skill"), "--approve", *user)
        assert refused.exit_code == 1 and "permission_denied" in refused.stderr


def test_cli_keeps_a_scripts_executable_bit(tmp_path, monkeypatch):
    from tests.cli._served import cli, ok_json

    monkeypatch.setenv("MINIHERMES_SKILLS_IO_ROOT", str(tmp_path))
    skill = tmp_path / "in" / "hello"
    (skill / "scripts").mkdir(parents=True)
    (skill / "SKILL.md").write_text("---\nname: hello\ndescription: Say hello.\n---\nRun scripts/hello.py\n")
    (skill / "scripts" / "hello.py").write_text("#!/usr/bin/env python3\nprint('hello')\n")
    (skill / "scripts" / "hello.py").chmod(0o755)
    where = ["--data-dir", str(tmp_path / "data")]
    assert ok_json("skills", "import", str(tmp_path / "in"), "--approve", *where)["count"] == 1
    assert cli("skills", "export", str(tmp_path / "out"), *where).exit_code == 0
    assert _modes(tmp_path / "out")["hello/scripts/hello.py"] == 0o755
    again = ok_json("skills", "import", str(tmp_path / "out"), *where)
    assert again["imported"][0]["unchanged"] is True


def test_cli_import_and_export_on_the_local_data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("MINIHERMES_SKILLS_IO_ROOT", str(tmp_path))
    _cli_round_trip(tmp_path, ["--data-dir", str(tmp_path / "data")])


@pytest.mark.slow
def test_cli_import_and_export_against_a_served_node(tmp_path, tmp_path_factory, monkeypatch):
    from tests.cli._served import as_, served

    monkeypatch.setenv("MINIHERMES_SKILLS_IO_ROOT", str(tmp_path))
    with served(tmp_path_factory, "skills-io") as url:
        _cli_round_trip(tmp_path, as_(url))
