"""stepgym: Gymnasium text envs with step-level annotations for training multi-turn LLM agents.

``import stepgym`` registers the envs (``StepGym/ALFWorld-v0``, ``StepGym/WebShop-v0``,
``StepGym/WebShopSite-v0``, ``StepGym/SearchQA-v0``) and nothing heavier: torch, TextWorld, FAISS, Lucene and
selenium are imported only by the component that needs them.
"""

from __future__ import annotations

from stepgym import schema
from stepgym.envs import ENV_IDS, register_envs

__version__ = "0.1.0"
__all__ = ["ENV_IDS", "__version__", "register_envs", "schema"]

register_envs()


# Lazy exports (PEP 562): ``stepgym.GroupEnv`` imports pettingzoo only when first used, keeping ``import stepgym`` fast.
_LAZY = {
    "AgenticReferenceGraph": ("stepgym.reference_graph", "AgenticReferenceGraph"),
    "ARG": ("stepgym.reference_graph", "ARG"),
    "GroupEnv": ("stepgym.group", "GroupEnv"),
    "peer_hindsight": ("stepgym.group", "peer_hindsight"),
    "wrappers": ("stepgym.wrappers", None),
}


def __getattr__(name: str) -> object:
    if name not in _LAZY:
        raise AttributeError(f"module 'stepgym' has no attribute {name!r}")
    import importlib

    module_name, attr = _LAZY[name]
    module = importlib.import_module(module_name)
    value = module if attr is None else getattr(module, attr)
    globals()[name] = value
    return value
