"""Search-QA (Search-R1's protocol) as ``StepGym/SearchQA-v0``, with real retrieval; see :mod:`.env`.

Importing this package registers the env and imports nothing else (no FAISS, bm25s, torch or Java): indexes and
encoders load when a retriever is built (``make_retriever``, the env's constructor, ``stepgym retriever ...``). Its
value oracle is :mod:`stepgym.envs.searchqa.values`.
"""

from __future__ import annotations

from stepgym.envs import EnvSplits, register
from stepgym.lazy import lazy_exports

__all__ = [
    "DATASETS",
    "SPLITS",
    "TRAIN_DATASETS",
    "Corpus",
    "Hit",
    "QARecord",
    "Retriever",
    "SearchQAConfig",
    "SearchQAEnv",
    "exact_match",
    "f1_score",
    "load_corpus",
    "load_questions",
    "load_split",
    "make_prompt",
    "make_retriever",
    "normalize_answer",
    "parse_turn",
]

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
        "Corpus": "stepgym.envs.searchqa.corpus",
        "DATASETS": "stepgym.envs.searchqa.datasets",
        "Hit": "stepgym.envs.searchqa.retrievers",
        "QARecord": "stepgym.envs.searchqa.datasets",
        "Retriever": "stepgym.envs.searchqa.retrievers",
        "SPLITS": "stepgym.envs.searchqa.datasets",
        "SearchQAConfig": "stepgym.envs.searchqa.env",
        "SearchQAEnv": "stepgym.envs.searchqa.env",
        "TRAIN_DATASETS": "stepgym.envs.searchqa.datasets",
        "exact_match": "stepgym.envs.searchqa.protocol",
        "f1_score": "stepgym.envs.searchqa.protocol",
        "load_corpus": "stepgym.envs.searchqa.corpus",
        "load_questions": "stepgym.envs.searchqa.datasets",
        "load_split": "stepgym.envs.searchqa.datasets",
        "make_prompt": "stepgym.envs.searchqa.protocol",
        "make_retriever": "stepgym.envs.searchqa.factory",
        "normalize_answer": "stepgym.envs.searchqa.protocol",
        "parse_turn": "stepgym.envs.searchqa.protocol",
    },
)
