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
``stepgym.wrappers.HintWrapper`` imports only :mod:`stepgym.wrappers.hints`.
"""

from __future__ import annotations

from stepgym.lazy import lazy_exports

_EXPORTS = {
    "EnvFeedbackWrapper": "stepgym.wrappers.feedback",
    "TextInterfaceWrapper": "stepgym.wrappers.text",
    "HintWrapper": "stepgym.wrappers.hints",
    "ARGWrapper": "stepgym.wrappers.arg",
    "ValueWrapper": "stepgym.values",
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
