"""``StepGym/Sokoban-v0``: gym-sokoban's rooms as text, with the exact value of every state (docs/sokoban.md).

:mod:`.generation` (rooms by reverse play, as gym-sokoban 0.0.6), :mod:`.game` (moves, rewards, the text grid),
:mod:`.solver` (exact steps-to-go with deadlock pruning), :mod:`.env` (the Gymnasium env), :mod:`.prompt` (its text
format), :mod:`.values` (its value oracle). Nothing here imports gym-sokoban: it is the reference the tests and the
benchmark compare with. Importing this package registers the env and imports none of its modules.
"""

from __future__ import annotations

from stepgym.envs import EnvSplits, register
from stepgym.lazy import lazy_exports

__all__ = ["SokobanEnv"]

register(
    "StepGym/Sokoban-v0",
    "stepgym.envs.sokoban:SokobanEnv",
    max_steps=100,
    text_format="stepgym.envs.sokoban.prompt:FORMAT",
    splits=EnvSplits(("train", "test"), "test"),
    value_oracle="stepgym.envs.sokoban.values:SokobanOracle",
    task_types=("6x6-1box",),
)

# The names below load on first use (PEP 562), so registering the env imports none of its modules.
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "SokobanEnv": "stepgym.envs.sokoban.env",
    },
)
