"""ScienceWorld (Wang et al., EMNLP 2022) as ``StepGym/ScienceWorld-v0``; see :mod:`stepgym.envs.scienceworld.env`.

Importing this package registers the env and imports nothing else (no ``scienceworld``, no JVM): the engine starts
when an env is built. It has no value oracle (``no_values`` says why).
"""

from __future__ import annotations

from stepgym.envs import EnvSplits, register
from stepgym.lazy import lazy_exports

__all__ = ["ScienceWorldEnv"]

register(
    "StepGym/ScienceWorld-v0",
    "stepgym.envs.scienceworld:ScienceWorldEnv",
    max_steps=1000,  # scienceworld.tasks.STEP_LIMIT_CAP: the env's own limit is per task, up to this
    text_format="stepgym.envs.scienceworld.prompt:FORMAT",
    splits=EnvSplits(("train", "dev", "test"), "test"),
    no_values=(
        "ScienceWorld's state (every object, temperature and timer of a 10-room world) is too large to search "
        "for exact values; its step truth is the gold path (EXPERT_ACTION) and the task score (SUBGOAL_KEY)"
    ),
    task_types="stepgym.envs.scienceworld.tasks:TASK_TYPES",
)

# The names below load on first use (PEP 562), so registering the env imports none of its modules.
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "ScienceWorldEnv": "stepgym.envs.scienceworld.env",
    },
)
