"""ALFWorld (Shridhar et al., ICLR 2021) as ``StepGym/ALFWorld-v0``; see :mod:`stepgym.envs.alfworld.env`.

Importing this package registers the env and imports nothing else (no TextWorld, no ALFWorld): the engine loads
when an env is built. Its value oracle is :mod:`stepgym.envs.alfworld.values`.
"""

from __future__ import annotations

from stepgym.envs import EnvSplits, register
from stepgym.lazy import lazy_exports

__all__ = ["ALFWorldConfig", "ALFWorldEnv"]

register(
    "StepGym/ALFWorld-v0",
    "stepgym.envs.alfworld:ALFWorldEnv",
    max_steps=50,
    text_format="alfworld",
    splits=EnvSplits(("train", "valid_seen", "valid_unseen"), "valid_seen"),
    value_oracle="stepgym.envs.alfworld.values:ALFWorldOracle",
    task_types="stepgym.envs.alfworld.games:TASK_TYPES",
)

# The names below load on first use (PEP 562), so registering the env imports none of its modules.
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "ALFWorldConfig": "stepgym.envs.alfworld.env",
        "ALFWorldEnv": "stepgym.envs.alfworld.env",
    },
)
