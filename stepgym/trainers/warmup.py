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

import logging
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

from stepgym import schema
from stepgym.trainers.backends import ScriptedBackend
from stepgym.trainers.collector import Collector, draw_tasks
from stepgym.trainers.config import WarmupConfig
from stepgym.trainers.samples import pack, response_logprobs, token_budget_batches
from stepgym.wrappers.faults import FaultInjectionWrapper, parse_faults
from stepgym.wrappers.text import TextFormat, make_text_env

__all__ = ["env_corpus", "format_warmup"]

log = logging.getLogger(__name__)


class _RandomAdmissible:
    """The corpus's policy: a uniformly random admissible action, rendered as a reply; keeps the prompts it read."""

    def __init__(self, env: Any, render: Callable[[str], str], rng: np.random.Generator) -> None:
        self.env, self.render, self.rng = env, render, rng
        self.read: list[tuple[str, str]] = []  # (prompt, reply) per action of the current episode

    def reset(self) -> None:
        self.read = []

    def act(self, observation: Any, info: dict[str, Any]) -> str:
        adm = [a for a in info.get(schema.ADMISSIBLE_ACTIONS) or [] if a != "help"] or ["look"]
        reply = self.render(adm[int(self.rng.integers(len(adm)))])
        self.read.append((str(self.env.get_wrapper_attr("prompt")), reply))
        return reply


def env_corpus(
    env_id: str | Callable[..., Any],
    env_kwargs: dict[str, Any],
    fmt: TextFormat,
    *,
    history: int | None,
    episodes: int,
    seed: int,
    faults: str = "",
) -> list[str]:
    """Prompts and replies of ``episodes`` episodes of a random admissible policy (deterministic given ``seed``).

    Played through :func:`stepgym.rollout.play_episode`, so an env failure ends that episode aborted (its texts
    up to the failure are kept) and the corpus goes on; one warning line counts the aborted episodes per cause.
    ``faults`` (``rollout.faults``): the env exceptions of :class:`~stepgym.wrappers.faults.FaultInjectionWrapper`
    (a killed or hung worker needs a worker process: those parts are left out here).
    """
    from stepgym.rollout import play_episode

    env = env_id if isinstance(env_id, str) else env_id(**env_kwargs)
    kwargs = env_kwargs if isinstance(env_id, str) else None
    spec = {k: v for k, v in parse_faults(faults).items() if k in ("exception", "seed")}
    if spec.get("exception"):  # the innermost wrapper, as in the collector
        if isinstance(env, str):
            import stepgym.envs

            stepgym.envs.register_envs()
            env = gym.make(env, **dict(kwargs or {}))
        env, kwargs = FaultInjectionWrapper(env, **spec), None
    env = make_text_env(env, kwargs, fmt=fmt, history=history)
    rng = np.random.default_rng(seed)
    agent = _RandomAdmissible(env, fmt.reply, rng)  # the format's declared reply shape
    ids = getattr(env.unwrapped, "task_ids", None)
    texts: list[str] = [fmt.invalid_feedback("no <action>...</action> tag"), "<hindsight> </hindsight>"]
    aborted: dict[str, int] = {}
    try:
        for ep in range(episodes):
            opts = {"task_id": ids[ep % len(ids)]} if ids else None
            traj = play_episode(env, agent, seed=int(rng.integers(2**31 - 1)), options=opts)
            for k, (prompt, reply) in enumerate(agent.read):
                texts += [prompt, reply]
                if k < len(traj.steps):  # the aborting action has no observation
                    texts.append(str(traj.steps[k].next_observation))
            if traj.aborted:
                aborted[str(traj.abort_cause)] = aborted.get(str(traj.abort_cause), 0) + 1
    finally:
        env.close()
    if aborted:
        causes = ", ".join(f"{c} {n}" for c, n in sorted(aborted.items()))
        log.warning(
            "tokenizer corpus: %d of %d episodes aborted by an env failure (%s); their texts up to the failure "
            "are kept",
            sum(aborted.values()),
            episodes,
            causes,
        )
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
        ro = collector.collect(tasks, seed_rng=rng)
    finally:
        collector.backend = saved
    rows = [r for r in ro.rows if not r.aborted]  # an aborted episode has no outcome (docs/failures.md)
    n_aborted = sum(ro.abort_counts().values())
    if not rows:
        raise RuntimeError(
            f"format warm-up: every one of its {len(ro.trajectories)} episodes was aborted by an env failure "
            f"({ro.abort_counts()}); nothing to learn from"
        )
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
    return {
        "warmup/first_loss": losses[0],
        "warmup/last_loss": losses[-1],
        "warmup/rows": float(len(rows)),
        "warmup/aborted_episodes": float(n_aborted),
    }
