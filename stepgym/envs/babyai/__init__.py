"""MiniGrid's BabyAI levels (Chevalier-Boisvert et al., ICLR 2019) as BabyAI-Text, ``StepGym/BabyAI-v0``; see
:mod:`stepgym.envs.babyai.env`.

Importing this package registers the env and imports nothing else (no MiniGrid): the engine loads when an env is
built. Its value oracle is :mod:`stepgym.envs.babyai.values`.
"""

from __future__ import annotations

from stepgym.envs import EnvSplits, register
from stepgym.lazy import lazy_exports

__all__ = ["BabyAIEnv"]

register(
    "StepGym/BabyAI-v0",
    "stepgym.envs.babyai:BabyAIEnv",
    max_steps=64,
    text_format="stepgym.envs.babyai.prompt:FORMAT",
    splits=EnvSplits(("train", "test"), "test"),
    value_oracle="stepgym.envs.babyai.values:BabyAIOracle",
    task_types=("goto", "pickup", "open", "putnext", "sequence"),
)

# The names below load on first use (PEP 562), so registering the env imports none of its modules.
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "BabyAIEnv": "stepgym.envs.babyai.env",
    },
)
