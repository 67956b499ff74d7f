"""Search-QA (Search-R1's protocol) as ``StepGym/SearchQA-v0``, with real retrieval; see :mod:`.env`.

Importing this package registers the env and imports nothing else (no FAISS, bm25s, torch or Java): indexes and
encoders load when a retriever is built (``make_retriever``, the env's constructor, ``stepgym retriever ...``). Its
value oracle is :mod:`stepgym.envs.searchqa.values`.
"""

from __future__ import annotations

from stepgym.envs import EnvSplits, register
from stepgym.lazy import lazy_exports

__all__ = ["SearchQAConfig", "SearchQAEnv"]

register(
    "StepGym/SearchQA-v0",
    "stepgym.envs.searchqa:SearchQAEnv",
    max_steps=5,
    text_format="qa",
    splits=EnvSplits(("train", "test"), "test"),
    value_oracle="stepgym.envs.searchqa.values:SearchQAOracle",
)

# The names below load on first use (PEP 562), so registering the env imports none of its modules.
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "SearchQAConfig": "stepgym.envs.searchqa.env",
        "SearchQAEnv": "stepgym.envs.searchqa.env",
    },
)
