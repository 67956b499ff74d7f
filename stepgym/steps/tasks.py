"""Task datasets: an env's fixed task split as the prompt rows a trainer iterates over.

Every stepgym env lists its split in ``env.unwrapped.task_ids`` (fixed order, stable ids). Turning that list into
the trainer's dataset, instead of letting each trainer sample tasks its own way, keeps the train and eval tasks the
same in every trainer, and the task id is what each adapter hands back to the env (``reset(options={"task_id":
...})``). An env without ``task_ids`` (any Gymnasium text env: the reset seed draws its task) gets the ids
``"seed:0"``, ``"seed:1"``, ...: :func:`reset_args` turns such an id back into a reset seed. A row is
``{"task_id": id, "prompt": [messages]}``: conversational, as TRL's ``GRPOTrainer`` expects.
The last (user) message also carries the id under ``"task_id"``, because TRL's ``rollout_func`` is given the
prompts only, not the rows (:func:`task_id_of_prompt` reads it back).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import gymnasium as gym

from stepgym import _deps

__all__ = ["SEED_TASK_PREFIX", "reset_args", "task_dataset", "task_id_of_prompt", "task_ids", "task_rows"]

#: The task id of a task drawn by seed (an env without ``task_ids``): ``"seed:N"`` resets the env with seed N
#: and no ``task_id`` option (:func:`reset_args`).
SEED_TASK_PREFIX = "seed:"


def _task_ids_or_none(
    env: str | Callable[..., gym.Env], env_kwargs: Mapping[str, Any] | None
) -> list[str] | None:
    e = gym.make(env, **dict(env_kwargs or {})) if isinstance(env, str) else env(**dict(env_kwargs or {}))
    try:
        ids = getattr(e.unwrapped, "task_ids", None)
        return None if ids is None else [str(t) for t in ids]
    finally:
        e.close()


def task_ids(env: str | Callable[..., gym.Env], env_kwargs: Mapping[str, Any] | None = None) -> list[str]:
    """The env's task split (``env.unwrapped.task_ids``), in its fixed order. The env is made and closed."""
    ids = _task_ids_or_none(env, env_kwargs)
    if ids is None:
        raise ValueError(
            f"{env if isinstance(env, str) else 'this env'} has no task_ids (its reset seed draws the task): "
            "task_rows(env, limit=N) lists the tasks of the seeds 0 .. N-1"
        )
    return ids


def reset_args(task_id: str | None, seed: int | None) -> tuple[int | None, dict[str, Any] | None]:
    """``(seed, options)`` for ``env.reset`` of a task row: ``"seed:N"`` (a task drawn by seed) is seed N with no
    options; any other id is ``seed`` with ``{"task_id": task_id}``; ``None`` is ``seed`` alone."""
    if task_id is None:
        return seed, None
    if task_id.startswith(SEED_TASK_PREFIX):
        try:
            return int(task_id[len(SEED_TASK_PREFIX) :]), None
        except ValueError:
            raise ValueError(
                f"{task_id!r}: a seeded task id is {SEED_TASK_PREFIX}N with an integer N"
            ) from None
    return seed, {"task_id": task_id}


def task_rows(
    env: str | Callable[..., gym.Env],
    env_kwargs: Mapping[str, Any] | None = None,
    *,
    system_prompt: str | None = None,
    user_prompt: str = "",
    limit: int | None = None,
    ids: Sequence[str] | None = None,
) -> list[dict[str, Any]]:
    """One row per task: ``{"task_id": id, "prompt": [system?, user]}``.

    ``user_prompt`` is the user message's text; ``"{task_id}"`` in it is replaced by the id. With TRL's
    ``environment_factory`` the env's first observation is appended to it by TRL; with a ``rollout_func`` the
    rollout renders the whole first prompt itself. ``ids`` overrides the env's split (a subset, say); ``limit``
    keeps the first ``limit`` tasks. An env without ``task_ids`` draws its tasks by seed: it needs ``limit``, and
    its rows are the tasks of the reset seeds ``0 .. limit-1`` (ids ``"seed:N"``, :data:`SEED_TASK_PREFIX`).
    """
    if ids is not None:
        chosen = list(ids)
    else:
        known = _task_ids_or_none(env, env_kwargs)
        if known is None:
            if limit is None:
                raise ValueError(
                    "this env has no task_ids (its reset seed draws the task): pass limit=N for the tasks of "
                    "the seeds 0 .. N-1"
                )
            known = [f"{SEED_TASK_PREFIX}{n}" for n in range(max(limit, 0))]
        chosen = known
    if limit is not None:
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        chosen = chosen[:limit]
    if not chosen:
        raise ValueError("no tasks to build a dataset from")
    rows = []
    for tid in chosen:
        messages: list[dict[str, Any]] = []
        if system_prompt is not None:
            messages.append({"role": "system", "content": system_prompt, "task_id": tid})
        messages.append({"role": "user", "content": user_prompt.replace("{task_id}", tid), "task_id": tid})
        rows.append({"task_id": tid, "prompt": messages})
    return rows


def task_dataset(
    env: str | Callable[..., gym.Env], env_kwargs: Mapping[str, Any] | None = None, **kwargs: Any
):
    """:func:`task_rows` as a Hugging Face ``datasets.Dataset`` (needs the ``datasets`` package)."""
    datasets = _deps.require("datasets", "trl", what="task datasets for Hugging Face trainers")
    return datasets.Dataset.from_list(task_rows(env, env_kwargs, **kwargs))


def task_id_of_prompt(prompt: Any) -> str:
    """The task id a :func:`task_rows` prompt carries (its last message's ``"task_id"``)."""
    if isinstance(prompt, list) and prompt and isinstance(prompt[-1], Mapping):
        tid = prompt[-1].get("task_id")
        if isinstance(tid, str) and tid:
            return tid
    raise ValueError(
        "this prompt carries no task id: build the dataset with stepgym.steps.tasks.task_dataset(...) (each "
        "prompt's last message holds 'task_id'), got "
        f"{prompt!r:.200}"
    )
