"""Exceptions that stepgym raises on purpose.

Every error a user can fix names the path or setting involved and the fix, so nobody has to read a traceback
from deep inside TextWorld, Lucene or a browser to learn that a data folder is missing.
"""

from __future__ import annotations

from gymnasium.error import DependencyNotInstalled

__all__ = [
    "AbortRateError",
    "CorruptDataError",
    "DataNotFoundError",
    "DependencyNotInstalled",
    "FormatVersionError",
    "InvalidArgumentError",
    "RetrieverUnavailableError",
    "ServiceUnavailableError",
    "SessionLostError",
    "SiteUnavailableError",
    "StepGymError",
    "StepRecordError",
    "ValueOracleError",
    "abort_cause_of",
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

    #: The ``schema.ABORT_CAUSES`` entry of an episode this error cuts off (None: counted as "env_exception").
    abort_cause: str | None = None


class RetrieverUnavailableError(ServiceUnavailableError):
    """Search-QA's retrieval server did not answer (an episode it cuts off is aborted, never scored)."""

    abort_cause = "retriever_unavailable"


class SiteUnavailableError(ServiceUnavailableError):
    """WebShop's web site (server, browser or driver) did not answer."""

    abort_cause = "site_unavailable"


class SessionLostError(ServiceUnavailableError):
    """A ``stepgym serve`` session was lost (the connection could not be resumed in time)."""

    abort_cause = "session_lost"


class InvalidArgumentError(StepGymError, ValueError):
    """A setting given on the command line (or to a public function) is out of range or unknown: a negative
    count, a misspelled preset or split. The message names the value, what is accepted and what to type instead."""


class ValueOracleError(StepGymError, TypeError):
    """``ValueWrapper`` was given an env it has no ground-truth value oracle for (or one missing a fact the oracle
    needs, such as snapshots or the expert). Raised at wrap time, never as a wrong label later."""


class StepRecordError(StepGymError, ValueError):
    """A trainer's batch cannot be credited step by step: step records missing or out of line with the tokens, or
    a group that lost rows. Raised instead of computing an advantage from incomplete data."""


class AbortRateError(StepGymError):
    """More of an iteration's episodes were aborted by infrastructure failures than ``rollout.max_abort_rate``
    allows; the message names the causes. Raised before that batch updates the policy or is checkpointed."""


def abort_cause_of(exc: BaseException) -> str:
    """The ``schema.ABORT_CAUSES`` entry an episode cut off by ``exc`` ends with: the error's ``abort_cause``
    (the service errors above, the hint LLM's ``LLMUnavailableError``), else "env_exception"."""
    return getattr(exc, "abort_cause", None) or "env_exception"
