"""What a rollout backend is asked and what it answers: the protocol every backend implements.

Kept apart from :mod:`stepgym.trainers.backends` (which builds backends by name) so that a backend living in its
own module (:mod:`stepgym.trainers.vllm_backend`, or one of yours) imports these types without importing the module
that imports it: there is no import cycle between the registry of backends and the backends. The names are
re-exported by :mod:`stepgym.trainers.backends`, where they have always been importable.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

__all__ = ["Generation", "GenerationRequest", "RolloutBackend"]


@dataclass(frozen=True)
class GenerationRequest:
    """What the backend is asked to continue: the prompt's token ids (and text), and the env info of the state.

    ``seed``, when set, is this request's own sampling seed (drawn per group, so the reply does not depend on which
    other requests share the call: data-parallel runs and overlapped collection rely on it). Every bundled backend
    honours it (vLLM seeds each request's sampler, the HF backend samples each row from its own generator)."""

    prompt_ids: Sequence[int]
    prompt: str = ""
    info: Mapping[str, Any] | None = None
    seed: int | None = None


@dataclass(frozen=True)
class Generation:
    """One sampled response: its token ids (EOS included when generated), text, and whether EOS ended it."""

    response_ids: list[int]
    text: str
    finished: bool


@runtime_checkable
class RolloutBackend(Protocol):
    """Generates one response per request. ``greedy`` is used for evaluation."""

    def generate(
        self, requests: Sequence[GenerationRequest], *, seed: int, greedy: bool = False
    ) -> list[Generation]: ...

    def sync_weights(self, model: Any) -> None:
        """Make the backend sample from ``model``'s current weights (a no-op when they are shared)."""
        ...
