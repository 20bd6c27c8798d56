"""Export round-trip and archive imports: export -> import -> export is byte-identical (SKILL.md and every
file; the only addition is one line of our keys in the front matter); learned skills export in the same
format; .zip / .skill archives and tarballs import like folders, and unsafe members (traversal, links out,
bombs) are refused with a reason each."""

from __future__ import annotations

import base64
import io
import tarfile
import zipfile
from pathlib import Path
from typing import Any

import pytest

from minihermes.runtime import ActorError
from minihermes.skills._archive import write_zip
from minihermes.skills._folders import strip_ours

from .collection import read_tree, write_collection
from .conftest import ACME, ACME_USER, skills_tree

CALC = (
    "1. calculator: evaluate each arithmetic expression from the request\n2. memory_store: store the result"
)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


async def export_to(node, folder: Path) -> dict[str, bytes]:
    out = await node.ask("skill_store", "export_skills", {"path": str(folder)}, ctx=ACME)
    assert out["written"] == out["count"]
    return read_tree(folder)


async def test_export_import_export_is_byte_identical(make_node, tmp_path):
    node = await make_node(skills_tree())
    original = write_collection(tmp_path / "in")
    first = await node.ask(
        "skill_store", "import_skills", {"path": str(tmp_path / "in"), "approve": True}, ctx=ACME
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
        "skill_store", "import_skills", {"path": str(tmp_path / "out1"), "approve": True}, ctx=ACME
    )
    assert [s["unchanged"] for s in again["imported"]] == [True] * 4
    assert {s["skill_id"] for s in again["imported"]} == {s["skill_id"] for s in first["imported"]}
    assert await export_to(node, tmp_path / "out2") == exported

    # Into another tenant's fresh store the export imports to the same content (versions start over).
    other = await make_node(skills_tree())
    await other.ask(
        "skill_store", "import_skills", {"path": str(tmp_path / "out1"), "approve": True}, ctx=ACME
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
    back = await node.ask("skill_store", "import_skills", {"path": str(tmp_path / "out")}, ctx=ACME)
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


def test_cli_import_and_export_on_the_local_data_dir(tmp_path):
    _cli_round_trip(tmp_path, ["--data-dir", str(tmp_path / "data")])


@pytest.mark.slow
def test_cli_import_and_export_against_a_served_node(tmp_path, tmp_path_factory):
    from tests.cli._served import as_, served

    with served(tmp_path_factory, "skills-io") as url:
        _cli_round_trip(tmp_path, as_(url))
