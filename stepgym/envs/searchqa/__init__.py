"""Search-QA (Search-R1's protocol) as ``StepGym/SearchQA-v0``, with real retrieval; see :mod:`.env`.

Importing this package imports no FAISS, bm25s, torch or Java: indexes and encoders load when a retriever is built
(``make_retriever``, the env's constructor, ``stepgym retriever ...``).
"""

from stepgym.envs.searchqa.corpus import Corpus, load_corpus
from stepgym.envs.searchqa.datasets import (
    DATASETS,
    SPLITS,
    TRAIN_DATASETS,
    QARecord,
    load_questions,
    load_split,
)
from stepgym.envs.searchqa.env import SearchQAConfig, SearchQAEnv
from stepgym.envs.searchqa.factory import make_retriever
from stepgym.envs.searchqa.protocol import exact_match, f1_score, make_prompt, normalize_answer, parse_turn
from stepgym.envs.searchqa.retrievers import Hit, Retriever

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
