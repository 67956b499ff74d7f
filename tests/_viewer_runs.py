"""Recordings for the viewer tests: a real training run (CreditToy, stepgym train) and a GroupEnv group of an env
whose text is hostile markup (our own test env, a ToyRoomEnv whose observations carry <script> and onerror=)."""

from __future__ import annotations

from pathlib import Path

from _toy_env import ToyRoomEnv

from stepgym import schema
from stepgym.group import GroupEnv
from stepgym.recording import GroupRecorder
from stepgym.wrappers.arg import ARGWrapper
from stepgym.wrappers.hints import HintWrapper

EVIL = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2"><b>bold</b> & "quotes"'


class HostileToyEnv(ToyRoomEnv):
    """ToyRoomEnv with markup in every observation (and so in the peer-hindsight text)."""

    def _describe(self) -> str:
        return f"{super()._describe()} {EVIL}"


def record_hostile_group(folder: Path) -> Path:
    """One group of 2: rollout 0 only looks around (fails), rollout 1 follows the expert (succeeds); ARG labels
    (against an empty graph) and the oracle's hints are in the infos, as an ARGWrapper and a HintWrapper put them."""
    group = GroupEnv(
        lambda **kw: HostileToyEnv(max_steps=6, **kw), group_size=2, wrappers=[ARGWrapper, HintWrapper]
    )
    obs, infos = group.reset(seed=0, options={"task_id": "toy/key-in-cellar"})
    while group.agents:
        actions = {}
        for a in group.agents:
            actions[a] = (infos[a].get(schema.EXPERT_ACTION) or "look") if a == "rollout_1" else "look"
        obs, _, _, _, infos = group.step(actions)
    rec = GroupRecorder(folder, meta={"method": "toy-expert", "env_id": "HostileToyEnv"})
    steps = [len(t.steps) for t in group.trajectories]
    adv = {"toy": [[float(-1 - t) for t in range(n)] if r == 0 else [1.0] * n for r, n in enumerate(steps)]}
    rec.record_group(group, iteration=1, advantages=adv)
    group.close()
    return rec.path


def train_args(out: Path, preset: str = "credit-proas") -> list[str]:
    """A short real `stepgym train` run on CreditToy (scripted noisy-expert replies, so groups are mixed)."""
    return [
        "train",
        "--preset",
        preset,
        "--run.output-dir",
        str(out),
        "--run.iterations",
        "2",
        "--run.no-progress",
        "--run.no-tensorboard",
        "--run.no-report",
        "--model.tokenizer-corpus-episodes",
        "16",
        "--warmup.steps",
        "0",
        "--rollout.backend",
        "scripted",
        "--rollout.scripted-policy",
        "noisy-expert:0.3",
        "--rollout.n-tasks",
        "3",
        "--rollout.group-size",
        "4",
        "--eval.limit",
        "2",
    ]
