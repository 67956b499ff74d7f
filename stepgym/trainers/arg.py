"""Deprecated name of :mod:`stepgym.trainers.arg_labeler` (the trainer's ProAS labeler); removed in the next
release."""

from __future__ import annotations

import warnings

from stepgym.trainers.arg_labeler import ArgLabeler

__all__ = ["ArgLabeler"]

warnings.warn(
    "stepgym.trainers.arg was renamed stepgym.trainers.arg_labeler; the old name goes away in the next release",
    DeprecationWarning,
    stacklevel=2,
)
