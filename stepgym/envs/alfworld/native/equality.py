"""Play the same actions on the native and the TextWorld engine and report every difference.

Used by ``tests/test_alfworld_native.py`` (a sample of games) and ``scripts/alfworld_native_equality.py`` (all
games). Each game is played as whole episodes on two ``StepGym/ALFWorld-v0`` envs (``engine="native"`` and
``engine="textworld"``, same seed): the stored walkthrough, then seeded random sequences that mix admissible
commands with junk (unknown text, other rooms' objects, upper case, extra spaces) until the episode ends (won or
``max_steps``). Every step compares the observation, reward, terminated, truncated and the whole ``info`` dict
(admissible commands in order, won, effective, state and subgoal keys, the expert's next action), plus the world
facts behind the state key.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["GameReport", "compare_game", "digest_game", "make_pair"]

_JUNK = (
    "jump",
    "go to the moon",
    "take unicorn 1 from desk 1",
    "",
    "look around",
    "inventory please",
    "open",
)


@dataclass
class GameReport:
    task_id: str
    episodes: int = 0
    steps: int = 0
    differences: list[str] = field(default_factory=list)


def make_pair(split: str, max_steps: int = 50, data_root: Any = None) -> tuple[Any, Any]:
    """A native and a TextWorld env on ``split`` (unwrapped ``ALFWorldEnv``s)."""
    from stepgym.envs.alfworld.env import ALFWorldEnv

    native = ALFWorldEnv(split=split, max_steps=max_steps, data_root=data_root, engine="native")
    reference = ALFWorldEnv(split=split, max_steps=max_steps, data_root=data_root, engine="textworld")
    return native, reference


def _junk(rng: np.random.Generator, admissible: list[str]) -> str:
    kind = int(rng.integers(4))
    if kind == 0:
        return _JUNK[int(rng.integers(len(_JUNK)))]
    cmd = admissible[int(rng.integers(len(admissible)))] if admissible else "look"
    if kind == 1:
        return cmd.upper()
    if kind == 2:
        return "  " + cmd.replace(" ", "   ") + " "
    return cmd + " 7"


def _diff(where: str, a: Any, b: Any, out: list[str]) -> None:
    if a != b:
        out.append(f"{where}: native={a!r} textworld={b!r}"[:2000])


def _compare_step(where: str, native_env: Any, a: tuple, ref_env: Any, b: tuple, out: list[str]) -> None:
    names = ("obs", "reward", "terminated", "truncated", "info") if len(a) == 5 else ("obs", "info")
    for name, x, y in zip(names, a, b, strict=True):
        if name == "info":
            for key in sorted(set(x) | set(y)):
                _diff(f"{where} info[{key}]", x.get(key), y.get(key), out)
        else:
            _diff(f"{where} {name}", x, y, out)
    _diff(f"{where} world facts", native_env.facts(), ref_env.facts(), out)


def compare_game(
    native_env: Any, ref_env: Any, task_id: str, seeds: tuple[int, ...] = (0,), junk_rate: float = 0.2
) -> GameReport:
    """Walkthrough + one random episode per seed on both envs; differences are listed, not raised."""
    report = GameReport(task_id)
    plans: list[tuple[str, int]] = [("walkthrough", 0)] + [("random", s) for s in seeds]
    for kind, seed in plans:
        a = native_env.reset(seed=seed, options={"task_id": task_id})
        b = ref_env.reset(seed=seed, options={"task_id": task_id})
        where = f"{task_id} {kind}{seed if kind == 'random' else ''}"
        _compare_step(f"{where} reset", native_env, a, ref_env, b, report.differences)
        report.episodes += 1
        rng = np.random.default_rng(seed)
        walkthrough = list(ref_env.walkthrough)
        t = 0
        while True:
            admissible = b[-1]["stepgym/admissible_actions"]
            if kind == "walkthrough":
                if t >= len(walkthrough):
                    break
                action = walkthrough[t]
            elif rng.random() < junk_rate:
                action = _junk(rng, admissible)
            else:
                action = admissible[int(rng.integers(len(admissible)))]
            a = native_env.step(action)
            b = ref_env.step(action)
            t += 1
            report.steps += 1
            _compare_step(f"{where} step {t} {action!r}", native_env, a, ref_env, b, report.differences)
            if report.differences or b[2] or b[3]:
                break
        if report.differences:
            break
    return report


def _random_action(rng: np.random.Generator, admissible: list[str], junk_rate: float) -> str:
    if rng.random() < junk_rate:
        return _junk(rng, admissible)
    return admissible[int(rng.integers(len(admissible)))]


def digest_game(env: Any, task_id: str, seeds: tuple[int, ...] = (0,), junk_rate: float = 0.2) -> list[str]:
    """One SHA-256 per step of one engine: the walkthrough, then one random episode per seed.

    Each digest covers the whole step tuple (observation, reward, terminated, truncated, every info entry) and
    the world facts, so two versions of an engine can be compared on every game without running the other engine
    (``scripts/alfworld_native_equality.py --digest-out`` / ``--against-digest``).
    """
    out = []

    def record(step: tuple) -> None:
        *head, info = step
        text = repr((head, sorted(info.items()), sorted(env.facts())))
        out.append(hashlib.sha256(text.encode()).hexdigest())

    for kind, seed in [("walkthrough", 0)] + [("random", s) for s in seeds]:
        step = env.reset(seed=seed, options={"task_id": task_id})
        record(step)
        rng = np.random.default_rng(seed)
        plan = list(env.walkthrough) if kind == "walkthrough" else None
        t = 0
        while plan is None or t < len(plan):
            admissible = step[-1]["stepgym/admissible_actions"]
            action = plan[t] if plan is not None else _random_action(rng, admissible, junk_rate)
            step = env.step(action)
            t += 1
            record(step)
            if step[2] or step[3]:
                break
    return out
