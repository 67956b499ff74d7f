"""``StepGym/Sokoban-v0``: gym-sokoban's rooms as text, with the exact value of every state (docs/sokoban.md).

:mod:`.generation` (rooms by reverse play, as gym-sokoban 0.0.6), :mod:`.game` (moves, rewards, the text grid),
:mod:`.solver` (exact steps-to-go with deadlock pruning), :mod:`.env` (the Gymnasium env), :mod:`.prompt` (its text
format). Nothing here imports gym-sokoban: it is the reference the tests and the benchmark compare with.
"""

from stepgym.envs.sokoban.env import SPLIT_SEEDS, SokobanEnv

__all__ = ["SPLIT_SEEDS", "SokobanEnv"]
