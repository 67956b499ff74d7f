"""Search-R1's protocol pieces: EM/F1 on hand-written cases, turn parsing, the <information> rendering, the prompt."""

from __future__ import annotations

import pytest

from stepgym.envs.searchqa.protocol import (
    INVALID_FEEDBACK,
    exact_match,
    f1_score,
    format_passage,
    has_answer,
    make_prompt,
    normalize_answer,
    parse_turn,
    render_information,
)


@pytest.mark.parametrize(
    ("pred", "golds", "em"),
    [
        ("Paris", ["Paris"], 1.0),
        ("paris", ["Paris"], 1.0),  # case
        ("The Beatles", ["Beatles"], 1.0),  # leading article
        ("beatles", ["the Beatles"], 1.0),
        ("an apple a day", ["apple day"], 1.0),  # articles anywhere
        ("U.S.A.", ["USA"], 1.0),  # punctuation
        ("Röntgen!", ["Röntgen"], 1.0),  # non-ASCII letters are kept, ASCII punctuation dropped
        ("  Wilhelm   Conrad  Röntgen ", ["Wilhelm Conrad Röntgen"], 1.0),  # whitespace
        ("Jesus", ["Jesus Christ"], 0.0),  # partial is not exact
        ("Mark Twain", ["Samuel Clemens", "Mark Twain"], 1.0),  # any of several golds
        ("Twain", ["Samuel Clemens", "Mark Twain"], 0.0),
        ("theatre", ["atre"], 0.0),  # articles are removed as words only
        ("1,000", ["1000"], 1.0),
        ("", ["x"], 0.0),
        ("a", [""], 1.0),  # both normalise to the empty string (Search-R1 scores this 1 too)
        ("Paris", "Paris", 1.0),  # a bare string gold
    ],
)
def test_exact_match_hand_cases(pred: str, golds: list[str] | str, em: float) -> None:
    assert exact_match(pred, golds) == em


def test_normalize_answer_order() -> None:
    # lower -> punctuation -> articles -> whitespace: "The," loses its comma, then "the" goes as an article
    assert normalize_answer("The, Cat-in The Hat!") == "catin hat"
    assert normalize_answer("A.") == ""


@pytest.mark.parametrize(
    ("pred", "golds", "f1"),
    [
        ("Wilhelm Conrad Röntgen", ["Wilhelm Conrad Röntgen"], 1.0),
        ("Conrad Röntgen", ["Wilhelm Conrad Röntgen"], 0.8),  # p=1, r=2/3
        ("the cat sat", ["a dog sat"], 0.5),  # tokens after normalisation: [cat, sat] vs [dog, sat]
        ("yes", ["no"], 0.0),
        ("yes", ["yes"], 1.0),
        ("no way", ["no"], 0.0),  # a yes/no gold only matches exactly
        ("Jesus", ["Jesus Christ", "Christ"], 2 / 3),  # the best gold
        ("", ["x"], 0.0),
    ],
)
def test_f1_hand_cases(pred: str, golds: list[str], f1: float) -> None:
    assert f1_score(pred, golds) == pytest.approx(f1)


@pytest.mark.parametrize(
    ("text", "kind", "content"),
    [
        (
            "<think>who?</think><search>first nobel prize physics</search>",
            "search",
            "first nobel prize physics",
        ),
        ("<search> spaced query </search>", "search", "spaced query"),
        ("<think>done</think>\n<answer> Wilhelm Röntgen </answer>", "answer", "Wilhelm Röntgen"),
        ("<answer>x</answer> trailing text is never generated", "answer", "x"),
    ],
)
def test_parse_valid_turns(text: str, kind: str, content: str) -> None:
    turn = parse_turn(text)
    assert (turn.kind, turn.content, turn.reason) == (kind, content, "")


@pytest.mark.parametrize(
    ("text", "reason_part"),
    [
        ("", "empty"),
        ("just thinking", "no <search>"),
        ("<think>only thoughts</think>", "no <search>"),
        ("<search>a</search><search>b</search>", "2 <search> tags"),
        ("<search>a</search><answer>b</answer>", "both a <search> and an <answer>"),
        ("<answer>a</answer><answer>b</answer>", "2 <answer> tags"),
        ("<search></search>", "<search> tag is empty"),
        ("<answer>   </answer>", "<answer> tag is empty"),
        ("<search>unclosed", "not closed"),
        ("<search>a</answer>", "not closed"),
        ("a</search></search>", "closing"),
        ("<SEARCH>upper</SEARCH>", "no <search>"),  # tags are case-sensitive, as in Search-R1
        ("<ANSWER>gold</ANSWER>", "no <search>"),
        ("<ans\u200bwer>gold</ans\u200bwer>", "no <search>"),  # an invisible character breaks the tag
    ],
)
def test_parse_invalid_turns(text: str, reason_part: str) -> None:
    turn = parse_turn(text)
    assert turn.kind == "invalid" and not turn.valid
    assert reason_part in turn.reason


def test_lenient_parsing_is_search_r1s_rule() -> None:
    assert parse_turn("<search>a</search><answer>b</answer>", strict=False).content == "a"
    assert parse_turn("<answer>b</answer><search>a</search>", strict=False).kind == "answer"
    # the turn is cut at its first </search> (else its first </answer>) before the first block is taken
    assert parse_turn("x </answer> <answer>gold</answer>", strict=False).kind == "invalid"
    assert parse_turn("<answer>gold</answer> <search>q</search>", strict=False).content == "gold"
    assert parse_turn("<search>a</answer><search>b</search>", strict=False).content == "a</answer><search>b"
    # an empty block is an empty query / answer upstream, not an invalid turn
    assert (
        parse_turn("<search></search>", strict=False).kind,
        parse_turn("<answer> </answer>", strict=False).content,
    ) == ("search", "")
    assert parse_turn("<ANSWER>gold</ANSWER>", strict=False).kind == "invalid"


def test_information_rendering_matches_search_r1() -> None:
    contents = [
        '"Citibank"\nThe City Bank of New York was founded in 1812.',
        "Title only\n",
        "Röntgen\nline1\nline2",
    ]
    assert (
        format_passage(1, contents[0])
        == 'Doc 1(Title: "Citibank") The City Bank of New York was founded in 1812.\n'
    )
    out = render_information(contents)
    assert out.startswith("\n\n<information>Doc 1(Title: ") and out.endswith("</information>\n\n")
    assert "Doc 2(Title: Title only) \nDoc 3(Title: Röntgen) line1\nline2</information>" in out
    assert render_information([]) == "\n\n<information></information>\n\n"
    assert INVALID_FEEDBACK.startswith("\nMy previous action is invalid.") and INVALID_FEEDBACK.endswith(
        "Let me try again.\n"
    )


def test_has_answer_is_whole_token() -> None:
    assert has_answer("The first prize went to Wilhelm Conrad Röntgen in 1901.", ["wilhelm conrad röntgen"])
    assert has_answer("born in 1812, the bank", ["1812"])
    assert not has_answer("in 18120 years", ["1812"])
    assert not has_answer("anything", [""])


def test_prompt_is_search_r1s_template(data_dir) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    rows = pq.read_table(data_dir / "searchqa/search_r1/nq_search/test.parquet").slice(0, 50).to_pylist()
    for row in rows:
        assert make_prompt(row["question"]) == row["prompt"][0]["content"]
    assert make_prompt("  who told the story of the prodigal son ").endswith(
        "Question: who told the story of the prodigal son?\n"
    )
