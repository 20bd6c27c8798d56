"""Workspace file tools: everything stays inside the root, whatever the tree below it looks like."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from minihermes.tools.workspace import Workspace, WorkspaceError


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    root = tmp_path / "ws"
    root.mkdir()
    return Workspace(root, max_read_bytes=1000, max_write_bytes=2000, max_list_entries=50)


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory next to the workspace holding a secret."""
    path = tmp_path / "outside"
    path.mkdir()
    (path / "secret.txt").write_text("SECRET")
    return path


def _code(excinfo: pytest.ExceptionInfo[WorkspaceError]) -> str:
    return excinfo.value.code


def test_write_read_list_roundtrip(ws: Workspace) -> None:
    written = ws.write_file("notes/today.md", "# hi\n")
    assert (written.path, written.size, written.created) == ("notes/today.md", 5, True)
    assert ws.write_file("notes/today.md", "# hello\n").created is False
    content = ws.read_file("./notes//today.md")
    assert (content.path, content.content, content.size) == ("notes/today.md", "# hello\n", 8)
    ws.write_file("a.txt", "a")
    listing = ws.list_files(recursive=True)
    assert [(e.path, e.type) for e in listing.entries] == [
        ("a.txt", "file"),
        ("notes", "directory"),
        ("notes/today.md", "file"),
    ]
    assert not listing.truncated
    assert [e.path for e in ws.list_files("notes").entries] == ["notes/today.md"]


def test_absolute_paths_inside_the_root_are_accepted(ws: Workspace) -> None:
    ws.write_file(os.path.join(ws.root, "x.txt"), "x")
    assert ws.read_file(os.path.join(ws.root, "x.txt")).content == "x"
    assert ws.read_file("sub/../x.txt").content == "x"  # `..` that stays inside is fine


@pytest.mark.parametrize(
    "path",
    ["../outside/secret.txt", "a/../../outside/secret.txt", "/etc/passwd", "..", "../", "/", "x/../../.."],
)
def test_escaping_paths_are_refused(ws: Workspace, outside: Path, path: str) -> None:
    with pytest.raises(WorkspaceError) as err:
        ws.read_file(path)
    assert _code(err) in ("path_escape", "is_directory") and "SECRET" not in str(err.value)
    if path != "/":
        assert _code(err) == "path_escape"
    with pytest.raises(WorkspaceError) as err:
        ws.write_file(path.rstrip("/") + "/new.txt" if path.endswith("..") else path, "pwned")
    assert _code(err) == "path_escape"
    assert (outside / "secret.txt").read_text() == "SECRET"


def test_absolute_path_that_merely_shares_the_prefix_is_outside(ws: Workspace, tmp_path: Path) -> None:
    sibling = tmp_path / "ws-evil"
    sibling.mkdir()
    (sibling / "f").write_text("no")
    with pytest.raises(WorkspaceError) as err:
        ws.read_file(str(sibling / "f"))
    assert _code(err) == "path_escape"


def test_symlinked_file_pointing_outside_is_not_followed(ws: Workspace, outside: Path) -> None:
    os.symlink(outside / "secret.txt", os.path.join(ws.root, "link.txt"))
    with pytest.raises(WorkspaceError) as err:
        ws.read_file("link.txt")
    assert _code(err) == "path_escape"
    with pytest.raises(WorkspaceError) as err:
        ws.write_file("link.txt", "pwned")
    assert _code(err) == "path_escape"
    assert (outside / "secret.txt").read_text() == "SECRET"


def test_symlinked_directory_pointing_outside_is_not_entered(ws: Workspace, outside: Path) -> None:
    os.symlink(outside, os.path.join(ws.root, "data"))
    for action in (
        lambda: ws.read_file("data/secret.txt"),
        lambda: ws.write_file("data/new.txt", "pwned"),
        lambda: ws.list_files("data"),
    ):
        with pytest.raises(WorkspaceError) as err:
            action()
        assert _code(err) == "path_escape"
    assert not (outside / "new.txt").exists()
    entries = ws.list_files(recursive=True).entries
    assert [(e.path, e.type) for e in entries] == [("data", "symlink")]


def test_symlink_to_the_root_itself_is_not_followed(ws: Workspace) -> None:
    ws.write_file("f.txt", "f")
    os.symlink(ws.root, os.path.join(ws.root, "loop"))
    with pytest.raises(WorkspaceError) as err:
        ws.read_file("loop/f.txt")
    assert _code(err) == "path_escape"


def test_hard_link_to_an_outside_file_is_refused(ws: Workspace, outside: Path) -> None:
    os.link(outside / "secret.txt", os.path.join(ws.root, "alias.txt"))
    with pytest.raises(WorkspaceError) as err:
        ws.read_file("alias.txt")
    assert _code(err) == "path_escape"


def test_directory_swapped_for_a_symlink_mid_write_is_caught(
    ws: Workspace, outside: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The race a sandboxed program could win: right after we create `new`, it becomes a symlink outward.
    real_mkdir = os.mkdir

    def mkdir_then_swap(path: str, mode: int = 0o777, *, dir_fd: int | None = None) -> None:
        real_mkdir(path, mode, dir_fd=dir_fd)
        os.rmdir(path, dir_fd=dir_fd)
        os.symlink(outside, path, dir_fd=dir_fd)

    monkeypatch.setattr(os, "mkdir", mkdir_then_swap)
    with pytest.raises(WorkspaceError) as err:
        ws.write_file("new/file.txt", "pwned")
    assert _code(err) == "path_escape"
    assert not (outside / "file.txt").exists()


def test_fifo_is_refused_without_hanging(ws: Workspace) -> None:
    os.mkfifo(os.path.join(ws.root, "pipe"))
    with pytest.raises(WorkspaceError) as err:
        ws.read_file("pipe")
    assert _code(err) == "not_a_file"


def test_size_caps(ws: Workspace) -> None:
    Path(ws.root, "big.txt").write_text("x" * 1001)
    with pytest.raises(WorkspaceError) as err:
        ws.read_file("big.txt")
    assert _code(err) == "too_large"
    assert ws.read_file("big.txt", max_bytes=2000).size == 1001
    with pytest.raises(WorkspaceError) as err:
        ws.write_file("huge.txt", "x" * 2001)
    assert _code(err) == "too_large"
    assert not Path(ws.root, "huge.txt").exists()


@pytest.mark.parametrize("data", [b"\x00\x01\x02", b"caf\xe9", b"\x89PNG\r\n\x1a\n\x00\x00"])
def test_binary_files_are_detected(ws: Workspace, data: bytes) -> None:
    ws.write_file("blob.bin", data)
    with pytest.raises(WorkspaceError) as err:
        ws.read_file("blob.bin")
    assert _code(err) == "binary"
    assert ws.read_bytes("blob.bin") == data


def test_kinds_of_wrong_target(ws: Workspace) -> None:
    ws.write_file("dir/file.txt", "x")
    cases: list[tuple[Callable[[], object], str]] = [
        (lambda: ws.read_file("dir"), "is_directory"),
        (lambda: ws.write_file("dir", "x"), "is_directory"),
        (lambda: ws.read_file("missing.txt"), "not_found"),
        (lambda: ws.read_file("missing/file.txt"), "not_found"),
        (lambda: ws.list_files("missing"), "not_found"),
        (lambda: ws.read_file("dir/file.txt/x"), "not_a_directory"),
        (lambda: ws.write_file("dir/file.txt/x", "x"), "not_a_directory"),
        (lambda: ws.write_file("dir/file.txt", "y", overwrite=False), "exists"),
        (lambda: ws.write_file("other/x.txt", "y", create_dirs=False), "not_found"),
        (lambda: ws.read_file("bad\0name"), "invalid_path"),
        (lambda: ws.read_file("a/" * 600), "invalid_path"),
        (lambda: ws.read_file("x" * 300), "invalid_path"),
    ]
    for action, code in cases:
        with pytest.raises(WorkspaceError) as err:
            action()
        assert _code(err) == code, (code, err.value)
    assert ws.read_file("dir/file.txt").content == "x"


def test_overwrite_keeps_the_file_mode(ws: Workspace) -> None:
    ws.write_file("run.sh", "#!/bin/sh\n")
    os.chmod(os.path.join(ws.root, "run.sh"), 0o755)
    ws.write_file("run.sh", "#!/bin/sh\necho hi\n")
    assert os.stat(os.path.join(ws.root, "run.sh")).st_mode & 0o777 == 0o755


def test_no_temp_files_are_left_behind(ws: Workspace) -> None:
    ws.write_file("a.txt", "1")
    with pytest.raises(WorkspaceError):
        ws.write_file("a.txt", "2", overwrite=False)
    ws.write_file("a.txt", "3")
    assert os.listdir(ws.root) == ["a.txt"]


def test_listing_is_capped(ws: Workspace) -> None:
    for i in range(60):
        Path(ws.root, f"f{i:02d}").write_text("")
    listing = ws.list_files()
    assert listing.truncated and len(listing.entries) == 50


@pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root")
def test_files_written_as_root_belong_to_the_workspace_owner(ws: Workspace) -> None:
    os.chown(ws.root, 65534, 65534)
    ws.write_file("d/f.txt", "x")
    for rel in ("d", "d/f.txt"):
        st = os.stat(os.path.join(ws.root, rel))
        assert (st.st_uid, st.st_gid) == (65534, 65534)


def test_error_shape(ws: Workspace) -> None:
    with pytest.raises(WorkspaceError) as err:
        ws.read_file("../x")
    assert err.value.to_dict() == {"error": {"code": "path_escape", "message": err.value.message}}


def test_root_must_exist(tmp_path: Path) -> None:
    with pytest.raises(WorkspaceError) as err:
        Workspace(tmp_path / "nope")
    assert _code(err) == "not_found"
