"""``minihermes skills approve / reject`` for candidate skills, and ``skills show`` saying what holds a
candidate back (its evaluation, the approval its tools need), embedded and against a served node."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from ._served import as_, cli, ok_json, served, squash

WRITES = "1. write_file: write the note to {path}\n2. read_file: read {path} back"
SAFE = "1. calculator: compute {expression}"


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with served(tmp_path_factory, "skills") as u:
        yield u


def _call(where: list[str], actor: str, op: str, **payload: object) -> dict:
    result = cli("call", actor, op, json.dumps(payload), *where)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _candidate(where: list[str], name: str, procedure: str, passed: bool | None) -> str:
    """A learned skill as the workflow leaves it: proposed, then (maybe) evaluated."""
    made = _call(
        where, "skill_store", "propose_skill", name=name, description=f"{name} things", procedure=procedure
    )
    skill_id = made["skill_id"]
    assert made["skill_status"] == "candidate"
    if passed is not None:
        details = {
            "baseline": {"answered": False},
            "with_skill": {"answered": passed, "note": "read-back differs"},
        }
        _call(
            where,
            "skill_store",
            "record_evaluation",
            skill_id=skill_id,
            version=1,
            passed=passed,
            details=details,
        )
    return skill_id


def _approve_and_reject(where: list[str]) -> None:
    held = _candidate(where, "save-note", WRITES, passed=True)
    failed = _candidate(where, "sum-up", SAFE, passed=False)
    fresh = _candidate(where, "tidy-files", "1. list_files: list {folder}", passed=None)
    candidates = ok_json("skills", "list", "--status", "candidate", *where)["skills"]
    assert {s["skill_id"] for s in candidates} == {held, failed, fresh}

    shown = cli("skills", "show", held, *where)
    assert shown.exit_code == 0, shown.output
    text = squash(shown.stdout)
    assert squash("Not live yet: Its evaluation of v1 passed.") in text
    assert squash("outside effects (write_file, read_file): an admin must approve it") in text
    assert squash(f"minihermes skills approve {held}") in text
    shown = squash(cli("skills", "show", failed, *where).stdout)
    assert squash("Its evaluation of v1 failed") in shown and "read-backdiffers" in shown  # its details
    assert squash("has not been evaluated yet") in squash(cli("skills", "show", fresh, *where).stdout)
    raw = ok_json("skills", "show", held, *where)  # --json: the op's reply as it is, no prose
    assert raw["skill"]["status"] == "candidate" and "Not live" not in json.dumps(raw)

    approved = cli("skills", "approve", held, *where)
    assert approved.exit_code == 0 and f"approved {held}: it is active" in approved.stdout
    assert ok_json("skills", "show", held, *where)["skill"]["status"] == "active"
    late = ok_json("skills", "approve", fresh, *where)  # approved, but its evaluation has not passed
    assert late["skill_status"] == "candidate"

    unsaid = cli("skills", "reject", failed, *where)  # a rejection says why
    assert unsaid.exit_code == 2 and "--reason" in unsaid.output
    rejected = ok_json("skills", "reject", failed, "--reason", "answers differ", *where)
    assert rejected["skill_status"] == "archived" and rejected["rejected"]["reason"] == "answers differ"
    shown_rejected = ok_json("skills", "show", failed, *where)["skill"]
    assert shown_rejected["status"] == "archived"
    assert shown_rejected["rejected"]["reason"] == "answers differ" and shown_rejected["rejected"]["by"]
    said = cli("skills", "reject", fresh, "--reason", "not needed", *where)
    assert said.exit_code == 0 and f"rejected {fresh}: archived" in said.stdout
    assert ok_json("skills", "recover", fresh, *where)["skill_status"] == "candidate"  # back, still unproven
    not_candidate = cli("skills", "reject", held, "--reason", "changed my mind", *where)
    assert (
        not_candidate.exit_code == 1
        and "conflict" in not_candidate.stderr
        and "active" in not_candidate.stderr
        and "archive" in not_candidate.stderr
    )
    unknown = cli("skills", "approve", "skill-nope", *where)
    assert unknown.exit_code == 1 and "not_found" in unknown.stderr
    assert len(unknown.stderr.strip().splitlines()) == 1
    remaining = ok_json("skills", "list", "--status", "candidate", *where)["skills"]
    assert [s["skill_id"] for s in remaining] == [fresh]


def test_candidates_on_the_local_data_dir(tmp_path):
    _approve_and_reject(["--data-dir", str(tmp_path / "data")])


@pytest.mark.slow
def test_candidates_against_a_served_node(url):
    _approve_and_reject(as_(url))
    # Deciding on candidates is an admin's: a user may neither approve nor reject one (the API's answers,
    # as the CLI passes them on).
    other = _candidate(
        as_(url), "run-report", "1. terminal: run {command}\n2. write_file: save it to {path}", True
    )
    refused = cli("skills", "approve", other, *as_(url, "CLI_USER"))
    assert refused.exit_code == 1 and "permission_denied" in refused.stderr, refused.output
    refused = cli("skills", "reject", other, "--reason", "mine now", *as_(url, "CLI_USER"))
    assert refused.exit_code == 1 and "permission_denied" in refused.stderr, refused.output
    assert ok_json("skills", "show", other, *as_(url))["skill"]["status"] == "candidate"
