"""A rollout backend that asks a model served behind an OpenAI-compatible endpoint (vLLM, SGLang, llama.cpp, ...).

It lives with the other backends, below both the trainer's evaluation and :mod:`stepgym.llm_eval`, so every
import between them points one way: ``llm_eval`` → ``trainers.evaluate`` → ``trainers.collector`` →
``trainers.backends`` → this module → :mod:`stepgym.llm_client`. :class:`Sampling` and :func:`chat_messages` are
here too, because the backend and the endpoint evaluation must build the same requests.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from stepgym.trainers.generation import Generation, GenerationRequest

__all__ = ["EndpointBackend", "Sampling", "chat_messages"]


@dataclass(frozen=True)
class Sampling:
    """Sampling settings of every request. ``temperature=0`` is greedy (the default, as in the trainer's
    evaluation). ``seed`` (when set) is sent per request as ``seed + 1000 * task index + turn``, so a sampled
    evaluation is reproducible on servers that honour it (vLLM, SGLang)."""

    temperature: float = 0.0
    top_p: float = 1.0
    max_tokens: int = 512
    seed: int | None = None
    stop: tuple[str, ...] = ()

    def params(self, request_seed: int | None = None) -> dict[str, Any]:
        p: dict[str, Any] = {"temperature": self.temperature, "max_tokens": self.max_tokens}
        if self.top_p != 1.0:
            p["top_p"] = self.top_p
        if self.stop:
            p["stop"] = list(self.stop)
        if request_seed is not None:
            p["seed"] = int(request_seed)
        return p


def chat_messages(prompt: str, system: str = "") -> list[dict[str, str]]:
    """The messages for one turn: the system text (if any) and the prompt as the user message (what the
    trainer's ``PromptEncoder`` renders through the chat template)."""
    return ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": prompt}]


class EndpointBackend:
    """A trainer rollout backend (:class:`stepgym.trainers.generation.RolloutBackend`) that asks an endpoint.

    Each request's ``prompt`` text goes out as :func:`chat_messages`; up to ``concurrency`` requests are in flight.
    An endpoint returns text, not the trainer's token ids, so ``response_ids`` are empty: the backend serves
    evaluation (``trainers.evaluate.evaluate_policy`` with a collector), not training updates. ``client`` is a
    :class:`stepgym.llm_client.ChatClient`.
    """

    def __init__(
        self,
        client: Any,
        sampling: Sampling | None = None,
        *,
        system: str = "",
        concurrency: int = 8,
    ) -> None:
        self.client = client
        self.sampling = sampling or Sampling()
        self.system = system
        self.concurrency = max(1, int(concurrency))

    def sync_weights(self, model: Any) -> None:
        return None  # the served weights are the server's business

    def generate(
        self, requests: Sequence[GenerationRequest], *, seed: int, greedy: bool = False
    ) -> list[Generation]:
        temp = 0.0 if greedy else self.sampling.temperature
        sampling = Sampling(temp, self.sampling.top_p, self.sampling.max_tokens, None, self.sampling.stop)

        def one(i: int) -> Generation:
            params = sampling.params(None if greedy else seed + i)
            r = self.client.chat(chat_messages(requests[i].prompt, self.system), **params)
            return Generation([], r.content, r.finish_reason != "length")

        with ThreadPoolExecutor(max_workers=min(self.concurrency, max(1, len(requests)))) as pool:
            return list(pool.map(one, range(len(requests))))
