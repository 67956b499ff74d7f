"""verl's agent loop ``"stepgym"``: one stepgym episode per dataset row, on the adapter skeleton.

For each dataset row verl builds an ``AgentLoopBase`` subclass registered by name, which talks to verl's
generation servers (``await self.server_manager.generate(...)``) and returns one ``AgentLoopOutput``.
:class:`StepGymAgentLoop` plays the row's task (``task_id``, see :func:`verl_rows`) as an
:class:`~stepgym.steps.episode.Episode` (the bundled trainer's text interface: ReAct prompts, strict parsing,
an unparsable reply is an invalid step; an env failure ends the episode aborted). The chat grows by verl's own
Continuous Token builder (``ct_build_initial_tokens``, ``ct_merge_assistant_token``, ``ct_merge_context_msg``), so
the model's reply tokens get ``response_mask`` 1 and the env's turns 0. ``reward_score`` is the episode return;
``extra_fields`` carry ``stepgym_steps`` (each step's record with its reply's token span ``start``/``stop`` in
response coordinates, :func:`~stepgym.steps.episode.span_records`), ``stepgym_episode`` and
``stepgym_trajectory``.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any
from uuid import uuid4

from stepgym import _deps, schema
from stepgym.group import WrapperFn
from stepgym.integrations.tool_use import answer_message, env_tool_schemas, tool_use_opening
from stepgym.steps.episode import Episode, EpisodeHolder, span_records
from stepgym.steps.tasks import task_rows

_deps.require("verl", "verl", what="the verl integration")

from verl.experimental.agent_loop.agent_loop import (  # noqa: E402
    AgentLoopBase,
    AgentLoopMetrics,
    AgentLoopOutput,
    register,
)

__all__ = ["StepGymAgentLoop", "verl_rows"]


def verl_rows(
    env: str,
    env_kwargs: Mapping[str, Any] | None = None,
    *,
    agent_name: str = "stepgym",
    system_prompt: str | None = None,
    limit: int | None = None,
    ids: Sequence[str] | None = None,
) -> list[dict[str, Any]]:
    """The env's task split as verl dataset rows (write them to parquet for ``data.train_files``).

    Each row has verl's columns ``prompt`` (the messages; the agent loop replaces the empty user turn by the env's
    first prompt), ``agent_name``, ``data_source`` (the env id) and ``extra_info`` with ``task_id``, ``index``,
    ``env_id`` and ``env_kwargs`` (JSON text, so parquet keeps it as one column).
    """
    rows = []
    kwargs_json = json.dumps(dict(env_kwargs or {}), sort_keys=True)
    for i, row in enumerate(task_rows(env, env_kwargs, system_prompt=system_prompt, limit=limit, ids=ids)):
        prompt = [{"role": m["role"], "content": m["content"]} for m in row["prompt"]]
        extra = {"task_id": row["task_id"], "index": i, "env_id": env, "env_kwargs": kwargs_json}
        rows.append({"prompt": prompt, "agent_name": agent_name, "data_source": env, "extra_info": extra})
    return rows


def _row_value(row: Mapping[str, Any], key: str) -> Any:
    if row.get(key) is not None:
        return row[key]
    extra = row.get("extra_info")
    return extra.get(key) if isinstance(extra, Mapping) else None


class _Chat:
    """One rollout's token row while it is played: verl's tokens, response mask, log-probs and reply spans."""

    def __init__(self, tokens: list[int], tools: list[dict[str, Any]] | None = None) -> None:
        self.tokens = tokens
        self.tools = tools  # a tool-use env's tool schemas (rendered by the chat template), else None
        self.mask: list[int] = []
        self.logprobs: list[float] | None = None
        self.spans: list[tuple[int, int]] = []
        self.gen_s = self.env_s = 0.0


@register("stepgym")
class StepGymAgentLoop(EpisodeHolder, AgentLoopBase):
    """A verl agent loop that plays one stepgym episode per dataset row.

    verl builds it with ``hydra.utils.instantiate`` from its registry entry, so the keyword arguments below can be
    set per agent name in an ``agent_loop_config_path`` YAML (``- name: alfworld``, ``_target_:
    stepgym.integrations.verl.StepGymAgentLoop``, ``env_id: StepGym/ALFWorld-v0``, ...). The row's
    ``extra_info`` (from :func:`verl_rows`) supplies ``task_id`` and, when the YAML does not, ``env_id`` and
    ``env_kwargs``.

    Args:
        env_id: the stepgym env id.
        env_kwargs: keyword arguments for the env (a mapping or JSON text).
        fmt: the text format ("alfworld", "webshop", "qa"); default: the env's registered one.
        history_length: steps of history in each env prompt (default 0: the chat itself is the history).
        max_turn_tokens: the most tokens per reply (``max_tokens`` in the sampling params); default: the server's.
        wrappers: applied outside the text interface (first = innermost), e.g. ``ARGWrapper`` for ProAS labels.

    A rollout ends when the episode ends, or unfinished when the response would pass
    ``rollout.response_length``.
    """

    def __init__(
        self,
        *args: Any,
        env_id: str | None = None,
        env_kwargs: Mapping[str, Any] | str | None = None,
        fmt: str | None = None,
        history_length: int | None = 0,
        max_turn_tokens: int | None = None,
        wrappers: Sequence[WrapperFn] = (),
        name: str | None = None,  # the YAML entry's own name, passed on by hydra
        tools: Any = None,  # verl passes its tool list to every agent loop; envs are not tools
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.env_id = env_id
        self.env_kwargs = env_kwargs
        self.fmt = fmt
        self.history_length = history_length
        self.max_turn_tokens = max_turn_tokens
        self.wrappers = list(wrappers)
        self.response_length = int(self.rollout_config.response_length)
        self.episode: Episode | None = None

    def _make_episode(self, row: Mapping[str, Any]) -> Episode:
        env_id = self.env_id or _row_value(row, "env_id")
        if not env_id:
            raise ValueError(
                "no stepgym env id: set env_id in the agent loop config or extra_info.env_id (verl_rows does)"
            )
        kwargs = self.env_kwargs if self.env_kwargs is not None else _row_value(row, "env_kwargs")
        if isinstance(kwargs, str):
            kwargs = json.loads(kwargs)
        # the given format, else the env's declared one, else a clear error (the inner env closed)
        return Episode.make(
            str(env_id), dict(kwargs or {}), fmt=self.fmt, history=self.history_length, wrappers=self.wrappers
        )

    async def _in_thread(self, fn: Callable[[], Any]) -> Any:
        return await asyncio.get_running_loop().run_in_executor(None, fn)

    # -- the rollout -------------------------------------------------------------------------------------------
    async def run(self, sampling_params: dict[str, Any], **row: Any) -> AgentLoopOutput:
        task_id = _row_value(row, "task_id")
        if not task_id:
            raise ValueError(
                "the dataset row has no task_id (build the dataset with stepgym.integrations.verl_rows)"
            )
        params = dict(sampling_params)
        if self.max_turn_tokens is not None:
            params["max_tokens"] = int(self.max_turn_tokens)
        self.episode = episode = await self._in_thread(lambda: self._make_episode(row))
        try:
            return await self._play(episode, str(task_id), row, params)
        finally:
            episode.close()

    async def _play(
        self, episode: Episode, task_id: str, row: Mapping[str, Any], params: dict[str, Any]
    ) -> AgentLoopOutput:
        row_seed = _row_value(row, "seed")
        seed = None if row_seed is None else int(row_seed)
        prompt = await self._in_thread(lambda: episode.reset(task_id, seed))  # "seed:N": by seed
        system = [
            {"role": "system", "content": m["content"]}
            for m in (row.get("raw_prompt") if row.get("raw_prompt") is not None else [])
            if isinstance(m, Mapping) and m.get("role") == "system"
        ]
        # a tool-use env: its tools go to the chat template (the first turn is its instructions and its first
        # observation, without the format's tool list), and its answers come back as tool / user messages
        tools = await self._in_thread(lambda: env_tool_schemas(episode.env))
        if tools is not None:
            prompt = tool_use_opening(episode)
        messages = [*system, {"role": "user", "content": prompt}]
        chat = _Chat(await self.ct_build_initial_tokens(messages, tools=tools), tools)
        request_id = uuid4().hex
        while True:
            reply = await self._reply(chat, request_id, params)
            t0 = time.perf_counter()
            turn = await self._in_thread(lambda r=reply: episode.step(r))
            if turn is None:  # an infrastructure failure: the episode ended aborted (docs/failures.md)
                break
            chat.env_s += time.perf_counter() - t0
            messages.append({"role": "assistant", "content": reply})
            if turn.done or len(chat.mask) >= self.response_length:
                break
            if chat.tools is not None:
                answer = answer_message(turn.record["action"], turn.observation)
            else:
                answer = {"role": "user", "content": episode.prompt}
            if not await self._env_turn(chat, messages, answer):
                break  # no room for another turn: the episode is cut here, unfinished
        return self._output(episode.trajectory, chat)

    async def _reply(self, chat: _Chat, request_id: str, params: dict[str, Any]) -> str:
        """One model reply appended to the chat (``response_mask`` 1, its span recorded); returns its text."""
        t0 = time.perf_counter()
        out = await self.server_manager.generate(
            request_id=request_id, prompt_ids=chat.tokens, sampling_params=params
        )
        chat.gen_s += time.perf_counter() - t0
        if chat.logprobs is None and out.log_probs:
            chat.logprobs = [0.0] * len(chat.mask)  # logprobs start with the first reply that has them
        merged, chat.mask, chat.logprobs = await self.ct_merge_assistant_token(
            chat.tokens, out.token_ids, chat.mask, chat.logprobs, assistant_logprobs=out.log_probs or None
        )
        chat.tokens = merged.token_ids
        chat.spans.append((len(chat.mask) - merged.appended_token_count, len(chat.mask)))
        return self.tokenizer.decode(out.token_ids, skip_special_tokens=True)

    async def _env_turn(self, chat: _Chat, messages: list[dict[str, str]], answer: dict[str, str]) -> bool:
        """The env's answer appended to the chat (``response_mask`` 0): its next prompt as a user turn, or for a
        tool-use env the tool's answer or the user's reply; False when it leaves no room."""
        previous = list(messages)
        messages.append(answer)
        merged, new_mask, new_logprobs = await self.ct_merge_context_msg(
            previous, messages, chat.tokens, chat.mask, chat.logprobs, tools=chat.tools
        )
        if len(new_mask) >= self.response_length:
            return False
        kept = len(chat.mask) - merged.removed_prefix_token_count
        chat.spans = [(min(s, kept), min(e, kept)) for s, e in chat.spans]
        chat.tokens, chat.mask, chat.logprobs = merged.token_ids, new_mask, new_logprobs
        return True

    def _output(self, traj: schema.Trajectory, chat: _Chat) -> AgentLoopOutput:
        n = self.response_length
        tokens, mask, logprobs = chat.tokens, chat.mask, chat.logprobs
        response = tokens[len(tokens) - len(mask) :] if mask else []
        prompt = tokens[: len(tokens) - len(mask)]
        episode, steps = span_records(traj, [(min(s, n), min(e, n)) for s, e in chat.spans])
        return AgentLoopOutput(
            prompt_ids=prompt,
            response_ids=response[:n],
            response_mask=mask[:n],
            response_logprobs=logprobs[:n] if logprobs else None,
            reward_score=float(episode["return"]),
            num_turns=len(steps) * 2 + 1,
            metrics=AgentLoopMetrics(generate_sequences=chat.gen_s, tool_calls=chat.env_s),
            extra_fields={
                "stepgym_steps": steps,
                "stepgym_episode": episode,
                "stepgym_trajectory": traj,  # AHEAD / StepOPSD rebuild their teacher contexts from it
                "turn_scores": [float(s["reward"]) for s in steps],
                "tool_rewards": [],
            },
        )
