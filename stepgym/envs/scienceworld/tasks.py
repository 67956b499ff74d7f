"""ScienceWorld's 30 task types and their train / dev / test variations, without starting the JVM.

Upstream (``scienceworld`` 1.2.3) splits every task's variations into three contiguous ranges:
``get_variations_train()`` is ``0 .. n_train-1``, ``get_variations_dev()`` the next ``n_dev`` and
``get_variations_test()`` the last ``n_test`` (``get_max_variations() = n_train + n_dev + n_test``). The table
below holds those three counts per task, so ``task_ids`` of a split is known without a Java process;
``tests/test_env_scienceworld.py`` compares it with the engine's own lists for all 30 tasks.

A task id is ``"<task name>/<variation>"`` (``"boil/0"``); the task type is the task name.
"""

from __future__ import annotations

from stepgym.errors import InvalidArgumentError

__all__ = [
    "MIN_STEPS",
    "SPLITS",
    "STEP_LIMIT_CAP",
    "TASK_TYPES",
    "VARIATION_COUNTS",
    "parse_task_id",
    "split_task_ids",
]

SPLITS = ("train", "dev", "test")

#: The default step limit is per task: the longer of this (upstream's default limit) and the task's gold path.
MIN_STEPS = 100
#: ... and at most this (the registered ``max_episode_steps``, Gymnasium's ``TimeLimit``): the longest gold path of
#: the test split is 795 steps (inclined-plane-friction-named-surfaces; benchmarks/scienceworld_expert.py).
STEP_LIMIT_CAP = 1000

#: task name -> (train, dev, test) variation counts, read from scienceworld 1.2.3's engine.
VARIATION_COUNTS: dict[str, tuple[int, int, int]] = {
    "boil": (14, 7, 9),
    "change-the-state-of-matter-of": (14, 7, 9),
    "chemistry-mix": (16, 8, 8),
    "chemistry-mix-paint-secondary-color": (18, 9, 9),
    "chemistry-mix-paint-tertiary-color": (18, 9, 9),
    "find-animal": (150, 75, 75),
    "find-living-thing": (150, 75, 75),
    "find-non-living-thing": (150, 75, 75),
    "find-plant": (150, 75, 75),
    "freeze": (14, 7, 9),
    "grow-fruit": (62, 31, 33),
    "grow-plant": (62, 31, 33),
    "identify-life-stages-1": (6, 3, 5),
    "identify-life-stages-2": (4, 2, 4),
    "inclined-plane-determine-angle": (84, 42, 42),
    "inclined-plane-friction-named-surfaces": (692, 346, 348),
    "inclined-plane-friction-unnamed-surfaces": (80, 40, 42),
    "lifespan-longest-lived": (62, 31, 32),
    "lifespan-longest-lived-then-shortest-lived": (62, 31, 32),
    "lifespan-shortest-lived": (62, 31, 32),
    "measure-melting-point-known-substance": (218, 109, 109),
    "measure-melting-point-unknown-substance": (150, 75, 75),
    "melt": (14, 7, 9),
    "mendelian-genetics-known-plant": (60, 30, 30),
    "mendelian-genetics-unknown-plant": (240, 120, 120),
    "power-component": (10, 5, 5),
    "power-component-renewable-vs-nonrenewable-energy": (10, 5, 5),
    "test-conductivity": (450, 225, 225),
    "test-conductivity-of-unknown-substances": (300, 150, 150),
    "use-thermometer": (270, 135, 135),
}

TASK_TYPES: tuple[str, ...] = tuple(VARIATION_COUNTS)


def split_variations(task: str, split: str) -> range:
    """The variation indices of ``task`` in ``split`` (upstream's ``get_variations_<split>()``)."""
    n_train, n_dev, n_test = VARIATION_COUNTS[task]
    start = {"train": 0, "dev": n_train, "test": n_train + n_dev}[split]
    return range(start, start + {"train": n_train, "dev": n_dev, "test": n_test}[split])


def split_task_ids(split: str, task_types: tuple[str, ...] | None = None) -> list[str]:
    """Every task id of ``split`` (task types in upstream's order, variations ascending)."""
    if split not in SPLITS:
        raise InvalidArgumentError(
            f"unknown ScienceWorld split {split!r}; expected one of {', '.join(SPLITS)}"
        )
    types = TASK_TYPES if task_types is None else tuple(task_types)
    unknown = [t for t in types if t not in VARIATION_COUNTS]
    if unknown:
        raise InvalidArgumentError(
            f"unknown ScienceWorld task type(s) {', '.join(map(repr, unknown))}; the 30 types are upstream's "
            f"task names, e.g. {TASK_TYPES[0]!r}, {TASK_TYPES[5]!r}"
        )
    return [f"{t}/{v}" for t in TASK_TYPES if t in types for v in split_variations(t, split)]


def parse_task_id(task_id: str) -> tuple[str, int]:
    """``"boil/3"`` -> ``("boil", 3)``; anything else is an :class:`~stepgym.errors.InvalidArgumentError`."""
    name, sep, var = str(task_id).rpartition("/")
    if (
        not sep
        or name not in VARIATION_COUNTS
        or not var.isdigit()
        or int(var) >= sum(VARIATION_COUNTS[name])
    ):
        raise InvalidArgumentError(
            f"unknown ScienceWorld task id {task_id!r}; ids are '<task name>/<variation>', e.g. 'boil/0'"
        )
    return name, int(var)
