"""Training samples: one row per step (verl-agent's layout), their tokenisation, and packing into tensors.

Every model turn is one training row: ``prompt`` = the rendered turn prompt (task + last K steps + current
observation + admissible actions, through the tokenizer's chat template when it has one), ``response`` = the tokens
the model generated for that turn. Only response tokens are trained.

Token ↔ step alignment is made exact by construction and checked in tests: a row's response tokens are stored
*separately* from its prompt (``StepRow.response_ids``), every per-token array of the trainer is in **response
coordinates** (``(B, R)``, column j = the j-th generated token of row b, left aligned, padding after), and a row is
a step (``TokenLayout.from_step_rows``), so a step's advantage can only land on that step's generated tokens.

Packing for the model (:func:`pack`) right-aligns every ``context ⊕ target`` sequence (left padding with explicit
position ids, so padding never shifts positions) and asks the model only for the logits of the last ``R + 1``
positions (``logits_to_keep``): with a 49k vocabulary the full (B, L, V) logits of 2k-token prompts would dominate
memory, while only the target tokens are ever scored. :func:`gather_index` maps those logits back to response
coordinates.

Prompt truncation policy (prompts longer than ``max_prompt_tokens``): keep the first quarter of the budget (the
chat-template head and the task statement) and the last three quarters (the current observation, the admissible
actions and the instruction), dropping the middle (the oldest history). Counted per batch in the metrics.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from stepgym.step_record import StepRecord

__all__ = [
    "PackedBatch",
    "PromptEncoder",
    "StepRow",
    "pack",
    "response_matrix",
    "token_budget_batches",
    "truncate_middle",
]


def truncate_middle(ids: Sequence[int], limit: int, head_share: float = 0.25) -> tuple[list[int], bool]:
    """Cut ``ids`` to ``limit`` tokens keeping ``head_share`` of the budget from the start, the rest from the end."""
    ids = list(ids)
    if limit <= 0 or len(ids) <= limit:
        return ids, False
    head = int(limit * head_share)
    tail = limit - head
    return ids[:head] + ids[len(ids) - tail :], True


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


@dataclass
class StepRow:
    """One step of one rollout: a training row.

    ``group`` indexes the task group in the batch, ``rollout`` the member of the group, ``traj`` the trajectory in
    the batch (``group * G + rollout``), ``t`` the step index inside the trajectory (0-based).
    """

    group: int
    rollout: int
    traj: int
    t: int
    task_id: str
    prompt: str
    prompt_ids: list[int]
    response_ids: list[int]
    response_text: str
    prompt_truncated: bool = False
    finished: bool = True  #: the response ended with EOS (False: cut at max_response_tokens)
    observation: str = ""  #: the raw observation the action was taken in (GiGPO's anchor fallback)
    next_observation: str = ""  #: the raw observation the step led to
    reward: float = 0.0
    format_valid: bool = False
    admissible: bool = False
    action: str | None = None
    info: Mapping[str, Any] = field(default_factory=dict)  #: the env info returned for this step
    #: A row made by hand (no ``record``): the state it was taken in and the one it led to, as the batch keys them.
    #: The collector leaves both ``None``: the batch builder keys its records (``EnvConfig.anchor``).
    anchor: Any = None
    next_anchor: Any = None
    terminated: bool = False  #: the env ended the episode at this step (not a cut at the step limit)
    aborted: bool = (
        False  #: the episode was cut off by an infrastructure failure (docs/failures.md): no credit, no loss
    )
    #: The step's record (:func:`stepgym.step_record.step_annotations`), read once from its infos by the collector;
    #: the trainer's ``StepBatch`` is built from it (:func:`stepgym.trainers.advantages.rows_step_batch`).
    record: StepRecord | None = None

    @property
    def valid(self) -> bool:
        """Format-valid and (when the env says) admissible: the papers' "valid action"."""
        return bool(self.format_valid and self.admissible)


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


def response_matrix(responses: Sequence[Sequence[int]], pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    """Left-aligned (B, R) token ids (padded with ``pad_id``) and their (B, R) bool mask."""
    width = max((len(r) for r in responses), default=0)
    ids = np.full((len(responses), width), pad_id, dtype=np.int64)
    mask = np.zeros((len(responses), width), dtype=bool)
    for b, r in enumerate(responses):
        ids[b, : len(r)] = r
        mask[b, : len(r)] = True
    return ids, mask


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
