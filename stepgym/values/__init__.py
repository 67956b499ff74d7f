"""Ground-truth step values: how far every state is from success, by an oracle that knows the env.

``ValueWrapper(env)`` (also ``stepgym.wrappers.ValueWrapper``) adds the ``schema.VALUE_*`` keys to every step's
info: the oracle's cost-to-go before and after the action, the step's gain, whether both values are exact,
whether success is still reachable and the best reward still reachable. :func:`step_value_class` reads one step's
labels as harmful (-1), neutral (0) or helpful (+1).

The wrapper names no env: it finds an env's oracle through the env's registration (``value_oracle=`` at
:func:`stepgym.envs.register`) or the env's own ``value_oracle(budget)`` method. stepgym's own oracles live in their
env's folder:

* :mod:`stepgym.envs.alfworld.values` — A* search over the native engine's states (exact within a budget,
  else the expert's completion as an upper bound);
* :mod:`stepgym.envs.webshop.values` — the shortest click path to buying a best-reward product on the real engine;
* :mod:`stepgym.envs.searchqa.values` — whether a gold answer has been gathered, and whether the answer scored EM;
* :class:`stepgym.envs.oracle.StepsToWinOracle` — an env that knows its own optimum (``steps_to_win()``):
  CreditToy / CreditFamily by construction, TextCraft from its exact solver;
* :mod:`stepgym.envs.sokoban.values` — Sokoban's solver: breadth-first search with deadlock pruning, exact
  everywhere;
* :mod:`stepgym.envs.babyai.values` — BabyAI: A* over the level's full state (exact within the env's search
  budget, else the shorter of the best success found and the BabyAI bot's completion, as an upper bound).

What an oracle returns (:class:`~stepgym.envs.oracle.Value`) and its interface
(:class:`~stepgym.envs.oracle.ValueOracle`) are :mod:`stepgym.envs.oracle`'s (import them from there).

See docs/values.md for the definitions, the gain rule and the measured cost.
"""

from __future__ import annotations

from stepgym.values.base import ValueCache, step_gain, step_value_class
from stepgym.values.wrapper import DEFAULT_BUDGET, ValueWrapper

__all__ = [
    "DEFAULT_BUDGET",
    "ValueCache",
    "ValueWrapper",
    "step_gain",
    "step_value_class",
]
