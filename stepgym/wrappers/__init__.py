"""Annotation wrappers for any Gymnasium text env, and the LLM text interface.

Exports load lazily (PEP 562 ``__getattr__``): ``import stepgym.wrappers`` imports nothing, and
``stepgym.wrappers.HintWrapper`` imports only :mod:`stepgym.wrappers.hints`.

* :mod:`~stepgym.wrappers.feedback` — ``EnvFeedbackWrapper``: feedback text, format-valid / admissible / effective.
* :mod:`~stepgym.wrappers.text` — ``TextInterfaceWrapper``, ``render_prompt``, ``parse_action``: the LLM interface.
* :mod:`~stepgym.wrappers.hints` — ``OracleAnalyzer``, ``LLMAnalyzer``, ``HintWrapper``: AHEAD's corrective hints.
* :mod:`~stepgym.wrappers.arg` — ``ARGWrapper``: ProAS's Agentic Reference Graph labels.

``AgenticReferenceGraph`` and ``label_trajectory`` are not wrappers: they live in :mod:`stepgym.reference_graph`
(``stepgym.AgenticReferenceGraph``); the names here still work, with a ``DeprecationWarning``.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "EnvFeedbackWrapper": "stepgym.wrappers.feedback",
    "fill_feedback_flags": "stepgym.wrappers.feedback",
    "TextInterfaceWrapper": "stepgym.wrappers.text",
    "TextFormat": "stepgym.wrappers.text",
    "PromptTemplate": "stepgym.wrappers.text",
    "ParseResult": "stepgym.wrappers.text",
    "render_prompt": "stepgym.wrappers.text",
    "prompt_for_step": "stepgym.wrappers.text",
    "parse_action": "stepgym.wrappers.text",
    "get_format": "stepgym.wrappers.text",
    "Analysis": "stepgym.wrappers.hints",
    "Analyzer": "stepgym.wrappers.hints",
    "AnalyzerError": "stepgym.wrappers.hints",
    "AnalyzerConfigError": "stepgym.wrappers.hints",
    "OracleAnalyzer": "stepgym.wrappers.hints",
    "LLMAnalyzer": "stepgym.wrappers.hints",
    "HintWrapper": "stepgym.wrappers.hints",
    "analyze_trajectory": "stepgym.wrappers.hints",
    "analyze_many": "stepgym.wrappers.hints",
    "annotate_trajectory": "stepgym.wrappers.hints",
    "ahead_privileged_text": "stepgym.wrappers.hints",
    "ARGWrapper": "stepgym.wrappers.arg",
}
# Deprecated aliases: name -> the module that defines it now.
_MOVED = {
    "AgenticReferenceGraph": "stepgym.reference_graph",
    "label_trajectory": "stepgym.reference_graph",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _MOVED:
        import warnings

        warnings.warn(
            f"stepgym.wrappers.{name} moved to {_MOVED[name]}.{name}; the old name goes away in the next release",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(_MOVED[name]), name)
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'stepgym.wrappers' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS) | set(_MOVED))
