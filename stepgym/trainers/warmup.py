"""Getting a model trained from scratch to the starting line: a tokenizer corpus and a format warm-up.

* :func:`env_corpus` plays a uniformly random *admissible* policy through the same wrappers the trainer uses and
  returns the prompts and replies it saw: the tiny model's tokenizer is trained on it, so env words are single
  tokens and a turn's prompt is ~100 tokens instead of ~500 bytes.
* :func:`format_warmup` behaviour-clones that random admissible policy (SFT on real tokenised rows collected
  through :class:`~stepgym.trainers.collector.Collector` with the scripted backend). The model learns the reply
  format and the action vocabulary, and *no* preference between admissible actions — its success rate is then
  that of the random admissible policy, and RL has to find the decisions that matter. (A pretrained instruct
  model does not need this; the README's SmolLM2 preset skips it.) ``warmup.policy`` may name a noisy expert
  instead (``noisy-expert:P``): a supervised start that already prefers some actions, as SFT before RL.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable
from pathlib import Path
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

__all__ = ["env_corpus", "format_warmup", "load_cached_warmup", "save_warmup", "warmup_fingerprint"]

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


def _imitated_rows(collector: Collector, cfg: WarmupConfig, rng: np.random.Generator) -> tuple[list, int]:
    """The warm-up's rows: ``cfg.episodes`` episodes of ``cfg.policy`` (a uniformly random admissible policy by
    default) whose replies a :class:`ScriptedBackend` writes in the env's format (``collector``'s backend is
    restored after), aborted episodes left out; and how many were aborted. A RuntimeError when every one was."""
    saved = collector.backend
    collector.backend = ScriptedBackend(collector.encoder.tokenizer, cfg.policy, render=collector.fmt.reply)
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
    if not rows:
        raise RuntimeError(
            f"format warm-up: every one of its {len(ro.trajectories)} episodes was aborted by an env failure "
            f"({ro.abort_counts()}); nothing to learn from"
        )
    return rows, sum(ro.abort_counts().values())


def _reply_budget(rows: list, eos: int | None, max_response_tokens: int) -> tuple[int, float]:
    """The longest warm-up reply (its end-of-text token not counted) and the share of replies longer than
    ``max_response_tokens`` (0: unchecked): one warning line when some are, a ValueError when all are."""
    lengths = [len(r.response_ids) - (r.response_ids[-1:] == [eos]) for r in rows]
    longest = max(lengths)
    over = sum(n > max_response_tokens for n in lengths) / len(lengths) if max_response_tokens > 0 else 0.0
    if over > 0:
        what = (
            f"format warm-up: {over:.0%} of its replies (up to {longest} tokens) are longer than "
            f"rollout.max_response_tokens={max_response_tokens}, so generation cuts them before the action "
            f"closes and they are invalid; set rollout.max_response_tokens to at least {longest}"
        )
        if over == 1.0:  # no reply the model learns can ever be valid
            raise ValueError(what)
        log.warning(what)
    return longest, over


def format_warmup(
    model: Any,
    collector: Collector,
    cfg: WarmupConfig,
    *,
    rng: np.random.Generator,
    pad_id: int,
    micro_batch_tokens: int = 8192,
    progress: bool = False,
    max_response_tokens: int = 0,
) -> dict[str, float]:
    """SFT ``model`` on rows of ``cfg.policy`` (a random admissible policy by default; see the module docstring);
    returns loss statistics.

    ``collector``'s backend is swapped for a :class:`ScriptedBackend` for the collection and restored after. Each
    step's rows are processed in micro-batches of at most ``micro_batch_tokens`` padded tokens (gradient
    accumulation; the loss is the token-mean over the step's rows). ``max_response_tokens`` (the rollouts'
    budget; 0: unchecked): the replies longer than it are ones the model learns but generation always cuts
    before their action closes, so their share is one warning line, and a ValueError before any update when it
    is all of them.
    """
    import torch

    if cfg.steps <= 0:
        return {}
    rows, n_aborted = _imitated_rows(collector, cfg, rng)
    longest, over = _reply_budget(rows, collector.encoder.tokenizer.eos_token_id, max_response_tokens)
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
        "warmup/reply_tokens_max": float(longest),
        "warmup/replies_over_budget": float(over),
    }


# ---------------------------------------------------------------------------------------------------------------
# The warm-up cache (``warmup.cache_dir``)
# ---------------------------------------------------------------------------------------------------------------
#: env settings that only say how finished steps are keyed and labelled for the shapers (the state anchor, the
#: true-value labels): they change no observation, reply or reset, so warm-ups that differ only in them are one
ENV_NOT_READ_BY_WARMUP = ("anchor", "value_labels")


def warmup_fingerprint(model: Any, tokenizer: Any, cfg: Any, rng: np.random.Generator, pad_id: int) -> str:
    """A digest of everything a format warm-up's result depends on: the initial weights (every tensor's name,
    dtype, shape and bytes), the tokenizer's vocabulary, the random stream's state, and the settings it reads
    (``warmup`` but its cache folder, ``env`` but :data:`ENV_NOT_READ_BY_WARMUP`, ``rollout``, ``model``, the
    micro-batch size, the pad id), with the
    stepgym and torch versions. Two runs of one fingerprint warm up to the same weights."""
    import torch

    import stepgym

    h = hashlib.sha1()
    for name, t in model.state_dict().items():
        h.update(f"{name}:{t.dtype}:{tuple(t.shape)}".encode())
        h.update(t.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    vocab = tokenizer.get_vocab() if hasattr(tokenizer, "get_vocab") else {}
    h.update(json.dumps(sorted(vocab.items()), ensure_ascii=False).encode())
    full = cfg.to_dict()
    settings = {
        # (the imitated policy only when it is not the default: the fingerprints of earlier warm-ups stand)
        "warmup": {
            k: v
            for k, v in full["warmup"].items()
            if k != "cache_dir" and not (k == "policy" and v == "random")
        },
        "env": {k: v for k, v in full["env"].items() if k not in ENV_NOT_READ_BY_WARMUP},
        **{k: full[k] for k in ("rollout", "model")},
        "micro_batch_tokens": full["optim"]["micro_batch_tokens"],
        "pad_id": pad_id,
        "rng": rng.bit_generator.state,
        "versions": [stepgym.__version__, torch.__version__, type(tokenizer).__name__],
    }
    h.update(json.dumps(settings, sort_keys=True, default=str).encode())
    return h.hexdigest()[:20]


def load_cached_warmup(
    folder: str | Path, fingerprint: str, model: Any, rng: np.random.Generator
) -> dict[str, float] | None:
    """The warm-up of ``fingerprint`` from ``folder``: loads its weights into ``model`` and its final random state
    into ``rng`` and returns its statistics; None when there is none. An unreadable entry (a damaged file) is
    reported in one warning line and treated as none: the caller warms up afresh and overwrites it."""
    import torch

    folder = Path(folder)
    meta_path, weights_path = folder / f"{fingerprint}.json", folder / f"{fingerprint}.pt"
    if not meta_path.exists():
        return None
    try:  # everything is read and checked before the model or the stream changes
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        stats = {str(k): float(v) for k, v in meta["stats"].items()}
        stream = type(rng.bit_generator)()
        stream.state = meta["rng"]
        state = torch.load(weights_path, map_location="cpu", weights_only=True)
        want = {k: (v.shape, v.dtype) for k, v in model.state_dict().items()}
        if {k: (v.shape, v.dtype) for k, v in state.items()} != want:
            raise ValueError("its tensors are not this model's")
        model.load_state_dict(state, strict=True)
        rng.bit_generator.state = stream.state
    except Exception as e:  # any damage means: warm up again
        log.warning(
            "format warm-up cache %s is unreadable (%s: %s); warming up afresh",
            meta_path,
            type(e).__name__,
            e,
        )
        return None
    model.train()  # as format_warmup leaves it
    return stats


def save_warmup(
    folder: str | Path, fingerprint: str, model: Any, rng: np.random.Generator, stats: dict[str, float]
) -> None:
    """Keep a finished warm-up under ``fingerprint``: the weights first, then the metadata (each written whole, by
    rename), so an entry is complete whenever its ``.json`` exists."""
    import io

    import torch

    from stepgym.atomic import atomic_write_bytes, atomic_write_text

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    torch.save({k: v.detach().cpu() for k, v in model.state_dict().items()}, buf)
    atomic_write_bytes(folder / f"{fingerprint}.pt", buf.getvalue())
    meta = {"rng": rng.bit_generator.state, "stats": stats}
    atomic_write_text(folder / f"{fingerprint}.json", json.dumps(meta, indent=1) + "\n")
