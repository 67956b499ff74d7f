"""Exceptions that stepgym raises on purpose.

Every error a user can fix names the path or setting involved and the fix, so nobody has to read a traceback
from deep inside TextWorld, Lucene or a browser to learn that a data folder is missing.
"""

from __future__ import annotations

from gymnasium.error import DependencyNotInstalled

__all__ = [
    "CorruptDataError",
    "DataNotFoundError",
    "DependencyNotInstalled",
    "FormatVersionError",
    "ServiceUnavailableError",
    "StepGymError",
    "StepRecordError",
]


class StepGymError(Exception):
    """Base class of stepgym's own errors."""


class DataNotFoundError(StepGymError, FileNotFoundError):
    """A benchmark's data folder is missing or empty. The message names the path and the fix."""


class CorruptDataError(StepGymError, ValueError):
    """A data file exists but cannot be parsed (truncated, not JSON, foreign format)."""


class FormatVersionError(CorruptDataError):
    """A saved file was written by a newer stepgym (or is not a stepgym file at all)."""


class ServiceUnavailableError(StepGymError, ConnectionError):
    """A service stepgym talks to over HTTP (retriever, LLM analyzer, web site) did not answer in time."""


class StepRecordError(StepGymError, ValueError):
    """A trainer's batch cannot be credited step by step: step records missing or out of line with the tokens, or
    a group that lost rows. Raised instead of computing an advantage from incomplete data."""
