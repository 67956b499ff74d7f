"""Getting a model trained from scratch to the starting line: a tokenizer corpus and a format warm-up.

* :func:`env_corpus` plays a uniformly random *admissible* policy through the same wrappers the trainer uses and
  returns the prompts and replies it saw: the tiny model's tokenizer is trained on it, so env words are single
  tokens and a turn's prompt is ~100 tokens instead of ~500 bytes.
* :func:`format_warmup` behaviour-clones that random admissible policy (SFT on real tokenised rows collected
  through :class:`~stepgym.trainers.collector.Collector` with the scripted backend). The model learns the reply
  format and the action vocabulary, and *no* preference between admissible actions — its success rate is then
  that of the random admissible policy, and RL has to find the decisions that matter. (A pretrained instruct
  model does not need this; the README's SmolLM2 preset skips it.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from stepgym import schema
from stepgym.trainers.backends import ScriptedBackend
from stepgym.trainers.collector import Collector, draw_tasks
from stepgym.trainers.config import WarmupConfig
from stepgym.trainers.samples import pack, response_logprobs, token_budget_batches
from stepgym.wrappers.text import TextFormat, make_text_env

__all__ = ["env_corpus", "format_warmup"]


def env_corpus(
    env_id: str | Callable[..., Any],
    env_kwargs: dict[str, Any],
    fmt: TextFormat,
    *,
    history: int | None,
    episodes: int,
    seed: int,
) -> list[str]:
    """Prompts and replies of ``episodes`` episodes of a random admissible policy (deterministic given ``seed``)."""
    env = make_text_env(
        env_id if isinstance(env_id, str) else env_id(**env_kwargs),
        env_kwargs if isinstance(env_id, str) else None,
        fmt=fmt,
        history=history,
    )
    render = fmt.reply  # the format's declared reply shape
    rng = np.random.default_rng(seed)
    ids = getattr(env.unwrapped, "task_ids", None)
    texts: list[str] = [fmt.invalid_feedback("no <action>...</action> tag"), "<hindsight> </hindsight>"]
    try:
        for ep in range(episodes):
            opts = {"task_id": ids[ep % len(ids)]} if ids else None
            _, info = env.reset(seed=int(rng.integers(2**31 - 1)), options=opts)
            done = False
            while not done:
                adm = [a for a in info.get(schema.ADMISSIBLE_ACTIONS) or [] if a != "help"] or ["look"]
                reply = render(adm[int(rng.integers(len(adm)))])
                texts += [env.prompt, reply]
                obs, _, term, trunc, info = env.step(reply)
                texts.append(str(obs))
                done = term or trunc
    finally:
        env.close()
    return texts


def format_warmup(
    model: Any,
    collector: Collector,
    cfg: WarmupConfig,
    *,
    rng: np.random.Generator,
    pad_id: int,
    micro_batch_tokens: int = 8192,
    progress: bool = False,
) -> dict[str, float]:
    """SFT ``model`` on rows of a random admissible policy (see the module docstring); returns loss statistics.

    ``collector``'s backend is swapped for a :class:`ScriptedBackend` for the collection and restored after. Each
    step's rows are processed in micro-batches of at most ``micro_batch_tokens`` padded tokens (gradient
    accumulation; the loss is the token-mean over the step's rows).
    """
    import torch

    if cfg.steps <= 0:
        return {}
    tokenizer = collector.encoder.tokenizer
    saved = collector.backend
    collector.backend = ScriptedBackend(tokenizer, "random", render=collector.fmt.reply)
    try:
        n_groups = max(1, cfg.episodes // collector.group_size)
        ids = collector.task_ids()
        if ids is None:
            tasks = draw_tasks(None, n_groups, rng)
        else:  # (with replacement, unlike draw_tasks: a warm-up's draws stay those of earlier runs)
            tasks = [
                (ids[int(rng.integers(len(ids)))], int(rng.integers(2**31 - 1))) for _ in range(n_groups)
            ]
        rows = collector.collect(tasks, seed_rng=rng).rows
    finally:
        collector.backend = saved
    device = next(model.parameters()).device
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=cfg.lr, weight_decay=0.0)
    model.train()
    losses = []
    steps = range(cfg.steps)
    if progress:
        from tqdm.auto import tqdm

        steps = tqdm(steps, desc="format warm-up", leave=False)
    for _ in steps:
        pick = [int(i) for i in rng.choice(len(rows), size=min(cfg.batch_rows, len(rows)), replace=False)]
        n_tok = sum(len(rows[i].response_ids) for i in pick)
        opt.zero_grad(set_to_none=True)
        total = 0.0
        lengths = [len(rows[i].prompt_ids) + len(rows[i].response_ids) for i in pick]
        for chunk in (
            [pick[j] for j in batch] for batch in token_budget_batches(lengths, micro_batch_tokens)
        ):
            batch = pack(
                [rows[i].prompt_ids for i in chunk],
                [rows[i].response_ids for i in chunk],
                pad_id=pad_id,
                device=device,
            )
            logp, _ = response_logprobs(model, batch)
            loss = -(logp * batch.target_mask).sum() / max(n_tok, 1)
            loss.backward()
            total += float(loss.detach())
        opt.step()
        losses.append(total)
    return {"warmup/first_loss": losses[0], "warmup/last_loss": losses[-1], "warmup/rows": float(len(rows))}
