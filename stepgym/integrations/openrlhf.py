"""stepgym envs as OpenRLHF 0.11 agents (``--train.agent_func_path``), with the step annotations in ``extra_logs``.

OpenRLHF loads the file named by ``--train.agent_func_path``, takes its ``AgentExecutor`` class (a subclass of
``openrlhf.utils.agent.AgentExecutorBase``), builds it with no arguments and awaits ``execute(prompt, label,
sampling_params, max_length, hf_tokenizer, llm_engine)`` per prompt. ``MultiTurnAgentExecutor`` runs the turn
loop: it makes one ``AgentInstanceBase`` per prompt (no arguments), ``reset({"observation": prompt, "label":
label})`` must return ``{"observation": text}``, and each ``step({"observation_text", "action_text", "label",
"sampling_params"})`` must return ``rewards`` (a tensor), ``scores``, ``environment_feedback`` (raw text, tokenised
and appended after the model's tokens as is), ``done`` and ``extra_logs``. It keeps the last step's
``extra_logs`` only and turns every value into a tensor, so only numbers can go there; the episode's step records
travel in the returned sample's ``label`` instead (JSON ``{"label": <the prompt's label>, "stepgym_steps":
[...]}``), which :mod:`stepgym.integrations.openrlhf_train` reads to compute stepgym's advantages.

:func:`agent_classes` builds both classes for one stepgym env. The instance plays the env through the same text
interface as the bundled trainer (:class:`~stepgym.wrappers.text.TextInterfaceWrapper`: ReAct prompts, strict
parsing, an unparsable reply is an invalid step) on the task named by the label (or found in the prompt), and
writes the chat-template tokens itself: the first observation is the rendered chat up to the assistant header,
each feedback closes the assistant turn (unless the model's last token already did) and opens the next user turn
and assistant header. The chat template is the one of the tokenizer OpenRLHF hands to ``execute``.

Only env-level use is tested here (OpenRLHF's training needs deepspeed, vLLM and a GPU).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from stepgym import _deps, schema
from stepgym.steps.episode import Episode, EpisodeHolder
from stepgym.wrappers.text import resolve_format

_deps.require("openrlhf", "openrlhf", what="the OpenRLHF integration")
torch = _deps.require("torch", "openrlhf")

from openrlhf.utils.agent import AgentInstanceBase, MultiTurnAgentExecutor  # noqa: E402

__all__ = ["UNKNOWN", "agent_classes", "chat_turn_texts", "state_key_id"]

#: The value an ``extra_logs`` annotation takes when no env or wrapper annotated it (OpenRLHF needs numbers).
UNKNOWN = -1.0


# ---------------------------------------------------------------------------------------------------------------
# Chat-template text
# ---------------------------------------------------------------------------------------------------------------
def _render(tokenizer: Any, messages: list[dict[str, str]], generation_prompt: bool) -> str:
    return tokenizer.apply_chat_template(messages, add_generation_prompt=generation_prompt, tokenize=False)


def chat_turn_texts(tokenizer: Any) -> tuple[str, str, str]:
    """``(close, before_user, after_user)``: the template's text that ends an assistant turn (its EOS token
    included), and the text around a new user message up to the next assistant header, so that
    ``close + before_user + content + after_user`` continues a chat after an assistant reply."""
    eos = tokenizer.eos_token
    base = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "ok"}]
    prefix = _render(tokenizer, base, False)
    marker = "\x00USER\x00"
    full = _render(tokenizer, [*base, {"role": "user", "content": marker}], True)
    end = prefix.rfind("ok") + 2
    stop = prefix.find(eos, end) + len(eos) if eos and eos in prefix[end:] else len(prefix)
    if not full.startswith(prefix) or full.count(marker) != 1:
        raise ValueError("the chat template is not prefix-preserving: a new user turn changes earlier text")
    before, after = full[len(prefix) :].split(marker)
    return prefix[end:stop], prefix[stop:] + before, after


def state_key_id(key: Any) -> float:
    """A state key as a number for ``extra_logs`` (a 52-bit digest, exact in a float); :data:`UNKNOWN` for None."""
    if key is None:
        return UNKNOWN
    return float(int.from_bytes(hashlib.blake2b(str(key).encode(), digest_size=8).digest(), "big") >> 12)


def _number(value: Any) -> float:
    if value is None:
        return UNKNOWN
    return float(value)


# ---------------------------------------------------------------------------------------------------------------
# Per-execute context: OpenRLHF hands the tokenizer and engine to execute(), not to the instance
# ---------------------------------------------------------------------------------------------------------------
@dataclass
class _Call:
    tokenizer: Any
    eos_ids: frozenset[int]
    closed: bool = False  # the model's last reply ended with an EOS token
    agent: Any = None  # the episode's instance (made inside OpenRLHF's execute)


_CALL: contextvars.ContextVar[_Call] = contextvars.ContextVar("stepgym_openrlhf_call")


class _Engine:
    """The engine OpenRLHF passed, recording whether each reply ended with EOS (the chat turn is then closed)."""

    def __init__(self, engine: Any, call: _Call) -> None:
        self._engine, self._call = engine, call

    async def generate(self, *args: Any, **kwargs: Any) -> Any:
        out = await self._engine.generate(*args, **kwargs)
        ids = list(out.outputs[0].token_ids)
        self._call.closed = bool(ids) and ids[-1] in self._call.eos_ids
        return out


# ---------------------------------------------------------------------------------------------------------------
# The env side
# ---------------------------------------------------------------------------------------------------------------
@dataclass
class _Spec:
    make: Callable[[], gym.Env]
    fmt: str
    wrappers: tuple[Callable[[gym.Env], gym.Env], ...]
    history_length: int | None
    system_prompt: str | None
    rng: np.random.Generator
    task_ids: list[str] = field(default_factory=list)

    def task_of(self, label: Any, prompt: Any) -> str:
        known = set(self.task_ids)
        if label is not None and str(label) in known:
            return str(label)
        found = [t for t in self.task_ids if t and t in str(prompt or "")]
        if found:
            return max(found, key=len)
        raise ValueError(
            f"neither the label {label!r} nor the prompt names a task of this env; set --data.label_key to a "
            "column holding the task id (stepgym.steps.tasks.task_rows writes it as 'task_id')"
        )


class _StepGymAgent(EpisodeHolder, AgentInstanceBase):
    """One episode of a stepgym env per OpenRLHF prompt (made by :func:`agent_classes`)."""

    spec: _Spec

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.episode: Episode | None = None
        self.steps: list[dict[str, Any]] = []  #: the step records, each with its ``task_id``
        self.episode_return = 0.0

    @property
    def abort_cause(self) -> str | None:
        """Set when an infrastructure failure aborted the episode (docs/failures.md)."""
        return None if self.episode is None else self.episode.abort_cause

    async def reset(self, states: dict, **kwargs: Any) -> dict[str, Any]:
        call = _CALL.get()
        call.agent = self
        spec = self.spec
        task = spec.task_of(states.get("label"), states.get("observation"))
        self.episode = episode = Episode.make(
            spec.make(), fmt=spec.fmt, history=spec.history_length, wrappers=spec.wrappers
        )
        seed = int(spec.rng.integers(2**31 - 1))
        prompt = await asyncio.to_thread(episode.reset, task, seed)  # "seed:N": a task drawn by seed
        messages = [{"role": "system", "content": spec.system_prompt}] if spec.system_prompt else []
        messages.append({"role": "user", "content": prompt})
        return {"observation": _render(call.tokenizer, messages, True)}

    async def step(self, states: dict, **kwargs: Any) -> dict[str, Any]:
        if self.episode is None:
            raise RuntimeError("step() before reset(): OpenRLHF's executor always resets first")
        call = _CALL.get()
        episode = self.episode
        turn = await asyncio.to_thread(episode.step, str(states["action_text"]))
        if turn is None:  # an infrastructure failure: the episode ended aborted (docs/failures.md)
            with contextlib.suppress(Exception):  # a failing env may fail to close too
                episode.close()
            return {
                "rewards": torch.tensor(0.0),
                "scores": torch.tensor(self.episode_return),
                "environment_feedback": "",
                "done": True,
                "extra_logs": {"stepgym/aborted": 1.0},
            }
        rec = {**turn.record, "task_id": turn.info.get(schema.TASK_ID)}
        self.steps.append(rec)
        self.episode_return += turn.reward
        feedback = ""
        if not turn.done:
            close, before_user, after_user = chat_turn_texts(call.tokenizer)
            feedback = ("" if call.closed else close) + before_user + episode.prompt + after_user
        else:
            episode.close()
        return {
            "rewards": torch.tensor(turn.reward),
            "scores": torch.tensor(self.episode_return),
            "environment_feedback": feedback,
            "done": turn.done,
            "extra_logs": self._logs(rec),
        }

    def _logs(self, rec: Mapping[str, Any]) -> dict[str, float]:
        """Numbers only (OpenRLHF makes a tensor of each value and keeps the last step's): this step's
        annotations, and the episode's so far."""
        n = len(self.steps)
        logs = {
            "stepgym/format_valid": _number(rec["format_valid"]),
            "stepgym/admissible": _number(rec["admissible"]),
            "stepgym/effective": _number(rec["effective"]),
            "stepgym/arg_reasonable": _number(rec.get("arg_reasonable")),
            "stepgym/arg_progress": _number(rec.get("arg_progress")),
            "stepgym/won": float(bool(rec["won"])),
            "stepgym/state_key_id": state_key_id(rec["state_key"]),
            "stepgym/task_index": float(self.spec.task_ids.index(rec["task_id"]))
            if rec["task_id"] in self.spec.task_ids
            else UNKNOWN,
            "stepgym/steps": float(n),
            "stepgym/return": self.episode_return,
        }
        for key in ("format_valid", "admissible", "effective"):
            known = [bool(s[key]) for s in self.steps if s[key] is not None]
            logs[f"stepgym/{key}_rate"] = sum(known) / len(known) if known else UNKNOWN
        return logs

    @property
    def annotations(self) -> dict[str, Any]:
        """The episode so far as :func:`~stepgym.steps.record.episode_annotations` writes it (with
        the strings ``extra_logs`` cannot carry: task id, state keys, parsed actions)."""
        if self.episode is None:
            raise RuntimeError("no episode yet: reset() first")
        return self.episode.annotations()


class _StepGymExecutor(MultiTurnAgentExecutor):
    """``MultiTurnAgentExecutor`` over the stepgym agent; built with no arguments, as OpenRLHF builds it."""

    instance_cls: type[_StepGymAgent]

    def __init__(self) -> None:
        super().__init__(self.instance_cls)

    async def execute(
        self,
        prompt: Any,
        label: Any,
        sampling_params: Any,
        max_length: int,
        hf_tokenizer: Any,
        llm_engine: Any,
        images: Any = None,
    ) -> dict[str, Any]:
        eos = hf_tokenizer.eos_token_id
        eos_ids = frozenset(eos if isinstance(eos, list | tuple) else [eos])
        call = _Call(hf_tokenizer, eos_ids)
        token = _CALL.set(call)
        try:
            out = await super().execute(
                prompt, label, sampling_params, max_length, hf_tokenizer, _Engine(llm_engine, call), images
            )
        finally:
            _CALL.reset(token)
        # The label is the one text field OpenRLHF carries from here to the experience (and so to the advantage
        # step of stepgym.integrations.openrlhf_train): it takes the step records along, the label kept inside.
        out["label"] = json.dumps(
            {
                "label": label,
                "stepgym_steps": call.agent.steps if call.agent else [],
                "stepgym_abort_cause": call.agent.abort_cause if call.agent else None,
            }
        )
        return out


def agent_classes(
    env: str | Callable[..., gym.Env],
    env_kwargs: Mapping[str, Any] | None = None,
    *,
    wrappers: Sequence[Callable[[gym.Env], gym.Env]] = (),
    fmt: str | None = None,
    history_length: int | None = 2,
    system_prompt: str | None = None,
    seed: int = 0,
) -> tuple[type, type]:
    """``(AgentInstance, AgentExecutor)`` for a stepgym env, to bind at the top of an ``--train.agent_func_path``
    file (OpenRLHF looks up the name ``AgentExecutor`` there).

    ``env``: an env id or factory (with ``env_kwargs``); ``wrappers`` go outside the text interface, first =
    innermost, as in :meth:`~stepgym.steps.episode.Episode.make`, TRL's ``GroupRollout`` and verl's agent loop
    (e.g. ``ARGWrapper`` for ProAS labels in ``extra_logs``); ``fmt`` / ``history_length``: the text interface;
    ``system_prompt``: an optional system turn; ``seed`` seeds the per-episode env seeds.
    """
    kwargs = dict(env_kwargs or {})
    make = (
        functools.partial(gym.make, env, **kwargs)
        if isinstance(env, str)
        else functools.partial(env, **kwargs)
    )
    probe = make()
    try:
        name = fmt if fmt is not None else resolve_format(probe).name
        ids = [str(t) for t in getattr(probe.unwrapped, "task_ids", [])]
    finally:
        probe.close()
    spec = _Spec(make, name, tuple(wrappers), history_length, system_prompt, np.random.default_rng(seed), ids)
    instance = type("AgentInstance", (_StepGymAgent,), {"spec": spec, "__module__": __name__})
    executor = type("AgentExecutor", (_StepGymExecutor,), {"instance_cls": instance, "__module__": __name__})
    return instance, executor
