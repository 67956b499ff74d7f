"""Annotation wrappers for any Gymnasium text env, and the LLM text interface.

This package exports the wrappers; the functions and classes around each one live in its module:

* :mod:`~stepgym.wrappers.feedback` — ``EnvFeedbackWrapper``: feedback text, format-valid / admissible / effective
  (``fill_feedback_flags`` does the same on recorded steps).
* :mod:`~stepgym.wrappers.text` — ``TextInterfaceWrapper``: the LLM interface (``render_prompt``,
  ``parse_action``, the formats).
* :mod:`~stepgym.wrappers.hints` — ``HintWrapper``: AHEAD's corrective hints (``OracleAnalyzer``, ``LLMAnalyzer``).
* :mod:`~stepgym.wrappers.arg` — ``ARGWrapper``: ProAS's Agentic Reference Graph labels.
* :mod:`stepgym.values` — ``ValueWrapper``: ground-truth step values (cost-to-go, gain, reachability).

Exports load lazily (PEP 562 ``__getattr__``): ``import stepgym.wrappers`` imports nothing, and
``stepgym.wrappers.HintWrapper`` imports only :mod:`stepgym.wrappers.hints`. The non-wrapper names this package
used to export still work for one release, with a ``DeprecationWarning`` naming their module
(``AgenticReferenceGraph`` and ``label_trajectory`` now live in :mod:`stepgym.reference_graph`).
"""

from __future__ import annotations

from typing import Any

from stepgym.lazy import lazy_exports

_EXPORTS = {
    "EnvFeedbackWrapper": "stepgym.wrappers.feedback",
    "TextInterfaceWrapper": "stepgym.wrappers.text",
    "HintWrapper": "stepgym.wrappers.hints",
    "ARGWrapper": "stepgym.wrappers.arg",
    "ValueWrapper": "stepgym.values",
}
# Deprecated aliases: name -> the module that defines it.
_MOVED = {
    "fill_feedback_flags": "stepgym.wrappers.feedback",
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
    "analyze_trajectory": "stepgym.wrappers.hints",
    "analyze_many": "stepgym.wrappers.hints",
    "annotate_trajectory": "stepgym.wrappers.hints",
    "ahead_privileged_text": "stepgym.wrappers.hints",
    "AgenticReferenceGraph": "stepgym.reference_graph",
    "label_trajectory": "stepgym.reference_graph",
}

__all__ = sorted(_EXPORTS)


_lazy_getattr, _lazy_dir = lazy_exports(__name__, _EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _MOVED:
        from stepgym._moved import moved

        return moved(f"stepgym.wrappers.{name}", _MOVED[name], name)
    return _lazy_getattr(name)


def __dir__() -> list[str]:
    return sorted(set(_lazy_dir()) | set(_MOVED))
