"""stepgym: Gymnasium text envs with step-level annotations for training multi-turn LLM agents.

``import stepgym`` registers the envs (their ids are ``stepgym.ENV_IDS``, read from the registry; docs/envs.md
has the table) and nothing heavier: torch, TextWorld, FAISS, Lucene and selenium are imported only by the component that needs them, and the
names below that need more (``GroupEnv`` needs PettingZoo) load on first use. ``step_batch_from_trajectories``
(:mod:`stepgym.steps.batch`) turns a loop of one's own's recorded episodes into the shapers' ``StepBatch``.

>>> import gymnasium as gym
>>> import stepgym
>>> env = gym.make("StepGym/CreditToy-v0")
>>> obs, info = env.reset(seed=0)
>>> "GroupEnv" in dir(stepgym) and "StepGym/CreditToy-v0" in stepgym.ENV_IDS
True
"""

from __future__ import annotations

from stepgym import schema
from stepgym.envs import ENV_IDS, register_envs
from stepgym.lazy import lazy_exports

__version__ = "0.1.0"
__all__ = [
    "ENV_IDS",
    "GroupEnv",
    "__version__",
    "peer_hindsight",
    "register_envs",
    "schema",
    "step_batch_from_trajectories",
    "wrappers",
]


# Lazy exports (PEP 562): ``stepgym.GroupEnv`` imports pettingzoo only when first used, keeping ``import stepgym`` fast.
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "AgenticReferenceGraph": "stepgym.reference_graph",
        "ARG": "stepgym.reference_graph",
        "GroupEnv": "stepgym.group",
        "peer_hindsight": "stepgym.hindsight",
        "step_batch_from_trajectories": "stepgym.steps.batch",
        "wrappers": "stepgym.wrappers:",
    },
)
