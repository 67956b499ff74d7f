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
    "InvalidArgumentError",
    "ServiceUnavailableError",
    "StepGymError",
    "StepRecordError",
    "ValueOracleError",
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


class InvalidArgumentError(StepGymError, ValueError):
    """A setting given on the command line (or to a public function) is out of range or unknown: a negative
    count, a misspelled preset or split. The message names the value, what is accepted and what to type instead."""


class ValueOracleError(StepGymError, TypeError):
    """``ValueWrapper`` was given an env it has no ground-truth value oracle for (or one missing a fact the oracle
    needs, such as snapshots or the expert). Raised at wrap time, never as a wrong label later."""


class StepRecordError(StepGymError, ValueError):
    """A trainer's batch cannot be credited step by step: step records missing or out of line with the tokens, or
    a group that lost rows. Raised instead of computing an advantage from incomplete data."""
