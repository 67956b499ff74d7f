"""The adapter skeleton (stepgym.steps.episode / .advantages) on a real registered env, CreditFamily: an
episode gives the same prompts, step records and annotations as stepping the text env by hand; an env failure
mid-episode ends it aborted (not a traceback); shape_rows equals build_step_batch + shape_advantages."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from stepgym import schema
from stepgym.errors import RetrieverUnavailableError, StepRecordError
from stepgym.shapers import ShapeConfig, shape_advantages
from stepgym.steps.advantages import (
    Rows,
    RowSettings,
    check_group_sizes,
    mask_spans,
    needs_records,
    refuse_missing,
    shape_rows,
)
from stepgym.steps.batch import StepBatchOptions, build_step_batch
from stepgym.steps.episode import Episode, span_records
from stepgym.steps.record import episode_annotations, step_annotations
from stepgym.wrappers.text import make_text_env

ENV = "StepGym/CreditFamily-v0"


def _reply(action: str) -> str:
    return f"<action>{action}</action>"


def _replies(seed: int, n: int) -> list[str]:
    """A fixed mix of expert moves, admissible non-expert moves and unparsable replies."""
    rng = np.random.default_rng(seed)
    return [["expert", "other", "junk"][int(k)] for k in rng.choice(3, size=n, p=[0.6, 0.3, 0.1])]


def _pick(kind: str, info: dict, rng: np.random.Generator) -> str:
    if kind == "junk":
        return "I am not sure what to do"
    if kind == "expert":
        return _reply(info[schema.EXPERT_ACTION])
    return _reply(str(rng.choice(list(info[schema.ADMISSIBLE_ACTIONS]))))


@pytest.mark.parametrize("seed", [0, 1])
def test_an_episode_equals_stepping_the_text_env_by_hand(seed: int) -> None:
    task = f"family-train-{seed:05d}"
    by_hand = make_text_env(ENV)
    obs, info = by_hand.reset(seed=7, options={"task_id": task})
    episode = Episode.make(ENV)
    assert episode.reset(task, 7) == by_hand.prompt
    rng_a, rng_b = np.random.default_rng(seed), np.random.default_rng(seed)
    hand_records = []
    for kind in _replies(seed, 40):
        action = _pick(kind, info, rng_a)
        assert action == _pick(kind, episode.info, rng_b)
        before = info
        obs, reward, term, trunc, info = by_hand.step(action)
        turn = episode.step(action)
        assert turn is not None and turn.observation == obs and turn.reward == reward
        assert (turn.terminated, turn.truncated, turn.done) == (term, trunc, term or trunc)
        hand_records.append(step_annotations(before, action, reward, info, terminated=term))
        assert turn.record == hand_records[-1]
        if term or trunc:
            break
        assert episode.prompt == by_hand.prompt
    assert episode.done and not episode.aborted and episode.records == hand_records
    first_obs = episode.trajectory.initial_observation
    traj = schema.Trajectory(task, first_obs, episode.trajectory.initial_info, list(by_hand.history))
    assert episode.annotations() == episode_annotations(traj)
    assert episode.annotations()["steps"] == hand_records and len(hand_records) > 1
    episode.close()
    by_hand.close()


class _FailAt(gym.Wrapper):
    """Raises ``error`` at step ``at`` (a dead service, a crashed engine)."""

    def __init__(self, env: gym.Env, at: int, error: Exception) -> None:
        super().__init__(env)
        self.at, self.error, self.t = at, error, 0

    def reset(self, **kwargs):
        self.t = 0
        return self.env.reset(**kwargs)

    def step(self, action):
        self.t += 1
        if self.t == self.at:
            raise self.error
        return self.env.step(action)


@pytest.mark.parametrize(
    ("error", "cause"),
    [
        (RuntimeError("engine crashed"), "env_exception"),
        (RetrieverUnavailableError("down"), "retriever_unavailable"),
    ],
)
def test_an_env_failure_mid_episode_ends_it_aborted_not_a_traceback(error: Exception, cause: str) -> None:
    episode = Episode(make_text_env(_FailAt(gym.make(ENV), 3, error)))
    episode.reset("family-train-00000", 0)
    turns = [episode.step(_reply(episode.info[schema.EXPERT_ACTION])) for _ in range(3)]
    assert turns[0] is not None and turns[1] is not None and turns[2] is None
    assert episode.aborted and episode.done and episode.abort_cause == cause
    assert episode.abort_detail.startswith(type(error).__name__)
    ep = episode.annotations()
    assert ep["aborted"] and ep["abort_cause"] == cause and ep["n_steps"] == 2
    # the token row had three replies: the unanswered one gets a stand-in record; every record says aborted
    record, steps = span_records(episode.trajectory, [(0, 4), (6, 9), (11, 15)])
    assert "steps" not in record and record["aborted"]
    assert [(s["start"], s["stop"]) for s in steps] == [(0, 4), (6, 9), (11, 15)]
    assert all(s["aborted"] for s in steps) and steps[2]["action"] is None and steps[:2] != ep["steps"]
    # on_failure="raise": the trainer handles it
    raising = Episode(make_text_env(_FailAt(gym.make(ENV), 1, RuntimeError("boom"))), on_failure="raise")
    raising.reset("family-train-00000", 0)
    with pytest.raises(RuntimeError, match="boom"):
        raising.step(_reply("go forward"))


def test_span_records_of_a_finished_episode_need_one_span_per_step() -> None:
    episode = Episode.make(ENV)
    episode.reset("family-train-00001", 0)
    episode.step(_reply(episode.info[schema.EXPERT_ACTION]))
    _, steps = span_records(episode.trajectory, [(2, 5)])
    assert steps == [{**episode.records[0], "start": 2, "stop": 5}]
    with pytest.raises(ValueError):
        span_records(episode.trajectory, [(2, 5), (7, 9)])


def _played_rows(n_groups: int = 2, size: int = 3) -> tuple[Rows, list[list[dict]]]:
    """Real CreditFamily episodes (noisy expert) laid out as token rows: each reply 3 tokens, each env turn 2."""
    spans, groups, records = [], [], []
    for g in range(n_groups):
        for k in range(size):
            episode = Episode.make(ENV)
            episode.reset(f"family-train-{g:05d}", 0)
            rng = np.random.default_rng(10 * g + k)
            while not episode.done and len(episode.records) < 12:
                kind = "expert" if rng.random() < 0.7 else "other"
                episode.step(_pick(kind, episode.info, rng))
            spans.append([(5 * t, 5 * t + 3) for t in range(len(episode.records))])
            groups.append(f"g{g}")
            records.append(list(episode.records))
    width = max(s[-1][1] for s in spans)
    mask = np.zeros((len(spans), width), dtype=np.int64)
    for b, row in enumerate(spans):
        for s, e in row:
            mask[b, s:e] = 1
    return Rows(spans, groups, width, records=records, mask=mask), records


@pytest.mark.parametrize("preset", ["grpo", "gigpo-alfworld", "graphgpo-alfworld"])
def test_shape_rows_equals_build_step_batch_and_shape_advantages(preset: str) -> None:
    rows, records = _played_rows()
    settings = RowSettings(ShapeConfig.from_preset(preset), StepBatchOptions(reward_scale=10.0))
    batch, adv = shape_rows(rows, settings)[:2]
    want_batch = build_step_batch(
        rows.spans, rows.groups, rows.width, records=records, options=StepBatchOptions(reward_scale=10.0)
    )
    want = shape_advantages(want_batch, settings.config).token_advantages * (rows.mask > 0)
    assert np.array_equal(adv, want) and np.abs(adv).max() > 0
    assert np.array_equal(batch.rewards, want_batch.rewards)
    # the mask's runs, matched with the records, give the same spans back
    spans, recs = mask_spans(rows.mask, records, [False] * len(records))
    assert spans == [list(s) for s in rows.spans] and recs == records


def test_the_skeleton_refuses_in_one_line() -> None:
    gigpo = ShapeConfig.from_preset("gigpo-alfworld")
    assert (
        any("state key" in n for n in needs_records(gigpo)) and needs_records(ShapeConfig(base="grpo")) == []
    )
    with pytest.raises(StepRecordError, match=r"state key.*no records here"):
        refuse_missing(gigpo, records="no records here")
    refuse_missing(gigpo, teacher="no teacher here")  # gigpo needs no teacher
    with pytest.raises(StepRecordError, match="teacher log-prob gaps; no teacher here"):
        refuse_missing(ShapeConfig.from_preset("ahead"), teacher="no teacher here")
    check_group_sizes(["a", "a", "b", "b"], 2, "n")
    with pytest.raises(StepRecordError, match=r"groups \['b'\] do not have n=2 rows"):
        check_group_sizes(["a", "a", "b"], 2, "n")
    rows, records = _played_rows(1, 2)
    short = [records[0][:1], records[1]]  # row 0 has more reply spans than records
    with pytest.raises(StepRecordError, match=r"row 0: .* out of line"):
        mask_spans(rows.mask, short, [False, False])
    spans, recs = mask_spans(rows.mask, short, [True, False])  # an aborted row's values are never read
    assert recs[0] == short[0]
