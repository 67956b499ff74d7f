"""Rollout backends: one protocol, three implementations (verl's rollout role).

* :class:`HFBackend` — ``transformers`` ``generate`` on the training model itself (CPU or GPU). It shares the
  policy's parameters, so there is nothing to sync after an update.
* ``VLLMBackend`` (:mod:`stepgym.trainers.vllm_backend`) — vLLM on a GPU, imported only when chosen through
  :func:`make_backend` (``pip install 'stepgym[gpu]'``). It holds its own copy of the weights and receives the
  updated ones after every optimizer step. It cannot run on the CPU machines this project is developed on.
* :class:`ScriptedBackend` — a fake for tests and for the format warm-up: a Python policy reads the env info of
  each request (admissible actions, the expert's action) and answers in the env's text format; the text is
  tokenised for real, so the rows it produces are real training rows.

The request/response types and the :class:`RolloutBackend` protocol live in :mod:`stepgym.trainers.generation`
(re-exported here), so a backend module imports them without importing this one. :func:`backend_from_config` builds
the backend a :class:`~stepgym.trainers.config.TrainConfig` asks for.

Randomness: every call takes a ``seed`` drawn by the trainer from its own checkpointed generator, and a request may
carry its own ``seed`` (drawn per group: under ``torchrun``, with overlap, or ``rollout.group_seeds``). Every
backend honours a request's seed, so a reply does not depend on which other requests share the call: W
data-parallel ranks replay 1 rank. The HF backend samples each row from a ``torch.Generator`` of its own (the
request's seed, else one derived from the call's seed and the request's index), by the Gumbel-max trick on the
processed logits, so the global torch RNG is never touched and a resumed run draws exactly the same tokens.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from stepgym import schema
from stepgym.trainers.generation import Generation, GenerationRequest, RolloutBackend

__all__ = [
    "BACKENDS",
    "HFBackend",
    "ScriptedBackend",
    "backend_from_config",
    "make_backend",
    "scripted_policy",
]


def _row_seed(call_seed: int, index: int, req: GenerationRequest) -> int:
    """A request's sampling seed: its own, else one derived from the call's seed and its index in the call."""
    if req.seed is not None:
        return int(req.seed)
    return int(np.random.SeedSequence([int(call_seed), index]).generate_state(1, np.uint64)[0] >> 1)


class _RowSampler:
    """A ``transformers`` logits processor that samples every row from its own generator (Gumbel-max).

    Under greedy decoding (``do_sample=False``) ``generate`` takes the argmax of the processed scores; adding
    Gumbel noise to the tempered, nucleus-filtered log-probabilities makes that argmax a draw from the sampling
    distribution, and drawing the noise of row ``i`` from generator ``i`` makes the row's tokens a function of its
    seed and its own logits only: the same reply in any batch. ``generate`` applies the model's other processors
    (repetition penalty, ...) before this one, as it applies its own warpers after them."""

    def __init__(self, seeds: Sequence[int], *, temperature: float, top_p: float, device: Any) -> None:
        import torch

        self.temperature, self.top_p = float(temperature), float(top_p)
        self.gens = [torch.Generator(device=device).manual_seed(int(s)) for s in seeds]

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import torch

        scores = scores.float() / self.temperature
        if self.top_p < 1.0:
            scores = _nucleus(scores, self.top_p)
        vocab = scores.shape[-1]
        u = torch.stack([torch.rand(vocab, generator=g, device=g.device) for g in self.gens])
        gumbel = -torch.log(-torch.log(u.to(scores.device).clamp_min(torch.finfo(u.dtype).tiny)))
        return scores + gumbel


def _nucleus(scores: Any, top_p: float) -> Any:
    """Keep the smallest set of top tokens whose probability reaches ``top_p`` (at least one); -inf elsewhere."""
    import torch

    ordered, idx = torch.sort(scores, descending=False, dim=-1)
    cum = ordered.softmax(dim=-1).cumsum(dim=-1)
    drop = cum <= (1.0 - top_p)
    drop[..., -1] = False
    return scores.masked_fill(drop.scatter(-1, idx, drop), float("-inf"))


def _cut_at_eos(ids: Sequence[int], eos_ids: set[int], pad_id: int | None) -> tuple[list[int], bool]:
    out: list[int] = []
    for tok in ids:
        out.append(int(tok))
        if tok in eos_ids:
            return out, True
    while out and pad_id is not None and out[-1] == pad_id and pad_id not in eos_ids:
        out.pop()
    return out, False


class HFBackend:
    """Batched ``model.generate`` with left padding; every row sampled from its own seeded generator.

    Args:
        model: the policy (a ``PreTrainedModel`` or a peft wrapper of one).
        tokenizer: its tokenizer.
        max_new_tokens: response budget per turn (the papers: 512).
        temperature, top_p: sampling knobs (1.0 and 1.0 in verl-agent's recipes).
        batch_size: most sequences per ``generate`` call (requests are sorted by length to limit padding).
        autocast_dtype: ``torch.bfloat16`` to generate under autocast on GPU, ``None`` for full precision.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        max_new_tokens: int = 512,
        temperature: float = 1.0,
        top_p: float = 1.0,
        batch_size: int = 64,
        autocast_dtype: Any = None,
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.max_new_tokens = int(max_new_tokens)
        self.temperature = float(temperature)
        self.top_p = float(top_p)
        self.batch_size = int(batch_size)
        self.autocast_dtype = autocast_dtype
        eos = tokenizer.eos_token_id
        self.eos_ids = {int(eos)} if eos is not None else set()
        gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
        if isinstance(gen_eos, int):
            self.eos_ids.add(gen_eos)
        elif isinstance(gen_eos, list | tuple):
            self.eos_ids.update(int(e) for e in gen_eos)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos

    def sync_weights(self, model: Any) -> None:
        self.model = model

    def _device(self) -> Any:
        return next(self.model.parameters()).device

    def generate(
        self, requests: Sequence[GenerationRequest], *, seed: int, greedy: bool = False
    ) -> list[Generation]:
        import torch

        if not requests:
            return []
        order = sorted(range(len(requests)), key=lambda i: len(requests[i].prompt_ids))
        seeds = [_row_seed(seed, i, r) for i, r in enumerate(requests)]
        results: list[Generation | None] = [None] * len(requests)
        device = self._device()
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad():
                for start in range(0, len(order), self.batch_size):
                    chunk = order[start : start + self.batch_size]
                    prompts = [requests[i].prompt_ids for i in chunk]
                    outs = self._generate_chunk(prompts, [seeds[i] for i in chunk], greedy, device)
                    for i, g in zip(chunk, outs, strict=True):
                        results[i] = g
        finally:
            self.model.train(was_training)
        return results  # type: ignore[return-value]

    def _generate_chunk(
        self, prompts: list[Sequence[int]], seeds: list[int], greedy: bool, device: Any
    ) -> list[Generation]:
        import torch
        from transformers import LogitsProcessorList

        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        attn = torch.zeros_like(ids)
        for i, p in enumerate(prompts):
            ids[i, width - len(p) :] = torch.tensor(list(p), dtype=torch.long)
            attn[i, width - len(p) :] = 1
        kwargs: dict[str, Any] = dict(
            max_new_tokens=self.max_new_tokens,
            pad_token_id=self.pad_id,
            eos_token_id=sorted(self.eos_ids) or None,
        )
        kwargs.update(
            do_sample=False
        )  # greedy, or sampled by the per-row processor (the global RNG is not used)
        if not (greedy or self.temperature <= 0):
            sampler = _RowSampler(seeds, temperature=self.temperature, top_p=self.top_p, device=device)
            kwargs.update(logits_processor=LogitsProcessorList([sampler]))
        ctx = (
            torch.autocast(device.type, dtype=self.autocast_dtype)
            if self.autocast_dtype is not None
            else contextlib.nullcontext()
        )
        with ctx:
            out = self.model.generate(input_ids=ids.to(device), attention_mask=attn.to(device), **kwargs)
        new = out[:, width:].tolist()
        gens = []
        for row in new:
            resp, finished = _cut_at_eos(row, self.eos_ids, self.pad_id)
            gens.append(Generation(resp, self.tokenizer.decode(resp, skip_special_tokens=True), finished))
        return gens


# ---------------------------------------------------------------------------------------------------------------
# The scripted fake
# ---------------------------------------------------------------------------------------------------------------
Policy = Callable[[GenerationRequest, np.random.Generator], str]


def _admissible(req: GenerationRequest) -> list[str]:
    acts = list((req.info or {}).get(schema.ADMISSIBLE_ACTIONS) or [])
    return [a for a in acts if a != "help"] or ["look"]


def _share(text: str, name: str) -> float:
    """``noisy-expert:P``'s P, a number in [0, 1] (one clear line otherwise)."""
    try:
        p = float(text)
    except ValueError:
        p = float("nan")
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"scripted policy {name!r}: P in noisy-expert:P must be a number in [0, 1]")
    return p


def scripted_policy(name: str) -> Callable[[GenerationRequest, np.random.Generator], str]:
    """An *action* policy by name: ``random`` (uniform over admissible actions), ``expert`` (the env's expert
    action, random when it has none), ``noisy-expert:P`` (expert, but a uniformly random admissible action with
    probability P), ``garbage`` (an unparsable reply)."""
    if name == "random":
        return lambda req, rng: _admissible(req)[int(rng.integers(len(_admissible(req))))]
    if name == "garbage":
        return lambda req, rng: "I do not know what to do"
    if name == "expert" or name.startswith("noisy-expert:"):
        p = 0.0 if name == "expert" else _share(name.split(":", 1)[1], name)

        def act(req: GenerationRequest, rng: np.random.Generator) -> str:
            expert = (req.info or {}).get(schema.EXPERT_ACTION)
            if expert is None or rng.random() < p:
                adm = _admissible(req)
                return adm[int(rng.integers(len(adm)))]
            return str(expert)

        return act
    raise ValueError(f"unknown scripted policy {name!r}: random, expert, noisy-expert:P, garbage")


class ScriptedBackend:
    """A fake rollout backend (named as such): a Python policy answers, the tokenizer turns the text into ids.

    Args:
        tokenizer: the real tokenizer of the model being trained (rows must be real tokenised rows).
        policy: a policy name for :func:`scripted_policy` or a callable ``(request, rng) -> action``.
        render: turns an action into the reply text in the env's format (e.g. ``<think>…</think><action>a</action>``);
            the identity when the policy already returns full replies.
    """

    def __init__(
        self, tokenizer: Any, policy: str | Policy = "random", *, render: Callable[[str], str] | None = None
    ):
        self.tokenizer = tokenizer
        self.policy = scripted_policy(policy) if isinstance(policy, str) else policy
        self.render = render or (lambda a: a)
        self.eos = tokenizer.eos_token_id

    def sync_weights(self, model: Any) -> None:
        return None

    def generate(
        self, requests: Sequence[GenerationRequest], *, seed: int, greedy: bool = False
    ) -> list[Generation]:
        rng = np.random.default_rng(seed)
        out = []
        for req in requests:
            r = rng if req.seed is None else np.random.default_rng(req.seed)
            text = self.render(self.policy(req, r))
            ids = list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
            if self.eos is not None:
                ids.append(int(self.eos))
            out.append(Generation(ids, text, True))
        return out


#: Backend names the config accepts; vLLM is resolved lazily so its absence never breaks an import.
BACKENDS = ("hf", "vllm", "scripted")


def make_backend(kind: str, **kwargs: Any) -> RolloutBackend:
    """Build a backend by name. ``"vllm"`` imports :mod:`stepgym.trainers.vllm_backend` (and vLLM) only here."""
    if kind == "hf":
        return HFBackend(**kwargs)
    if kind == "scripted":
        return ScriptedBackend(**kwargs)
    if kind == "vllm":
        from stepgym.trainers.vllm_backend import VLLMBackend

        return VLLMBackend(**kwargs)
    if kind == "openai":  # an OpenAI-compatible endpoint, for evaluation (stepgym.llm_eval)
        from stepgym.trainers.endpoint_backend import EndpointBackend

        return EndpointBackend(**kwargs)
    raise ValueError(f"unknown rollout backend {kind!r}; expected one of {BACKENDS}")


def backend_from_config(
    cfg: Any, *, model: Any, tokenizer: Any, autocast_dtype: Any = None
) -> RolloutBackend:
    """The rollout backend ``cfg.rollout`` names, for the policy ``model`` (a :class:`TrainConfig`)."""
    rc = cfg.rollout
    if rc.backend == "scripted":
        from stepgym.wrappers.text import resolve_format

        fmt = resolve_format(cfg.env.id, cfg.env.text_format)
        return make_backend("scripted", tokenizer=tokenizer, policy=rc.scripted_policy, render=fmt.reply)
    sampling = dict(
        model=model,
        tokenizer=tokenizer,
        max_new_tokens=rc.max_response_tokens,
        temperature=rc.temperature,
        top_p=rc.top_p,
    )
    if rc.backend == "vllm":
        if cfg.model.lora_rank > 0:
            raise ValueError("the vLLM backend syncs full weights; use --rollout.backend hf with LoRA")
        return make_backend("vllm", **sampling, gpu_memory_utilization=rc.vllm_gpu_memory_utilization)
    return make_backend("hf", **sampling, batch_size=rc.generate_batch_size, autocast_dtype=autocast_dtype)
