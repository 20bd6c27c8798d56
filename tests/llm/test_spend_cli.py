"""``minihermes usage`` (issue 30): spend per period and caps, embedded and against a served node with users."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ..cli._served import as_, cli, ok_json, served


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with served(tmp_path_factory, "usage") as u:
        yield u


def test_usage_on_the_local_data_dir_shows_todays_spend_and_sets_a_cap(tmp_path):
    d = ["--data-dir", str(tmp_path / "data")]
    chat = cli("call", "agent", "chat", '{"message": "hello", "session_id": "u1"}', *d)
    assert chat.exit_code == 0, chat.output
    usage = ok_json("usage", *d)
    assert usage["scope"] == "tenant" and usage["current"]["calls"] >= 1
    assert "simulated/simulated" in usage["current"]["models"]  # the offline model: priced at $0
    capped = ok_json("usage", "--period", "month", "--set-usd", "5", "--time-zone", "Europe/Paris", *d)
    [cap] = capped["caps"]
    assert (cap["period"], cap["max_usd"], cap["time_zone"]) == ("month", 5.0, "Europe/Paris")
    table = cli("usage", "--period", "month", *d)
    assert table.exit_code == 0 and "month cap $5.0000 (Europe/Paris)" in table.stdout
    bad = cli("usage", "--period", "week", *d)
    assert bad.exit_code == 2 and "--period" in bad.output


def test_a_user_sees_their_own_usage_and_cannot_set_a_cap(url):
    admin, user = as_(url), as_(url, "CLI_USER")
    set_ = ok_json("usage", "--scope", "user", "--key", "uma", "--period", "day", "--set-usd", "1", *admin)
    assert set_["key"] == "uma" and set_["caps"][0]["max_usd"] == 1.0
    mine = ok_json("usage", *user)
    assert (mine["scope"], mine["key"]) == ("user", "uma") and mine["caps"][0]["max_usd"] == 1.0
    raise_ = cli("usage", "--scope", "user", "--key", "uma", "--set-usd", "100", *user)
    assert raise_.exit_code == 1 and "permission_denied" in raise_.stderr
    other = cli("usage", "--scope", "user", "--key", "ada", *user)
    assert other.exit_code == 1 and "permission_denied" in other.stderr
    assert ok_json("usage", *user)["caps"][0]["max_usd"] == 1.0
