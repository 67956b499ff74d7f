"""Packing the bundled trainer's rows (:class:`stepgym.steps.row.StepRow`, one per step) into tensors.

Every model turn is one training row: ``prompt`` = the rendered turn prompt (task + last K steps + current
observation + admissible actions, through the tokenizer's chat template when it has one, :class:`PromptEncoder`),
``response`` = the tokens the model generated for that turn. Only response tokens are trained; the row itself, its
record and the token alignment are :mod:`stepgym.steps.row`'s.

Packing for the model (:func:`pack`) right-aligns every ``context ⊕ target`` sequence (left padding with explicit
position ids, so padding never shifts positions) and asks the model only for the logits of the last ``R + 1``
positions (``logits_to_keep``): with a 49k vocabulary the full (B, L, V) logits of 2k-token prompts would dominate
memory, while only the target tokens are ever scored. :func:`gather_index` maps those logits back to response
coordinates.

Prompts longer than ``max_prompt_tokens`` lose their middle (:func:`stepgym.steps.row.truncate_middle`); counted
per batch in the metrics.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from stepgym.steps.row import response_matrix, truncate_middle

__all__ = [
    "PackedBatch",
    "PromptEncoder",
    "pack",
    "response_logprobs",
    "token_budget_batches",
]


class PromptEncoder:
    """Turn prompt text into token ids the way the model was trained to read it.

    With a chat template (instruct models): one user message (plus ``system`` when given), generation prompt
    appended. Without one (the tiny model): ``bos + text + "\\n"``. ``extra`` text (AHEAD's privileged information)
    is appended *inside* the user turn, right after the prompt (docs/shapers.md §8.18), so the template's assistant header
    still follows it.
    """

    def __init__(self, tokenizer: Any, *, max_prompt_tokens: int, system: str = "") -> None:
        self.tokenizer = tokenizer
        self.max_prompt_tokens = int(max_prompt_tokens)
        self.system = system
        self.chat = bool(getattr(tokenizer, "chat_template", None))

    def text(self, prompt: str, extra: str = "") -> str:
        body = prompt + extra
        if not self.chat:
            return body + "\n"
        messages = ([{"role": "system", "content": self.system}] if self.system else []) + [
            {"role": "user", "content": body}
        ]
        return self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)

    def encode_text(self, text: str) -> list[int]:
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        if not self.chat and self.tokenizer.bos_token_id is not None:
            ids = [self.tokenizer.bos_token_id, *ids]
        return list(ids)

    def encode(self, prompt: str, extra: str = "", *, limit: int | None = None) -> tuple[list[int], bool]:
        """Token ids of the prompt (truncated to ``limit`` or ``max_prompt_tokens``) and whether it was cut."""
        ids = self.encode_text(self.text(prompt, extra))
        return truncate_middle(ids, self.max_prompt_tokens if limit is None else limit)


def token_budget_batches(lengths: Sequence[int], budget: int) -> list[list[int]]:
    """Cut sequence indices into batches of at most ``budget`` padded tokens (batch size × longest length).

    Indices are sorted by length first so that similar lengths share a batch and padding stays small. A sequence
    longer than ``budget`` still gets a batch of its own (it is never dropped). Deterministic: ties keep index order.
    """
    out: list[list[int]] = []
    cur: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda k: lengths[k]):
        # ascending order: the newest index is the longest of its batch
        if cur and lengths[i] * (len(cur) + 1) > budget:
            out.append(cur)
            cur = []
        cur.append(i)
    if cur:
        out.append(cur)
    return out


@dataclass
class PackedBatch:
    """Tensors for one forward pass over ``context ⊕ target`` sequences (see the module docstring).

    ``target_ids``/``target_mask`` are (B, R) in response coordinates; ``index`` (B, R) gathers each target
    token's logit row out of the model's last ``keep = R + 1`` positions.
    """

    input_ids: Any
    attention_mask: Any
    position_ids: Any
    target_ids: Any
    target_mask: Any
    index: Any
    keep: int

    @property
    def n_tokens(self) -> int:
        return int(self.attention_mask.sum())


def pack(
    contexts: Sequence[Sequence[int]],
    targets: Sequence[Sequence[int]],
    *,
    pad_id: int,
    device: Any = "cpu",
) -> PackedBatch:
    """Right-align each ``context + target`` sequence into one (B, L) batch for :func:`response_logprobs`.

    Every target needs a non-empty context (a first token has no prediction otherwise): prompts always have one.
    """
    import torch

    if len(contexts) != len(targets):
        raise ValueError(f"{len(contexts)} contexts but {len(targets)} targets")
    if any(len(c) == 0 for c in contexts):
        raise ValueError("every sequence needs at least one context token before its target")
    seqs = [list(c) + list(t) for c, t in zip(contexts, targets, strict=True)]
    width = max(len(s) for s in seqs)
    r_max = max((len(t) for t in targets), default=0)
    b = len(seqs)
    input_ids = torch.full((b, width), pad_id, dtype=torch.long)
    attn = torch.zeros((b, width), dtype=torch.long)
    for i, s in enumerate(seqs):
        input_ids[i, width - len(s) :] = torch.tensor(s, dtype=torch.long)
        attn[i, width - len(s) :] = 1
    position_ids = (attn.cumsum(-1) - 1).clamp(min=0)
    tgt_np, mask_np = response_matrix(targets, pad_id)
    lens = np.array([len(t) for t in targets], dtype=np.int64)
    # Window column of target token j of row i: (r_max - len_i) + j (the logits at position p predict p + 1).
    cols = (r_max - lens)[:, None] + np.arange(r_max, dtype=np.int64)[None, :]
    cols = np.minimum(cols, r_max)  # padding columns point anywhere valid; they are masked
    return PackedBatch(
        input_ids=input_ids.to(device),
        attention_mask=attn.to(device),
        position_ids=position_ids.to(device),
        target_ids=torch.from_numpy(tgt_np).to(device),
        target_mask=torch.from_numpy(mask_np).to(device),
        index=torch.from_numpy(cols).to(device),
        keep=r_max + 1,
    )


def response_logprobs(model: Any, batch: PackedBatch, *, with_entropy: bool = False) -> tuple[Any, Any]:
    """(B, R) log-probs of the target tokens (and their entropies), 0 on padding. Differentiable."""
    import torch

    out = model(
        input_ids=batch.input_ids,
        attention_mask=batch.attention_mask,
        position_ids=batch.position_ids,
        logits_to_keep=batch.keep,
        use_cache=False,
    )
    logits = out.logits[:, -batch.keep :, :].float()  # (B, keep, V)
    # The token each window position predicts, then log p = logit[token] - logsumexp(logits), all at (B, keep):
    # no (B, R, V) copy is made (with a 152k vocabulary that copy would dominate GPU memory).
    nxt = torch.zeros(logits.shape[:2], dtype=torch.long, device=logits.device)
    nxt.scatter_(1, batch.index, batch.target_ids)  # padding columns all land on the last, unused position
    lse = torch.logsumexp(logits, dim=-1)
    lp_window = logits.gather(-1, nxt.unsqueeze(-1)).squeeze(-1) - lse
    logp = lp_window.gather(1, batch.index) * batch.target_mask
    entropy = None
    if with_entropy:
        ent_window = lse - (torch.softmax(logits, dim=-1) * logits).sum(-1)
        entropy = ent_window.gather(1, batch.index) * batch.target_mask
    return logp, entropy
