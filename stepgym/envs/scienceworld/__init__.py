"""ScienceWorld (Wang et al., EMNLP 2022) as ``StepGym/ScienceWorld-v0``; see :mod:`stepgym.envs.scienceworld.env`.

Importing this package does not import ``scienceworld`` or start a JVM; the engine starts when an env is built.
"""

from stepgym.envs.scienceworld.engine import EngineCrashed
from stepgym.envs.scienceworld.env import NO_MATCH, ScienceWorldEnv
from stepgym.envs.scienceworld.tasks import (
    SPLITS,
    TASK_TYPES,
    VARIATION_COUNTS,
    parse_task_id,
    split_task_ids,
)

__all__ = [
    "NO_MATCH",
    "SPLITS",
    "TASK_TYPES",
    "VARIATION_COUNTS",
    "EngineCrashed",
    "ScienceWorldEnv",
    "parse_task_id",
    "split_task_ids",
]
