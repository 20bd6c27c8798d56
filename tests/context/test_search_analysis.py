"""Session search's text analysis (Porter stemming, possessives, dates) and its re-ranking, as functions."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from minihermes.context._dates import date_terms, query_dates
from minihermes.context._porter import porter
from minihermes.context._text import search_query_terms, search_stem, search_terms, snippet, stem
from minihermes.context.session_index import rerank, speaker_of, window_terms

# Pairs from Porter's paper and the reference vocabulary (tartarus.org/martin/PorterStemmer).
PORTER = {
    "caresses": "caress",
    "ponies": "poni",
    "ties": "ti",
    "caress": "caress",
    "cats": "cat",
    "feed": "feed",
    "agreed": "agre",
    "plastered": "plaster",
    "bled": "bled",
    "motoring": "motor",
    "sing": "sing",
    "conflated": "conflat",
    "troubled": "troubl",
    "sized": "size",
    "hopping": "hop",
    "tanned": "tan",
    "falling": "fall",
    "hissing": "hiss",
    "fizzed": "fizz",
    "failing": "fail",
    "filing": "file",
    "happy": "happi",
    "sky": "sky",
    "relational": "relat",
    "conditional": "condit",
    "rational": "ration",
    "valenci": "valenc",
    "digitizer": "digit",
    "conformabli": "conform",
    "radicalli": "radic",
    "differentli": "differ",
    "vileli": "vile",
    "analogousli": "analog",
    "vietnamization": "vietnam",
    "predication": "predic",
    "operator": "oper",
    "feudalism": "feudal",
    "decisiveness": "decis",
    "hopefulness": "hope",
    "callousness": "callous",
    "formaliti": "formal",
    "sensitiviti": "sensit",
    "sensibiliti": "sensibl",
    "triplicate": "triplic",
    "formative": "form",
    "formalize": "formal",
    "electriciti": "electr",
    "electrical": "electr",
    "hopeful": "hope",
    "goodness": "good",
    "revival": "reviv",
    "allowance": "allow",
    "inference": "infer",
    "airliner": "airlin",
    "gyroscopic": "gyroscop",
    "adjustable": "adjust",
    "defensible": "defens",
    "irritant": "irrit",
    "replacement": "replac",
    "adjustment": "adjust",
    "dependent": "depend",
    "adoption": "adopt",
    "homologou": "homolog",
    "communism": "commun",
    "activate": "activ",
    "angulariti": "angular",
    "homologous": "homolog",
    "effective": "effect",
    "bowdlerize": "bowdler",
    "probate": "probat",
    "rate": "rate",
    "cease": "ceas",
    "controll": "control",
    "roll": "roll",
    "generalizations": "gener",
    "oscillators": "oscil",
}


@pytest.mark.parametrize(("word", "expected"), sorted(PORTER.items()))
def test_porter_matches_the_reference(word, expected):
    assert porter(word) == expected


def test_porter_leaves_short_numeric_and_non_ascii_words_alone():
    assert [porter(w) for w in ("is", "2023", "café", "b2b")] == ["is", "2023", "café", "b2b"]


def test_search_terms_conflate_derivations_the_light_stemmer_keeps_apart():
    assert search_terms("collaborate") == search_terms("collaboration") == ["collabor"]
    assert stem("collaborate") != stem("collaboration")  # the memory store's stemmer is unchanged
    assert search_terms("promoted promotions") == ["promot", "promot"]


def test_possessives_and_apostrophes():
    assert search_terms("Gina's store") == ["gina", "store"]
    assert search_stem("gina's") == "gina"
    assert search_terms("at 5 o'clock") == ["5", "clock"]
    assert search_query_terms("What is Gina's favourite dance style?") == [
        "gina",
        "favourit",
        "danc",
        "style",
    ]
    assert search_query_terms("what is it") == ["what", "is", "it"]  # all stop words: the words themselves


def test_snippets_highlight_with_the_search_stemmer():
    text = "We agreed to collaborate with the dancers next week."
    out = snippet(text, search_query_terms("collaboration with dancers"), stemmer=search_stem)
    assert "[collaborate]" in out and "[dancers]" in out
    assert "[collaborate]" not in snippet(text, search_query_terms("collaboration"))  # light stemmer


def test_date_terms_and_query_dates():
    at = datetime(2022, 11, 9, 18, 30, tzinfo=UTC).timestamp()
    assert date_terms(at) == ["on20221109", "in202211"]
    assert date_terms(None) == [] and date_terms(0) == []
    for query in (
        "what did Nate cook on 9 November, 2022?",
        "what did Nate cook on November 9th 2022?",
        "what did Nate cook on the 9th of Nov. 2022?",
        "what did Nate cook on 2022-11-09?",
    ):
        terms, rest = query_dates(query)
        assert terms == ["on20221109", "in202211"], query
        assert "2022" not in rest and "cook" in rest
    assert query_dates("plans for May 2023") == (["in202305"], "plans for  ")
    # No year, or the modal "may": words, not dates. An impossible day leaves its month.
    for query in ("on 9 November", "we may go"):
        assert query_dates(query) == ([], query)
    assert query_dates("on 30 February 2023") == (["in202302"], "on 30  ")


def test_speaker_of_a_message():
    assert speaker_of({"role": "user", "name": "Caroline", "content": "hi"}, "u1") == "Caroline"
    assert speaker_of({"role": "user", "content": "hi"}, "u1") == "u1"
    assert speaker_of({"role": "assistant", "content": "hi"}, "u1") == ""
    assert speaker_of({"role": "tool", "name": "shell", "content": "ok"}, "u1") == ""


def test_a_window_holds_the_message_twice_its_neighbours_and_its_dates():
    own = [["a"], ["b"], ["c"], ["d"], ["e"]]
    assert window_terms(own, 2, ["on20221109"]).split() == ["c", "c", "a", "b", "d", "on20221109"]
    assert window_terms(own, 0, []).split() == ["a", "a", "b"]
    assert window_terms(own, 4, []).split() == ["e", "e", "c", "d"]


def _meta(session: str, text: str, speaker: str = "") -> dict[str, object]:
    return {"session_id": session, "text": text, "speaker": speaker, "words": len(search_terms(text))}


def test_rerank_prefers_the_session_that_keeps_coming_up():
    candidates = [
        (2.0, _meta("s1", "pottery class on tuesday")),
        (2.0, _meta("s2", "pottery class on monday")),
        (1.5, _meta("s2", "the pottery bowl dried")),
        (1.5, _meta("s2", "a pottery glaze")),
    ]
    scores = rerank(["potteri", "class"], candidates)
    assert scores[1] > scores[0]


def test_rerank_prefers_the_named_speaker_and_longer_messages():
    same = "we talked about the budget review"
    candidates = [(1.0, _meta("s", same, "Alice")), (1.0, _meta("s", same, "Bob"))]
    bob_first = rerank(search_query_terms("what did Bob say about the budget"), candidates)
    assert bob_first[1] > bob_first[0]
    # Two speakers named: no speaker preference.
    both = rerank(search_query_terms("Alice and Bob on the budget"), candidates)
    assert both[0] == both[1]
    short, long = _meta("s", "budget!"), _meta("s", "the budget review moved the launch to March")
    scores = rerank(["budget"], [(1.0, short), (1.0, long)])
    assert scores[1] > scores[0]
    assert rerank(["x"], []) == []
