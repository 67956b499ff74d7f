"""Search-QA's value labels against the gold answers: the step that first retrieves an answer-bearing passage
gains, a correct answer wins, a wrong one is harmful, and a server retriever without a corpus is refused."""

from __future__ import annotations

import re

import gymnasium as gym
import pytest

import stepgym  # noqa: F401
from stepgym import schema
from stepgym.errors import ValueOracleError
from stepgym.values import step_value_class
from stepgym.wrappers import ValueWrapper

pytestmark = pytest.mark.usefixtures("data_dir")


def _tokens(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def holds_gold(passage: str, golds) -> bool:
    """The test's own reading: a gold answer's words appear consecutively in the passage."""
    words = _tokens(passage)
    for gold in golds:
        g = [w for w in _tokens(gold) if w not in ("a", "an", "the")]
        if g and any(words[i : i + len(g)] == g for i in range(len(words) - len(g) + 1)):
            return True
    return False


@pytest.fixture(scope="module")
def env():
    e = ValueWrapper(gym.make("StepGym/SearchQA-v0", dataset="nq", split="test").unwrapped)
    yield e
    e.close()


def _passages(env, info) -> list[str]:
    corpus = env.unwrapped.corpus
    row = {pid: i for i, pid in enumerate(corpus.ids)}
    return [corpus.contents[row[p]] for p in info[schema.RETRIEVED_IDS]]


def test_the_first_answer_bearing_search_gains_and_the_right_answer_wins(env) -> None:
    checked = 0
    for index in range(6):
        obs, info = env.reset(options={"task_index": index})
        golds = env.unwrapped.task.golden_answers
        assert info[schema.VALUE_AFTER] == 2.0 and info[schema.VALUE_REACHABLE]
        gathered = False
        for query in [env.unwrapped.task.question, "completely unrelated words zebra", golds[0]]:
            *_, info = env.step(f"<search>{query}</search>")
            now = gathered or any(holds_gold(p, golds) for p in _passages(env, info))
            assert info[schema.VALUE_AFTER] == (1.0 if now else 2.0)
            assert info[schema.VALUE_GAIN] == (1.0 if now and not gathered else 0.0)
            gathered = now
            checked += 1
        obs, r, term, trunc, info = env.step(f"<answer>{golds[0]}</answer>")
        assert term and info[schema.VALUE_AFTER] == 0.0 and info[schema.VALUE_GAIN] == 1.0
        assert step_value_class(info) == 1 and info[schema.VALUE_BEST_REWARD] == 1.0
    assert checked == 18


def test_a_wrong_answer_is_harmful_and_an_invalid_turn_neutral(env) -> None:
    obs, info = env.reset(options={"task_index": 0})
    *_, info = env.step("no tags at all")
    assert info[schema.VALUE_GAIN] == 0.0 and step_value_class(info) == 0
    obs, r, term, trunc, info = env.step("<answer>certainly not the answer xyzzy</answer>")
    assert term and r == 0.0
    assert info[schema.VALUE_REACHABLE] is False and info[schema.VALUE_EXACT] is True
    assert info[schema.VALUE_GAIN] == -1.0 and step_value_class(info) == -1
    assert info[schema.VALUE_BEST_REWARD] == 0.0


def test_a_url_retriever_without_a_corpus_is_refused_at_wrap_time(env) -> None:
    raw = env.unwrapped
    saved, raw.corpus = raw.corpus, None  # what SearchQAEnv(retriever=<url>) holds
    try:
        with pytest.raises(ValueOracleError, match="corpus="):
            ValueWrapper(raw)
    finally:
        raw.corpus = saved
