"""MiniGrid's BabyAI levels (Chevalier-Boisvert et al., ICLR 2019) as BabyAI-Text, ``StepGym/BabyAI-v0``; see
:mod:`stepgym.envs.babyai.env`.

Importing this package does not import MiniGrid; the engine loads when an env is built.
"""

from stepgym.envs.babyai.env import DEFAULT_LEVEL, SPLIT_SEEDS, BabyAIEnv, task_type_of

__all__ = ["DEFAULT_LEVEL", "SPLIT_SEEDS", "BabyAIEnv", "task_type_of"]
