"""Secret redaction and token counting."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from minihermes.context import redact, redact_text
from minihermes.context._text import analyze, query_terms, snippet, stem
from minihermes.context.redact import may_hold_secret
from minihermes.context.tokens import OfflineCounter, count_tokens, default_counter, message_tokens

SECRETS = [
    "sk-abcdefghijklmnopqrstuvwx",
    "sk-ant-api03-abcdefghijklmnopqrstuv",
    "AKIAABCDEFGHIJKLMNOP",
    "ghp_abcdefghijklmnopqrstuvwxyz0123",
    "xoxb-1234567890-abcdefghij",
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    "sk_live_abcdefghijklmnopqrstuvwx",
    "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA\n-----END RSA PRIVATE KEY-----",
]


@pytest.mark.parametrize("secret", SECRETS)
def test_shaped_secrets_are_redacted(secret):
    out = redact_text(f"here it is: {secret} (keep it safe)")
    assert secret not in out and "[REDACTED]" in out and out.startswith("here it is:")


@pytest.mark.parametrize(
    "text",
    [
        "my password is hunter22",
        "password: hunter22",
        "DB_PASSWORD=hunter22",
        '{"api_key": "hunter22"}',
        "Authorization: Bearer hunter22hunter22",
        "the access_token=hunter22 expires",
    ],
)
def test_introduced_secrets_are_redacted(text):
    assert "hunter22" not in redact_text(text)


@pytest.mark.parametrize(
    "text", ["the token budget is 75%", "passwords must be long", "42 * 17 = 714", "use the api docs"]
)
def test_ordinary_text_is_left_alone(text):
    assert redact_text(text) == text


def test_unicode_case_variants_are_redacted_as_the_regexes_see_them():
    # re.IGNORECASE matches long s to s, the Kelvin sign to k, dotted and dotless I to i: the pre-check too.
    for text in [
        "pa\u017f\u017fword: hunter22",
        "api_\u212aey=hunter22",
        "credent\u0130al: hunter22",
        "credent\u0131als=hunter22",
    ]:
        assert may_hold_secret(text) and "hunter22" not in redact_text(text), text


_PIECES = [
    "pass", "PaSs", "\u017f", "\u212a", "\u0130", "\u0131", "word", "wd", "phrase", "api", "key", "_", "-", " ", ":", "=", "is",
    "token", "Bearer", "basic", "secret", "client", "credential", "private", "sk-", "ant-", "eyJ", ".", "mh_",
    "AKIA", "ASIA", "ghp_", "github_pat_", "glpat-", "xoxb-", "AIza", "sk_", "live_", "test_", "hf_",
    "-----BEGIN ", "RSA PRIVATE KEY-----", "abcdefghij", "0123456789ABCDEF", "'", '"', "\n", "x", "é",
]  # fmt: skip


@settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(_PIECES), max_size=14).map("".join))
def test_the_quick_pre_check_never_hides_a_match(text):
    # Soundness of the fast path: whenever a pattern would change the text, the pre-check says "maybe".
    from minihermes.context.redact import _ASSIGNED, _BEARER, _SHAPE

    if any(p.search(text) for p in (_SHAPE, _BEARER, _ASSIGNED)):
        assert may_hold_secret(text)


def test_json_values_under_secret_keys_are_redacted():
    value = {"user": "bob", "password": "x1", "nested": [{"client_secret": "abc", "n": 3}], "max_tokens": 5}
    assert redact(value) == {
        "user": "bob",
        "password": "[REDACTED]",
        "nested": [{"client_secret": "[REDACTED]", "n": 3}],
        "max_tokens": 5,
    }


def test_the_offline_counter_is_deterministic_and_plausible():
    counter = default_counter()
    assert counter.name in ("offline",) or counter.name.startswith("tiktoken:")
    text = "The quick brown fox jumps over the lazy dog. " * 10
    offline = OfflineCounter()
    assert offline.count(text) == offline.count(text) == 100  # 9 words + 1 period, ten times
    assert offline.count("") == 0
    assert offline.count("internationalization") == 5  # long words split into pieces
    assert count_tokens("12345678") == 3  # digit groups of three
    msg = {"role": "assistant", "content": "hi", "tool_calls": [{"name": "calc", "input": {"x": 1}}]}
    assert message_tokens(msg) > message_tokens({"role": "assistant", "content": "hi"})


def test_analysis_stems_and_drops_stop_words():
    assert stem("painting") == stem("painted") == stem("paints") == "paint"
    assert stem("running") == "run" and stem("studies") == "study"
    assert analyze("What did Caroline paint?") == "carolin paint"
    assert query_terms("what is it") == ["what", "is", "it"]  # all stop words: keep them
    assert (
        snippet("Caroline painted a sunrise over the lake", ["paint"])
        == "Caroline [painted] a sunrise over the lake"
    )


def test_counts_are_remembered_without_changing_them():
    from minihermes.context import tokens
    from minihermes.llm import MessageView

    text = "a fairly long sentence about tokens, repeated so the memo holds it " * 3
    first = tokens.count_tokens(text)
    assert tokens.count_tokens(text) == first == tokens.OfflineCounter().count(text)
    plain = {"role": "tool", "content": text, "tool_calls": [{"name": "calc", "input": {"x": 1}}]}
    view = MessageView(plain)
    assert tokens.message_tokens(view) == tokens.message_tokens(view) == tokens.message_tokens(plain)


def test_tool_spec_counts_are_remembered_on_read_only_specs_only():
    import json

    from minihermes.context import tokens
    from minihermes.llm import ToolView

    spec = {"name": "calc", "description": "adds numbers " * 10, "input_schema": {"type": "object"}}
    view = ToolView(spec)
    expected = tokens.count_tokens(json.dumps(spec, sort_keys=True))
    assert tokens.tools_tokens([view, spec]) == tokens.tools_tokens([view, spec]) == 2 * expected

    class Chars:
        name = "chars"

        def count(self, text: str) -> int:
            return len(text)

    assert tokens.tools_tokens([view], Chars()) == len(json.dumps(spec, sort_keys=True))  # per counter
    spec["description"] = "changed"  # a plain dict is counted afresh every time
    assert tokens.tools_tokens([spec]) == tokens.count_tokens(json.dumps(spec, sort_keys=True)) != expected
