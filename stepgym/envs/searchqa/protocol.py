"""Search-R1's text protocol and scoring, written once: turn parsing, the ``<information>`` rendering, EM and F1.

Facts reproduced from Search-R1 (Jin et al., 2025; ``search_r1/llm_agent/generation.py``,
``verl/utils/reward_score/qa_em.py``, ``scripts/data_process/qa_search_*_merge.py``):

* The prompt (:func:`make_prompt`) is Search-R1's ``base`` template, byte for byte; the question is stripped and
  gets a ``?`` when it lacks one, as Search-R1's data processing does.
* A model turn is an action when it holds a ``<search>q</search>`` or an ``<answer>a</answer>``; Search-R1 stops
  generating at the first closing tag. A search is answered with
  ``"\\n\\n<information>" + passages.strip() + "</information>\\n\\n"`` where each passage is rendered
  ``"Doc {i}(Title: {first line}) {rest}\\n"`` (:func:`render_information`); anything else gets
  :data:`INVALID_FEEDBACK`, Search-R1's own sentence, verbatim (StepOPSD's step segmentation searches for it).
* EM normalises with lower-case → drop ASCII punctuation → drop the articles a/an/the → collapse whitespace
  (SQuAD's ``normalize_answer``), and scores 1 when the normalised answer equals any normalised gold answer.
  F1 is SQuAD's token F1 over the same normalisation, maximised over the gold answers (FlashRAG's ``F1_Score``,
  which also scores a yes/no/noanswer mismatch 0).

Tags are matched case-sensitively, as Search-R1 does (``<ANSWER>x</ANSWER>`` is no action), and the turn is
parsed exactly as written: no character is removed or replaced before parsing, scoring or searching.

Deliberate difference (the issue's rule, shared with ``stepgym.envs.searchqa.prompt.parse_search_r1``): Search-R1 takes
the *first* ``<search>``/``<answer>`` block of a turn; here a turn with two action tags (two searches, or a search
and an answer), an unclosed tag or an empty query/answer is invalid, with a precise reason in
``info[schema.INVALID_REASON]``. ``strict=False`` is Search-R1's rule exactly (:func:`cut_turn`, then the first
block; an empty block is a valid empty query or answer there, as upstream).
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = [
    "INVALID_FEEDBACK",
    "ParsedTurn",
    "cut_turn",
    "exact_match",
    "f1_score",
    "format_passage",
    "has_answer",
    "make_prompt",
    "normalize_answer",
    "normalize_question",
    "parse_turn",
    "render_information",
]

#: Search-R1's observation for a turn that is neither a search nor an answer (verbatim protocol text).
INVALID_FEEDBACK = (
    "\nMy previous action is invalid. If I want to search, I should put the query between <search> and </search>. "
    "If I want to give the final answer, I should put the answer between <answer> and </answer>. Let me try again.\n"
)

_PROMPT = (
    "Answer the given question. You must conduct reasoning inside <think> and </think> first every time you get "
    "new information. After reasoning, if you find you lack some knowledge, you can call a search engine by "
    "<search> query </search> and it will return the top searched results between <information> and "
    "</information>. You can search as many times as your want. If you find no further external knowledge needed, "
    "you can directly provide the answer inside <answer> and </answer>, without detailed illustrations. For "
    "example, <answer> Beijing </answer>. Question: {question}\n"
)

# Case-sensitive, as Search-R1's ``postprocess_predictions``.
_OPEN = re.compile(r"<(search|answer)>")
_CLOSE = re.compile(r"</(search|answer)>")
_BLOCK = re.compile(r"<(search|answer)>(.*?)</\1>", re.DOTALL)
_THINK = re.compile(r"<think>(.*?)</think>", re.DOTALL)


def normalize_question(question: str) -> str:
    """Search-R1's question clean-up: strip, and end with ``?``."""
    q = question.strip()
    return q if q.endswith("?") else q + "?"


def make_prompt(question: str) -> str:
    """Search-R1's ``base`` prompt for ``question`` (the first user message of ``nq_search/test.parquet``)."""
    return _PROMPT.format(question=normalize_question(question))


@dataclass(frozen=True)
class ParsedTurn:
    """One model turn, parsed. ``kind`` is ``"search"``, ``"answer"`` or ``"invalid"``.

    ``content`` is the query or answer (stripped); ``reason`` says why an invalid turn is invalid ('' otherwise);
    ``think`` is the first ``<think>`` block before the action, if any; ``end`` is the index just past the
    action's closing tag (what Search-R1 would have generated up to).
    """

    kind: str
    content: str = ""
    reason: str = ""
    think: str | None = None
    end: int = 0

    @property
    def valid(self) -> bool:
        return self.kind != "invalid"


def cut_turn(text: str) -> str:
    """What Search-R1 keeps of a generated turn: up to the first ``</search>``, else up to the first ``</answer>``.

    Search-R1 stops generation at either closing tag and then cuts the decoded text the same way, so a turn that
    closes a search anywhere is read only up to that tag, whatever it says before or after.
    """
    for tag in ("</search>", "</answer>"):
        head, found, _ = text.partition(tag)
        if found:
            return head + tag
    return text


def parse_turn(text: str, *, strict: bool = True) -> ParsedTurn:
    """Parse a Search-R1 model turn, exactly as written (tags are case-sensitive).

    ``strict=True`` (default): exactly one complete ``<search>…</search>`` or ``<answer>…</answer>`` with non-empty
    content; ``<think>`` optional; text after the closing tag is ignored (Search-R1 stops generating there).
    ``strict=False``: Search-R1's rule, :func:`cut_turn` and then the first complete block, whatever its content
    (an empty query is searched and an empty answer scored, as upstream).
    """
    if strict:
        return _parse_strict(text)
    cut = cut_turn(text)
    m = _BLOCK.search(cut)
    if m is None:
        return ParsedTurn("invalid", reason=_lenient_reason(text, cut))
    return _turn_from_match(text, m)


def _lenient_reason(text: str, cut: str) -> str:
    if not text.strip():
        return "the turn is empty"
    if not _OPEN.search(text) and not _CLOSE.search(text):
        return "the turn has no <search>...</search> and no <answer>...</answer>"
    if cut != text:
        return f"the turn ends at its first {cut[cut.rindex('<') :]} and no block closes there"
    return "the <search>/<answer> tag is not closed by its matching closing tag"


def _turn_from_match(text: str, m: re.Match[str]) -> ParsedTurn:
    tm = _THINK.search(text, 0, m.start())
    return ParsedTurn(m.group(1), m.group(2).strip(), "", tm.group(1).strip() if tm else None, m.end())


def _parse_strict(text: str) -> ParsedTurn:
    if not text or not text.strip():
        return ParsedTurn("invalid", reason="the turn is empty")
    opens, n_close = _OPEN.findall(text), len(_CLOSE.findall(text))
    if not opens and n_close == 0:
        return ParsedTurn(
            "invalid", reason="the turn has no <search>...</search> and no <answer>...</answer>"
        )
    if len(opens) > 1 or n_close > 1:
        kinds = sorted(set(opens))
        if len(kinds) == 2:
            what = "both a <search> and an <answer>"
        elif len(opens) > 1:
            what = f"{len(opens)} <{kinds[0]}> tags"
        else:
            what = f"{n_close} closing </search>/</answer> tags"
        return ParsedTurn(
            "invalid", reason=f"the turn has {what}; exactly one search or one answer is allowed"
        )
    m = _BLOCK.search(text)
    if m is None:
        return ParsedTurn(
            "invalid", reason="the <search>/<answer> tag is not closed by its matching closing tag"
        )
    turn = _turn_from_match(text, m)
    if not turn.content:
        return ParsedTurn("invalid", reason=f"the <{turn.kind}> tag is empty")
    return turn


def format_passage(index: int, contents: str) -> str:
    """``Doc {index}(Title: {title}) {text}\\n`` with the title the first line of ``contents`` (Search-R1)."""
    title, _, text = contents.partition("\n")
    return f"Doc {index}(Title: {title}) {text}\n"


def render_information(passages: Sequence[str]) -> str:
    """The observation of a search: the top-k passages (``contents`` strings) as Search-R1 renders them."""
    body = "".join(format_passage(i + 1, c) for i, c in enumerate(passages))
    return f"\n\n<information>{body.strip()}</information>\n\n"


# ---------------------------------------------------------------------------------------------------------------
# Scoring (SQuAD normalisation, as Search-R1's qa_em.py and FlashRAG)
# ---------------------------------------------------------------------------------------------------------------
_PUNCT = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(text: str) -> str:
    """lower → remove punctuation → remove articles → collapse whitespace (Search-R1 / SQuAD)."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in _PUNCT)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def _golds(golden_answers: str | Iterable[str]) -> list[str]:
    return [golden_answers] if isinstance(golden_answers, str) else [str(g) for g in golden_answers]


def exact_match(prediction: str, golden_answers: str | Iterable[str]) -> float:
    """1.0 when the normalised prediction equals any normalised gold answer, else 0.0."""
    pred = normalize_answer(prediction)
    return 1.0 if any(normalize_answer(g) == pred for g in _golds(golden_answers)) else 0.0


def f1_score(prediction: str, golden_answers: str | Iterable[str]) -> float:
    """Token F1 after normalisation, the best over the gold answers (0.0 for a yes/no/noanswer mismatch)."""
    pred = normalize_answer(prediction)
    best = 0.0
    for gold in _golds(golden_answers):
        g = normalize_answer(gold)
        if (pred in ("yes", "no", "noanswer") or g in ("yes", "no", "noanswer")) and pred != g:
            continue
        common = Counter(pred.split()) & Counter(g.split())
        overlap = sum(common.values())
        if overlap == 0:
            continue
        precision, recall = overlap / len(pred.split()), overlap / len(g.split())
        best = max(best, 2 * precision * recall / (precision + recall))
    return float(best)


def has_answer(passage: str, golden_answers: str | Iterable[str], *, normalized: bool = False) -> bool:
    """A gold answer occurs in ``passage`` as a whole-token span after normalisation (DPR/FlashRAG's test).

    ``normalized=True`` says ``passage`` is already ``normalize_answer``-ed (saves the work in loops).
    """
    text = f" {passage if normalized else normalize_answer(passage)} "
    for gold in _golds(golden_answers):
        g = normalize_answer(gold)
        if g and f" {g} " in text:
            return True
    return False
