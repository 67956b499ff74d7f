"""ALFWorld (Shridhar et al., ICLR 2021) as ``StepGym/ALFWorld-v0``; see :mod:`stepgym.envs.alfworld.env`.

Importing this package does not import TextWorld or ALFWorld; the engine loads when an env is built.
"""

from stepgym.envs.alfworld.env import NOTHING_HAPPENS, ALFWorldConfig, ALFWorldEnv
from stepgym.envs.alfworld.games import SHORT_NAMES, SPLITS, TASK_TYPES, GameRecord, list_games

__all__ = [
    "NOTHING_HAPPENS",
    "SHORT_NAMES",
    "SPLITS",
    "TASK_TYPES",
    "ALFWorldConfig",
    "ALFWorldEnv",
    "GameRecord",
    "list_games",
]
