"""Search-QA against Search-R1's own rules, side by side, on fuzzed and adversarial turns.

The references below are this test's own small re-implementations of what Search-R1 does (read from
``search_r1/llm_agent/generation.py``: ``_postprocess_responses`` cuts a turn at its first ``</search>``, else its
first ``</answer>``; ``postprocess_predictions`` takes the leftmost ``<search>…</search>`` or ``<answer>…</answer>``,
case-sensitively, its content stripped; ``verl/utils/reward_score/qa_em.py``: ``normalize_answer`` and
``em_check``). They are written as plain scans, not with the package's regular expressions, so that a shared
mistake is unlikely. ``strict_format=False`` must agree with them on every turn; the default strict rule may only
refuse more turns, and where it accepts one it must read it as upstream does.
"""

from __future__ import annotations

import string

import numpy as np
import pytest

from stepgym.envs.searchqa.protocol import exact_match, normalize_answer, parse_turn


def ref_cut(turn: str) -> str:
    for tag in ("</search>", "</answer>"):
        i = turn.find(tag)
        if i >= 0:
            return turn[:i] + tag
    return turn


def ref_parse(turn: str) -> tuple[str | None, str]:
    """(action, content) of upstream's parse of the already-cut turn; action None when nothing matches."""
    for start in range(len(turn)):
        for kind in ("search", "answer"):
            opener = f"<{kind}>"
            if turn.startswith(opener, start):
                end = turn.find(f"</{kind}>", start + len(opener))
                if end >= 0:
                    return kind, turn[start + len(opener) : end].strip()
    return None, ""


def ref_normalize(text: str) -> str:
    text = text.lower()
    text = "".join(c for c in text if c not in set(string.punctuation))
    words = []
    for piece in _split_on_non_word(text):
        words.append(" " if piece in ("a", "an", "the") else piece)
    return " ".join("".join(words).split())


def _split_on_non_word(text: str) -> list[str]:
    """Runs of word characters and single other characters (so an article is a whole run, as ``\\b`` sees it)."""
    out: list[str] = []
    for ch in text:
        if out and (ch.isalnum() or ch == "_") and (out[-1][-1].isalnum() or out[-1][-1] == "_"):
            out[-1] += ch
        else:
            out.append(ch)
    return out


def ref_em(prediction: str, golds: list[str]) -> float:
    pred = ref_normalize(prediction)
    return 1.0 if any(ref_normalize(g) == pred for g in golds) else 0.0


TAGS = ["<search>", "</search>", "<answer>", "</answer>", "<think>", "</think>"]
PIECES = [
    "<SEARCH>", "</Answer>", "<ANSWER>", "<ans\u200bwer>", "</sea\u200brch>", "<search >", "</", "<", ">",
    "gold", "Mason Alan Dinehart", "the", "The", "an", "a", "x", " ", "  ", "\n", "\t", "\u00a0", "\u200b",
    "\u200d", "\ufeff", "\x00", "\x07", "\u2028", "\ud800", ".", ",", "!", "é", "Ⅻ", "_", "‘", "’",
]  # fmt: skip
GOLDS = [["gold"], ["Mason Alan Dinehart", "Alan Dinehart"], ["the x"], ["a"], [""]]


def _fuzz_turns(n: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    turns = []
    for _ in range(n):
        k = int(rng.integers(1, 12))
        picks = [
            TAGS[int(rng.integers(len(TAGS)))]
            if rng.random() < 0.35
            else PIECES[int(rng.integers(len(PIECES)))]
            for _ in range(k)
        ]
        turns.append("".join(picks))
    return turns


ADVERSARIAL = [
    "<ANSWER>gold</ANSWER>",
    "<Answer>gold</Answer>",
    "<answer>Mason Alan\u200b Dinehart</answer>",
    "<ans\u200bwer>gold</ans\u200bwer>",
    "<answer>gold\x00</answer>",
    "<answer>\ufeffgold</answer>",
    "<answer>gold\u00a0</answer>",  # NBSP is whitespace to str.strip() and str.split(): upstream scores 1
    "x </answer> <answer>gold</answer>",
    "<answer>gold</answer></search>",
    "<search>q</answer><answer>gold</answer>",
    "<search>q</search><answer>gold</answer>",
    "<answer>gold</answer><search>q</search>",
    "<search></search>",
    "<answer></answer>",
    "<answer>gold",
    "<think><answer>gold</answer></think>",
    "<search>a<search>b</search>",
    "<answer>The Gold!</answer>",
    "<answer>\u2028gold\u2028</answer>",
    "<answer>go\u200dld</answer>",
]


def test_lenient_rule_is_search_r1s() -> None:
    answers = 0
    for turn in ADVERSARIAL + _fuzz_turns(5000, seed=12):
        kind, content = ref_parse(ref_cut(turn))
        got = parse_turn(turn, strict=False)
        assert (got.kind if got.valid else None, got.content if got.valid else "") == (kind, content), turn
        if kind == "answer":
            answers += 1
            for golds in GOLDS:
                assert exact_match(got.content, golds) == ref_em(content, golds), (turn, golds)
    assert answers > 100  # the fuzz reaches the scorer often enough to mean something


def test_strict_rule_accepts_only_what_upstream_reads_the_same() -> None:
    accepted = 0
    for turn in ADVERSARIAL + _fuzz_turns(5000, seed=13):
        got = parse_turn(turn)
        if got.valid:
            accepted += 1
            assert (got.kind, got.content) == ref_parse(ref_cut(turn)), turn
    assert accepted > 100


@pytest.mark.parametrize(
    "text",
    [
        "Mason Alan\u200b Dinehart", "The\u00a0Beatles", "an\u200ban", "U.S.A.", "the_the", "a-b c",
        "Ⅻ Ⅻ", "naïve café", "\ud800x", "THE END", "x\x00y", " the ", "ａ ｔｈｅ",
    ],
)  # fmt: skip
def test_normalisation_matches_qa_em(text: str) -> None:
    assert normalize_answer(text) == ref_normalize(text)


def test_invisible_characters_count_as_upstream() -> None:
    assert exact_match("Mason Alan\u200b Dinehart", ["Mason Alan Dinehart"]) == 0.0
    assert parse_turn("<ans\u200bwer>gold</ans\u200bwer>").kind == "invalid"
    assert parse_turn("<answer>Mason Alan\u200b Dinehart</answer>").content == "Mason Alan\u200b Dinehart"
