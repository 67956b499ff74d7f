"""stepgym inside TRL's ``GRPOTrainer`` (TRL 1.16): two ways in, and step-level credit on top.

* :func:`environment_factory` — the class TRL instantiates per rollout (``GRPOTrainer(environment_factory=...)``).
  TRL turns every public method of that class into a tool, so the class has exactly three public methods:
  ``reset(**row)`` (reads ``task_id`` from the dataset row), one typed, documented tool that takes the env's action
  (``act(action: str) -> str`` by default) and ``get_reward()`` (the episode return). TRL's tool loop needs a chat
  template that renders tool calls; SmolLM2's does not, so :func:`use_tool_chat_template` installs one of the
  templates TRL ships (ChatML-based Qwen2.5 by default) when the tokenizer's own cannot.
* :class:`GroupRollout` — a ``rollout_func``: TRL hands it the batch's prompts with each prompt repeated G times in
  a row; each block of G is one :class:`stepgym.GroupEnv` group on one task. Each rollout is one growing chat (the
  text interface's prompt as the user turn, the model's reply as the assistant turn), stored as one token row whose
  env tokens are masked out of the loss (``env_mask``). It returns per-step annotations
  (:mod:`stepgym.integrations.annotations`) with each step's token span, which reach TRL's reward functions as the
  ``stepgym_steps`` / ``stepgym_episode`` keyword arguments.
* :class:`StepGRPOTrainer` — a ``GRPOTrainer`` whose advantages are per token: the rollout's steps go through
  :func:`stepgym.shapers.shape_advantages` (GRPO, Dr.GRPO, GiGPO, ProAS; AHEAD and StepOPSD with the
  teacher rescoring of :class:`TeacherGaps`) instead of TRL's one advantage per sequence. It needs :class:`GroupRollout`, which knows which
  tokens belong to which env step; TRL's own tool loop (``environment_factory``) keeps no such record.
"""

from __future__ import annotations

import functools
import importlib.resources
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from stepgym import _deps, schema
from stepgym.errors import ServiceUnavailableError, StepRecordError
from stepgym.group import EnvFactory, GroupEnv, WrapperFn
from stepgym.integrations.annotations import episode_annotations
from stepgym.integrations.steps import build_step_batch
from stepgym.integrations.tasks import task_id_of_prompt
from stepgym.integrations.teacher import TeacherContexts, ahead_gaps, opsd_gaps
from stepgym.shapers import ShapeConfig, StepBatch, TokenLayout, shape_advantages
from stepgym.wrappers.feedback import EnvFeedbackWrapper
from stepgym.wrappers.text import resolve_format, text_wrappers

_deps.require("trl", "trl", what="the TRL integration")
torch = _deps.require("torch", "trl")

from trl import GRPOTrainer  # noqa: E402
from trl.chat_template_utils import supports_tool_calling  # noqa: E402
from trl.models import unwrap_model_for_generation  # noqa: E402

__all__ = [
    "GroupRollout",
    "StepGRPOTrainer",
    "StepGymToolEnv",
    "TeacherGaps",
    "environment_factory",
    "episode_return",
    "step_batch_from_rollouts",
    "use_tool_chat_template",
]


def _format_name(make: Callable[[], gym.Env], fmt: Any) -> Any:
    """The text format for the envs ``make`` builds: ``fmt`` when given, else the env's declared one
    (:func:`~stepgym.wrappers.text.resolve_format`'s rule and error, read on a probe copy)."""
    if fmt is not None:
        return fmt
    probe = make()
    try:
        return resolve_format(probe).name
    finally:
        probe.close()


def _maker(env: str | EnvFactory, env_kwargs: Mapping[str, Any] | None) -> Callable[[], gym.Env]:
    kwargs = dict(env_kwargs or {})
    if isinstance(env, str):
        return functools.partial(gym.make, env, **kwargs)
    return functools.partial(env, **kwargs)


# ---------------------------------------------------------------------------------------------------------------
# Chat templates
# ---------------------------------------------------------------------------------------------------------------
def use_tool_chat_template(tokenizer: Any, template: str = "qwen2_5") -> Any:
    """Make ``tokenizer`` able to render tool calls, as TRL's ``environment_factory`` requires.

    A tokenizer whose template already passes TRL's ``supports_tool_calling`` check is returned unchanged.
    Otherwise its ``chat_template`` is replaced by ``template``, one of the templates TRL ships
    (``trl/chat_templates/<template>.jinja``); TRL recognises it and adds the matching response parser. The
    default, Qwen2.5's, is ChatML (``<|im_start|>`` / ``<|im_end|>``), the format SmolLM2 was trained on; its
    end-of-turn token must be the tokenizer's EOS so generation stops after a turn.
    """
    if supports_tool_calling(tokenizer):
        return tokenizer
    path = importlib.resources.files("trl") / "chat_templates" / f"{template}.jinja"
    if not path.is_file():
        raise ValueError(f"TRL ships no chat template named {template!r} (looked for {path})")
    tokenizer.chat_template = path.read_text()
    if not supports_tool_calling(
        tokenizer
    ):  # pragma: no cover - a shipped template that fails TRL's own check
        raise ValueError(f"TRL's {template!r} template does not render tool calls with this tokenizer")
    return tokenizer


# ---------------------------------------------------------------------------------------------------------------
# environment_factory
# ---------------------------------------------------------------------------------------------------------------
def _observation_text(obs: Any, info: Mapping[str, Any], *, goal: bool) -> str:
    """What the model reads after reset (with the goal) or after an action: the observation and the actions."""
    parts = []
    task = info.get(schema.GOAL)
    if goal and isinstance(task, str) and task and task not in str(obs):
        parts.append(f"Your task is to: {task}")
    parts.append(str(obs))
    actions = [a for a in info.get(schema.ADMISSIBLE_ACTIONS) or [] if a != "help"]
    if actions:
        parts.append("Admissible actions: " + ", ".join(f"'{a}'" for a in actions) + ".")
    return "\n".join(parts)


class StepGymToolEnv:
    """Base of the classes :func:`environment_factory` builds (TRL makes one instance per concurrent rollout).

    Only ``reset``, ``get_reward`` and the action tool are public methods (TRL exposes every public method as a
    tool); the recorded episode is read through the :attr:`trajectory` and :attr:`annotations` properties.
    """

    _make: Callable[[], gym.Env]

    def __init__(self) -> None:
        self._env = self._make()
        self._trajectory: schema.Trajectory | None = None
        self._info: dict[str, Any] = {}
        self._done = True

    def reset(self, task_id: str | None = None, seed: int | None = None, **row: Any) -> str:
        """Start the episode of the dataset row's task; returns the first observation (TRL appends it to the
        prompt). ``row`` holds the row's other columns (TRL passes them all)."""
        options = {"task_id": task_id} if task_id is not None else None
        obs, info = self._env.reset(seed=seed, options=options)
        self._trajectory = schema.Trajectory(str(info.get(schema.TASK_ID, task_id or "")), str(obs), info)
        self._info = info
        self._done = False
        return _observation_text(obs, info, goal=True)

    def _act(self, action: str) -> str:
        if self._trajectory is None:
            raise RuntimeError("reset() must be called before the first action")
        if self._done:
            return "The episode is over; no further actions are taken."
        obs, reward, terminated, truncated, info = self._env.step(action)
        prev = (
            self._trajectory.steps[-1].next_observation
            if self._trajectory.steps
            else self._trajectory.initial_observation
        )
        self._trajectory.steps.append(
            schema.Step(prev, action, float(reward), str(obs), bool(terminated), bool(truncated), info)
        )
        self._info = info
        self._done = bool(terminated or truncated)
        text = _observation_text(obs, info, goal=False)
        if self._done:
            text += "\nThe episode is over: " + (
                "you won." if info.get(schema.WON) else "the task was not solved."
            )
        return text

    def get_reward(self) -> float:
        """The episode return so far (the sum of the env's rewards)."""
        return 0.0 if self._trajectory is None else self._trajectory.total_reward

    @property
    def trajectory(self) -> schema.Trajectory | None:
        """The current episode as a :class:`stepgym.schema.Trajectory` (``None`` before the first reset)."""
        return self._trajectory

    @property
    def annotations(self) -> dict[str, Any] | None:
        """The current episode's :func:`~stepgym.integrations.annotations.episode_annotations` record."""
        return None if self._trajectory is None else episode_annotations(self._trajectory)

    @property
    def env(self) -> gym.Env:
        """The wrapped stepgym env."""
        return self._env


_DEFAULT_ACTION_DOC = (
    "One command for the environment, written exactly as one of the admissible actions listed."
)


def environment_factory(
    env: str | EnvFactory,
    env_kwargs: Mapping[str, Any] | None = None,
    *,
    wrappers: Sequence[WrapperFn] = (),
    tool_name: str = "act",
    tool_description: str = "Take one action in the environment and read what happens.",
    action_description: str = _DEFAULT_ACTION_DOC,
) -> type[StepGymToolEnv]:
    """The class to pass as ``GRPOTrainer(environment_factory=...)`` for a stepgym env.

    Args:
        env: a registered env id or a factory ``f(**env_kwargs) -> gym.Env``.
        env_kwargs: keyword arguments for the env (``split=``, ``max_steps=`` ...).
        wrappers: applied after :class:`~stepgym.wrappers.feedback.EnvFeedbackWrapper` (first = innermost), e.g.
            ``[functools.partial(ARGWrapper, graph=graph)]``.
        tool_name: the tool's name as the model sees it (a Python identifier; not ``reset`` / ``get_reward``).
        tool_description / action_description: the tool's docstring, from which TRL builds its JSON schema.

    Each instance owns one env; ``reset(task_id=..., **row)`` starts the row's task and returns the first
    observation with the goal and the admissible actions; the tool steps the env with its ``action`` argument and
    returns the next observation (after the episode has ended it answers without stepping, so a model that keeps
    calling cannot move a finished env); ``get_reward()`` is the episode return.
    """
    if not tool_name.isidentifier() or tool_name.startswith("_") or tool_name in ("reset", "get_reward"):
        raise ValueError(
            f"tool_name must be a public identifier other than reset/get_reward, got {tool_name!r}"
        )
    make = _maker(env, env_kwargs)
    wrap = list(wrappers)

    def build() -> gym.Env:
        e: gym.Env = EnvFeedbackWrapper(make())
        for w in wrap:
            e = w(e)
        return e

    def tool(self, action: str) -> str:  # no annotation on self: TRL builds the schema from the hints
        return self._act(action)

    tool.__name__ = tool.__qualname__ = tool_name
    tool.__doc__ = (
        f"{tool_description}\n\nArgs:\n    action: {action_description}\n\n"
        "Returns:\n    The environment's answer: the new observation and the admissible actions.\n"
    )
    name = env if isinstance(env, str) else getattr(env, "__name__", "Env")
    cls_name = "StepGym_" + "".join(ch if ch.isalnum() else "_" for ch in str(name))
    return type(cls_name, (StepGymToolEnv,), {tool_name: tool, "_make": staticmethod(build)})


# ---------------------------------------------------------------------------------------------------------------
# rollout_func over GroupEnv
# ---------------------------------------------------------------------------------------------------------------
def _template_ids(tokenizer: Any, messages: list[dict[str, Any]], *, generation_prompt: bool) -> list[int]:
    ids = tokenizer.apply_chat_template(
        messages, add_generation_prompt=generation_prompt, tokenize=True, return_dict=False
    )
    return list(ids[0] if ids and isinstance(ids[0], list) else ids)


def user_turn_ids(tokenizer: Any, content: str) -> list[int]:
    """The tokens the chat template puts after a finished assistant turn (ending in EOS) for a new user message
    ``content``, up to and including the next assistant header."""
    base = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "ok"}]
    prefix = _template_ids(tokenizer, base, generation_prompt=False)
    full = _template_ids(tokenizer, [*base, {"role": "user", "content": content}], generation_prompt=True)
    eos = [i for i, t in enumerate(prefix) if t == tokenizer.eos_token_id]
    if eos:
        prefix = prefix[: eos[-1] + 1]
    if full[: len(prefix)] != prefix:
        raise ValueError("the chat template is not prefix-preserving: a new user turn changes earlier tokens")
    return full[len(prefix) :]


class _Rollout:
    """One rollout's token row while it is being played."""

    def __init__(self, block: int, agent: str, prompt_ids: list[int]) -> None:
        self.block, self.agent = block, agent
        self.group = block  # the global group index (set by the rollout)
        self.prompt_ids = prompt_ids
        self.completion: list[int] = []
        self.mask: list[int] = []
        self.spans: list[tuple[int, int]] = []
        self.logprobs: list[float | None] = []
        self.sampled = False
        self.row = 0  # the global row index in TRL's batch (set by the rollout)
        self.live = True

    def add(self, ids: Sequence[int], trained: bool, logprobs: Sequence[float] | None = None) -> None:
        self.completion.extend(int(i) for i in ids)
        self.mask.extend([1 if trained else 0] * len(ids))
        # the sampling log-prob of each generated token; env tokens have none (TRL reads None as "no correction")
        self.logprobs.extend(list(logprobs) if logprobs is not None else [None] * len(ids))
        if logprobs is not None:
            self.sampled = True


class GroupRollout:
    """A ``rollout_func`` for TRL's ``GRPOTrainer``: multi-turn GRPO groups over :class:`stepgym.GroupEnv`.

    Args:
        env: a registered env id or a factory ``f(**env_kwargs) -> gym.Env``.
        env_kwargs: keyword arguments for every env copy.
        wrappers: applied outside the text interface (first = innermost), e.g. ``ARGWrapper`` for ProAS labels.
        fmt: the text format (``"alfworld"``, ``"webshop"``, ``"qa"``); default: the env's registered one.
        history_length: steps of history inside each user turn's prompt (default 0: the chat itself is the
            history).
        max_turn_tokens: the most tokens one reply may have.
        seed: seeds the groups' env seeds.

    Called as ``rollout(prompts, trainer)``: the prompts come from
    :func:`stepgym.integrations.task_dataset` (they carry the task id), repeated G times in a row by TRL. Each
    block of G is reset on its task; every rollout is a chat ``[system?, user: prompt_0, assistant: reply_0, user:
    prompt_1, ...]`` generated with the trainer's model and sampling settings and stepped through the env's
    :class:`~stepgym.wrappers.text.TextInterfaceWrapper` (an unparsable reply is an invalid step, as in the bundled
    trainer). A rollout stops when its episode ends or when one more turn would pass ``max_completion_length``.

    Returns TRL's keys (``prompt_ids``, ``completion_ids``, ``logprobs`` = ``None``, ``env_mask``: 1 on the
    model's reply tokens, 0 on the env's) plus, per completion, ``stepgym_episode`` (the episode record) and
    ``stepgym_steps`` (one record per step with its reply's token span ``start``/``stop`` in completion
    coordinates and the ``group`` index), which TRL passes to reward functions as keyword arguments, and
    ``stepgym_trajectory`` (the recorded :class:`~stepgym.schema.Trajectory`, which :class:`TeacherGaps` reads).
    """

    def __init__(
        self,
        env: str | EnvFactory,
        env_kwargs: Mapping[str, Any] | None = None,
        *,
        wrappers: Sequence[WrapperFn] = (),
        fmt: str | None = None,
        history_length: int | None = 0,
        max_turn_tokens: int = 128,
        seed: int = 0,
    ) -> None:
        if max_turn_tokens < 1:
            raise ValueError(f"max_turn_tokens must be >= 1, got {max_turn_tokens}")
        self._make = _maker(env, env_kwargs)
        name = _format_name(self._make, fmt)
        self._wrappers: list[WrapperFn] = [*text_wrappers(name, history=history_length), *wrappers]
        self.fmt = name
        self.max_turn_tokens = int(max_turn_tokens)
        self._rng = np.random.default_rng(seed)
        self._pool: dict[int, list[GroupEnv]] = {}

    def _groups(self, sizes: Sequence[int]) -> list[GroupEnv]:
        """One :class:`GroupEnv` per block, of the block's size (reused from call to call)."""
        out, used = [], dict.fromkeys(sizes, 0)
        for size in sizes:
            pool = self._pool.setdefault(size, [])
            if used[size] == len(pool):
                pool.append(GroupEnv(lambda: self._make(), size, wrappers=self._wrappers))
            out.append(pool[used[size]])
            used[size] += 1
        return out

    def close(self) -> None:
        for pool in self._pool.values():
            for g in pool:
                g.close()
        self._pool.clear()

    # -- generation --------------------------------------------------------------------------------------------
    def _replies(self, trainer: Any, live: list[_Rollout]) -> list[tuple[list[int], list[float] | None]]:
        """One reply per live rollout, with the sampling log-prob of each of its tokens (``None`` when the backend
        gives none: TRL's own generate, whose log-probs TRL recomputes)."""
        rows = [r.prompt_ids + r.completion for r in live]
        if getattr(trainer, "use_vllm", False):
            if getattr(trainer, "vllm_mode", "server") == "server":
                return self._vllm_server(trainer, rows)
            return self._vllm_colocate(trainer, rows)
        return [(reply, None) for reply in self._generate(trainer, rows)]

    def _cut(self, trainer: Any, reply: Sequence[int], logps: Sequence[Any]) -> tuple[list[int], list[Any]]:
        """A reply up to its first end-of-turn token, and its tokens' sampling log-probs."""
        eos = set(trainer.eos_token_ids)
        cut = next((i + 1 for i, t in enumerate(reply) if t in eos), len(reply))
        return [int(t) for t in reply[:cut]], list(logps[:cut])

    def _sampling(self, gen: Any) -> dict[str, Any]:
        return {
            "n": 1,
            "temperature": gen.temperature,
            "top_p": gen.top_p,
            "top_k": gen.top_k,
            "min_p": 0.0 if gen.min_p is None else gen.min_p,
            "repetition_penalty": gen.repetition_penalty,
            "max_tokens": self.max_turn_tokens,
        }

    def _vllm_server(self, trainer: Any, rows: list[list[int]]) -> list[tuple[list[int], list[Any]]]:
        """One turn through TRL's vLLM server: the main process (the only one holding ``vllm_client``) sends every
        process's rows in one request and hands each its replies with their sampled tokens' log-probs."""
        acc, gen = trainer.accelerator, trainer.vllm_generation
        parts = _gather_all(trainer, rows)
        payload: Any = None
        if acc.is_main_process:
            flat = [r for p in parts for r in p]
            url = getattr(gen.vllm_client, "base_url", "?")
            try:
                out = gen.vllm_client.generate(
                    prompts=flat, logprobs=0, generation_kwargs=gen.generation_kwargs, **self._sampling(gen)
                )
                payload = (out["completion_ids"], [[lp[0] for lp in seq] for seq in out["logprobs"]])
            except Exception as e:  # any failure: every process must learn of it, not only the main one
                payload = f"the vLLM server at {url} failed mid-generation ({type(e).__name__}: {e})"
        payload = _broadcast(trainer, payload)
        if isinstance(payload, str):
            raise ServiceUnavailableError(
                payload + "; is `trl vllm-serve` / `vllm serve` still running there?"
            )
        ids, logps = payload
        start = sum(len(p) for p in parts[: int(acc.process_index)])
        return [
            self._cut(trainer, c, lp)
            for c, lp in zip(ids[start : start + len(rows)], logps[start:], strict=False)
        ]

    def _vllm_colocate(self, trainer: Any, rows: list[list[int]]) -> list[tuple[list[int], list[Any]]]:
        """One turn through the vLLM engine TRL colocates with this process (``trainer.vllm_generation.llm``)."""
        from vllm import SamplingParams

        gen = trainer.vllm_generation
        params = SamplingParams(**self._sampling(gen), logprobs=0, **(gen.generation_kwargs or {}))
        outs = gen.llm.generate(
            [{"prompt_token_ids": r} for r in rows], sampling_params=params, use_tqdm=False
        )
        replies = []
        for o in outs:
            c = o.outputs[0]
            logps = [float(step[t].logprob) for t, step in zip(c.token_ids, c.logprobs, strict=True)]
            replies.append(self._cut(trainer, list(c.token_ids), logps))
        return replies

    def _generate(self, trainer: Any, rows: list[list[int]]) -> list[list[int]]:
        tok = trainer.processing_class
        pad = tok.pad_token_id
        width = max(len(r) for r in rows)
        ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows])
        attn = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
        device = trainer.accelerator.device
        config = trainer.generation_config.__class__.from_dict(trainer.generation_config.to_dict())
        config.max_new_tokens = self.max_turn_tokens
        config.max_length = None
        with (
            unwrap_model_for_generation(
                trainer.model_wrapped,
                trainer.accelerator,
                gradient_checkpointing_kwargs=trainer.args.gradient_checkpointing_kwargs,
            ) as model,
            torch.no_grad(),
        ):
            out = model.generate(
                input_ids=ids.to(device), attention_mask=attn.to(device), generation_config=config
            )
        eos = set(trainer.eos_token_ids)
        replies = []
        for row in out[:, width:].tolist():
            cut = next((i + 1 for i, t in enumerate(row) if t in eos), len(row))
            replies.append(row[:cut])
        return replies

    # -- which rows make up which group --------------------------------------------------------------------------
    def _blocks(self, prompts: list[Any], trainer: Any) -> list[tuple[int, list[int]]]:
        """This process's rows cut into (global group index, local rows) blocks.

        TRL gives process p the rows ``[p·n, (p+1)·n)`` of the global batch (n = ``len(prompts)``), and group k is
        global rows ``[k·G, (k+1)·G)``; a group may straddle two processes, each then plays its own part of it
        (same task, same seed, so the parts are one group)."""
        g = trainer.num_generations if trainer.model.training else trainer.num_generations_eval
        n_proc = int(getattr(trainer.accelerator, "num_processes", 1))
        if (len(prompts) * n_proc) % g:
            raise StepRecordError(
                f"the global batch of {len(prompts)} prompts x {n_proc} processes does not split into groups of "
                f"{g} (TRL's num_generations): a group would lose rows"
            )
        offset = int(getattr(trainer.accelerator, "process_index", 0)) * len(prompts)
        tasks = [task_id_of_prompt(p) for p in prompts]
        blocks: list[tuple[int, list[int]]] = []
        for i in range(len(prompts)):
            k = (offset + i) // g
            if blocks and blocks[-1][0] == k:
                blocks[-1][1].append(i)
            else:
                blocks.append((k, [i]))
        for k, rows in blocks:
            block = {tasks[i] for i in rows}
            if len(block) != 1:
                raise StepRecordError(
                    f"group {k} mixes tasks {sorted(block)}: TRL must hand each prompt {g} times in a row "
                    "(its RepeatSampler does; keep shuffle/sampler settings that preserve it)"
                )
        return blocks

    # -- the rollout ---------------------------------------------------------------------------------------------
    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, Any]:
        blocks = self._blocks(prompts, trainer)
        tok = trainer.processing_class
        max_len = int(trainer.max_completion_length or 0) or 10**9
        if self.max_turn_tokens > max_len:
            raise ValueError(
                f"max_turn_tokens={self.max_turn_tokens} exceeds max_completion_length={max_len}"
            )
        groups = self._groups([len(rows) for _, rows in blocks])
        offset = int(getattr(trainer.accelerator, "process_index", 0)) * len(prompts)
        # one draw per call, the same on every process (same seed, same calls): group k's env seed is base + k
        base = int(self._rng.integers(2**30))
        rollouts: list[_Rollout] = []
        for b, (group, (k, rows)) in enumerate(zip(groups, blocks, strict=True)):
            task = task_id_of_prompt(prompts[rows[0]])
            group.reset(seed=base + k, options={"task_id": task})
            system = [
                {"role": "system", "content": m["content"]}
                for m in prompts[rows[0]]
                if isinstance(m, Mapping) and m.get("role") == "system"
            ]
            for agent, text in group.prompts().items():
                messages = [*system, {"role": "user", "content": text}]
                r = _Rollout(b, agent, _template_ids(tok, messages, generation_prompt=True))
                r.group, r.row = k, offset + len(rollouts)
                rollouts.append(r)
        while True:
            live = [r for r in rollouts if r.live]
            if not self._any_live(trainer, bool(live)):
                break
            replies = self._replies(trainer, live)
            actions: dict[int, dict[str, str]] = {}
            for r, (reply, logps) in zip(live, replies, strict=True):
                start = len(r.completion)
                r.add(reply, trained=True, logprobs=logps)
                r.spans.append((start, len(r.completion)))
                text = tok.decode(reply, skip_special_tokens=True)
                actions.setdefault(r.block, {})[r.agent] = text
            for b, acts in actions.items():
                _, _, term, trunc, _ = groups[b].step(acts)
                for r in live:
                    if r.block != b:
                        continue
                    if term[r.agent] or trunc[r.agent]:
                        r.live = False
                        continue
                    self._next_turn(r, groups[b], tok, max_len)
        return self._outputs(rollouts, groups)

    @staticmethod
    def _any_live(trainer: Any, mine: bool) -> bool:
        """Whether another turn is played. The vLLM server turn is collective (every process joins each request),
        so there the processes play on until none has a live rollout left."""
        shared = getattr(trainer, "use_vllm", False) and getattr(trainer, "vllm_mode", "server") == "server"
        if not shared:
            return mine
        return any(_gather_all(trainer, mine))

    def _next_turn(self, r: _Rollout, group: GroupEnv, tok: Any, max_len: int) -> None:
        closing = [] if r.completion and r.completion[-1] == tok.eos_token_id else [tok.eos_token_id]
        turn = closing + user_turn_ids(tok, group.env_of(r.agent).get_wrapper_attr("prompt"))
        if len(r.completion) + len(turn) + self.max_turn_tokens > max_len:
            r.live = False  # no room for another turn: the episode is cut here, unfinished
            return
        r.add(turn, trained=False)

    def _outputs(self, rollouts: list[_Rollout], groups: list[GroupEnv]) -> dict[str, Any]:
        episodes, steps = [], []
        for r in rollouts:
            group = groups[r.block]
            traj = group.trajectories[group.possible_agents.index(r.agent)]
            ep = episode_annotations(traj)
            ep["group"] = r.group
            recs = ep.pop("steps")
            for rec, (s, e) in zip(recs, r.spans, strict=True):
                rec.update(start=s, stop=e, group=r.group)
            episodes.append(ep)
            steps.append(recs)
        return {
            "prompt_ids": [r.prompt_ids for r in rollouts],
            "completion_ids": [r.completion for r in rollouts],
            "logprobs": [r.logprobs for r in rollouts] if all(r.sampled for r in rollouts) else None,
            "env_mask": [r.mask for r in rollouts],
            "stepgym_episode": episodes,
            "stepgym_steps": steps,
            "stepgym_trajectory": [
                g.trajectories[g.possible_agents.index(r.agent)] for r in rollouts for g in [groups[r.block]]
            ],
        }


def episode_return(completions: list[Any], stepgym_episode: list[dict[str, Any]] | None = None, **_: Any):
    """A TRL reward function: the env's episode return of each :class:`GroupRollout` completion."""
    if stepgym_episode is None:
        raise ValueError(
            "episode_return needs GroupRollout's stepgym_episode (use it with rollout_func=GroupRollout)"
        )
    return [float(ep["return"]) for ep in stepgym_episode]


# ---------------------------------------------------------------------------------------------------------------
# Step-level credit
# ---------------------------------------------------------------------------------------------------------------
def step_batch_from_rollouts(
    steps: Sequence[Sequence[Mapping[str, Any]]],
    *,
    length: int,
    reward_scale: float = 10.0,
    invalid_rule: str = "format_or_inadmissible",
) -> StepBatch:
    """The shapers' :class:`StepBatch` for a batch of :class:`GroupRollout` completions.

    ``steps[b]`` is completion b's ``stepgym_steps`` (its rows in step order); one token row per completion,
    ``length`` its padded completion length. Group = the step records' ``group``; trajectory = the completion;
    reward = env reward × ``reward_scale``; valid = format-valid (``invalid_rule="format"``) or format-valid and
    admissible (default, as the bundled trainer); GiGPO's anchor = the state the action was taken in; ProAS labels
    from ``ARGWrapper`` when every step has them.
    """
    groups = []
    for b, rows in enumerate(steps):
        if not rows:
            raise ValueError(f"completion {b} has no steps")
        k = {int(r["group"]) for r in rows}
        if len(k) != 1:
            raise StepRecordError(f"completion {b}'s steps name several groups {sorted(k)}")
        groups.append(k.pop())
    return build_step_batch(
        [[(int(r["start"]), int(r["stop"])) for r in rows] for rows in steps],
        groups,
        length,
        records=[list(rows) for rows in steps],
        reward_scale=reward_scale,
        invalid_rule=invalid_rule,
    )


TokenGapFn = Callable[[Any, list[dict[str, Any]], dict[str, Any], StepBatch], Mapping[str, Any]]


class TeacherGaps:
    """The teacher rescoring AHEAD and StepOPSD need, for :class:`StepGRPOTrainer` (its default ``token_gaps``).

    The same teachers and contexts as the bundled trainer (:mod:`stepgym.trainers.teacher`), on TRL's layout of
    one token row per episode (prompt, then the model's replies between the env's turns):

    * AHEAD: teacher = the policy before the update (θ_old, the trainer's model when the batch is scored); each
      reply is scored again with the privileged text (the env's feedback to it, plus the oracle analyzer's
      corrective hint on the error steps of failed episodes) inserted at the end of the user turn it answers,
      before the template's end-of-turn and assistant header. δ = teacher − student on every reply token.
    * StepOPSD: teacher = a stale snapshot (:class:`~stepgym.trainers.teacher.StaleTeacher`, refreshed every
      ``refresh_every`` updates); each reply's target span (its ``<action>…</action>`` tag; the whole reply for
      Search-QA) is scored after ``prompt ⊕ earlier turns ⊕ reply before the span ⊕ hindsight block`` (the first
      successful peer of the group, :func:`stepgym.hindsight.peer_hindsight`). Δ on the target spans.

    The privileged text is cut (middle first) or dropped to fit ``max_context_tokens`` (default: the prompt plus
    TRL's ``max_completion_length``), as in the bundled trainer. ``last_metrics`` holds the teacher's counters.
    """

    def __init__(
        self,
        *,
        refresh_every: int = 10,
        max_context_tokens: int | None = None,
        min_pi_tokens: int = 32,
        microbatch_tokens: int = 16384,
        analyzer: Any = None,
    ) -> None:
        self.refresh_every = int(refresh_every)
        self.max_context_tokens = max_context_tokens
        self.min_pi_tokens = int(min_pi_tokens)
        self.microbatch_tokens = int(microbatch_tokens)
        self.analyzer = analyzer
        self.stale: Any = None
        self.last_metrics: dict[str, float] = {}

    def __call__(
        self, trainer: Any, inputs: list[dict[str, Any]], outputs: dict[str, Any], batch: StepBatch
    ) -> dict[str, Any]:
        from stepgym.trainers.teacher import Scorer, StaleTeacher, TeacherStats, span_mode_for

        kind = trainer.shape_config.token_reweight
        if kind not in ("ahead", "stepopsd"):
            raise ValueError(f"TeacherGaps scores AHEAD and StepOPSD only, not token_reweight={kind!r}")
        lam = trainer.shape_config.mixing_lambda(int(trainer.state.global_step))
        if lam <= 0 and kind == "ahead":
            return {}
        tok = trainer.processing_class
        rows = _token_rows(outputs)
        if "stepgym_trajectory" not in inputs[0]:
            raise ValueError("TeacherGaps needs GroupRollout's stepgym_trajectory records")
        trajs = [x["stepgym_trajectory"] for x in inputs]
        steps = [x["stepgym_steps"] for x in inputs]
        width = int(outputs["completion_ids"].shape[1])
        budget = self.max_context_tokens or (
            max(len(p) for p, _ in rows) + int(trainer.max_completion_length or width)
        )
        scorer = Scorer(tok.pad_token_id, microbatch_tokens=self.microbatch_tokens)
        model = trainer.model
        student = scorer.score(model, [p for p, _ in rows], [c for _, c in rows]) if lam > 0 else None
        stats = TeacherStats()
        ctx = TeacherContexts(
            prompts=[p for p, _ in rows],
            responses=[c for _, c in rows],
            steps=[list(r) for r in steps],
            trajectories=list(trajs),
            groups=[int(r[0]["group"]) for r in steps],
            old_log_probs=_student_grid(student, len(rows), width),
            max_context_tokens=budget,
            min_pi_tokens=self.min_pi_tokens,
        )
        if kind == "ahead":
            delta = ahead_gaps(ctx, tok, lambda c, t: scorer.score(model, c, t), stats, self.analyzer)
            out: dict[str, Any] = {"delta": delta}
        else:
            if self.stale is None:
                self.stale = StaleTeacher(model, self.refresh_every)
            self.stale.maybe_refresh(model, int(trainer.state.global_step))
            teacher = self.stale.model
            delta, mask, target = opsd_gaps(
                ctx,
                tok,
                None if student is None else (lambda c, t: scorer.score(teacher, c, t)),
                stats,
                span_mode=span_mode_for(getattr(trainer.rollout_func, "fmt", None)),
                blocks=self._hindsight_blocks(trainer, ctx.trajectories, ctx.groups),
            )
            out = (
                {"target": target}
                if delta is None
                else {"delta": delta, "delta_mask": mask, "target": target}
            )
        self.last_metrics = {**stats.as_metrics(), "teacher/lambda": lam}
        return out

    @staticmethod
    def _hindsight_blocks(trainer: Any, trajs: list[Any], groups: list[int]) -> list[str | None]:
        """Each local row's hindsight block from its group's first successful peer; peers on other processes
        count (every process's trajectories are gathered, in global row order)."""
        from stepgym.hindsight import peer_hindsight

        parts = _gather_all(trainer, (trajs, groups))
        all_trajs = [t for p in parts for t in p[0]]
        all_groups = [g for p in parts for g in p[1]]
        offset = int(trainer.accelerator.process_index) * len(trajs)
        blocks: list[str | None] = [None] * len(all_trajs)
        for g in sorted(set(all_groups)):
            members = [b for b, k in enumerate(all_groups) if k == g]
            for b, block in zip(members, peer_hindsight([all_trajs[b] for b in members]), strict=True):
                blocks[b] = block
        return blocks[offset : offset + len(trajs)]


def _student_grid(student: list[np.ndarray] | None, n_rows: int, width: int) -> np.ndarray:
    """The student's per-completion log-probs as a (B, width) grid (NaN past a completion's end; zeros when λ = 0
    leaves the student unscored: no gap is taken then)."""
    grid = np.full((n_rows, width), np.nan if student is not None else 0.0)
    for b, lp in enumerate(student or []):
        lp = np.asarray(lp, dtype=np.float64).ravel()[:width]
        grid[b, : len(lp)] = lp
    return grid


def _token_rows(outputs: Mapping[str, Any]) -> list[tuple[list[int], list[int]]]:
    """Each completion's (prompt ids without padding, completion ids without padding) from TRL's batch."""
    rows = []
    for p, pm, c, cm in zip(
        outputs["prompt_ids"].tolist(),
        outputs["prompt_mask"].tolist(),
        outputs["completion_ids"].tolist(),
        outputs["completion_mask"].tolist(),
        strict=True,
    ):
        rows.append(([t for t, m in zip(p, pm, strict=True) if m], c[: int(sum(cm))]))
    return rows


class StepGRPOTrainer(GRPOTrainer):
    """``GRPOTrainer`` with stepgym's per-token advantages instead of TRL's one advantage per sequence.

    Use it with ``rollout_func=GroupRollout(...)``. After TRL has generated and scored a batch, the steps the
    rollout recorded become a :class:`~stepgym.shapers.StepBatch` (:func:`step_batch_from_rollouts`) and
    :func:`~stepgym.shapers.shape_advantages` computes the (B, L) token advantages with ``shape_config``
    (a :class:`~stepgym.shapers.ShapeConfig` or a preset name such as ``"gigpo-alfworld"`` or
    ``"proas-gigpo"``); they replace ``inputs["advantages"]`` and TRL's loss, which accepts (B, L) advantages,
    optimises them. ``update_index`` is the number of completed optimizer steps.

    The env's per-step rewards drive the advantages; TRL's reward functions are still computed and logged but do
    not enter them. ProAS needs ARG labels (wrap the env with ``ARGWrapper``); AHEAD and StepOPSD need teacher
    log-prob gaps: by default :class:`TeacherGaps` scores them as the bundled trainer does; any other
    ``token_gaps(trainer, inputs, outputs, batch) -> {"delta": (B, L), "delta_mask": ..., "target": TokenLayout}``
    (arrays over the completion tokens) replaces it. ``last_batch`` / ``last_shaped`` keep the last batch's
    :class:`~stepgym.shapers.StepBatch` and result (of the global batch).

    Under ``accelerate launch --num_processes N`` every process gathers all processes' step records (and teacher
    gaps), shapes the global batch once, the same way on every process, and keeps its own rows, so the advantages
    equal those of one process on the same global batch even when a group straddles two processes.
    """

    def __init__(
        self,
        *args: Any,
        shape_config: ShapeConfig | str = "gigpo-alfworld",
        reward_scale: float = 10.0,
        invalid_rule: str = "format_or_inadmissible",
        token_gaps: TokenGapFn | None = None,
        **kwargs: Any,
    ) -> None:
        self.shape_config = (
            ShapeConfig.from_preset(shape_config) if isinstance(shape_config, str) else shape_config
        )
        if token_gaps is None and self.shape_config.token_reweight in ("ahead", "stepopsd"):
            token_gaps = TeacherGaps()
        if self.shape_config.token_reweight is not None and token_gaps is None:
            raise ValueError(
                f"token_reweight={self.shape_config.token_reweight!r} needs teacher log-prob gaps: pass token_gaps="
            )
        self.reward_scale = float(reward_scale)
        self.invalid_rule = invalid_rule
        self.token_gaps = token_gaps
        super().__init__(*args, **kwargs)
        if not isinstance(self.rollout_func, GroupRollout):
            raise ValueError(
                "StepGRPOTrainer needs rollout_func=GroupRollout(...): only it records which tokens belong to "
                "which env step (TRL's environment_factory tool loop keeps no such record)"
            )
        self.last_batch: StepBatch | None = None
        self.last_shaped = None

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        out = super()._generate_and_score_completions(inputs)
        width = int(out["completion_ids"].shape[1])
        rows, offset, batch = self._global_batch(inputs, width)
        mode = "train" if self.model.training else "eval"
        if self.token_gaps is not None:
            local = dict(self.token_gaps(self, inputs, out, batch))
            for key, value in _gather_gaps(self, local, rows, batch.layout.shape[1]).items():
                setattr(batch, key, value)
            for key, value in getattr(self.token_gaps, "last_metrics", {}).items():
                self._metrics[mode][key].append(float(value))
        shaped = shape_advantages(batch, self.shape_config, update_index=int(self.state.global_step))
        self.last_batch, self.last_shaped = batch, shaped
        mine = shaped.token_advantages[offset : offset + len(inputs), :width]
        adv = torch.as_tensor(
            np.ascontiguousarray(mine), dtype=torch.float32, device=out["completion_ids"].device
        )
        out["advantages"] = adv
        trained = (out["completion_mask"] * out.get("tool_mask", 1)).bool()
        self._metrics[mode]["stepgym/token_advantage_abs_mean"].append(float(adv[trained].abs().mean()))
        self._metrics[mode]["stepgym/steps_per_episode"].append(float(len(batch.rewards)) / sum(rows))
        return out

    def _global_batch(self, inputs: list[dict[str, Any]], width: int) -> tuple[list[int], int, StepBatch]:
        """The whole batch's :class:`StepBatch`, over every process's rows (gathered in process order, the order of
        TRL's global batch); with it, each process's row count and this process's first row.

        Every process builds and later shapes the same global batch (the shapers are deterministic numpy), so no
        broadcast is needed; each then keeps its own rows."""
        for i, x in enumerate(inputs):
            if not x.get("stepgym_steps"):
                raise StepRecordError(
                    f"row {i} of process {self.accelerator.process_index} has no stepgym_steps: StepGRPOTrainer "
                    "needs GroupRollout's step records on every row"
                )
        local = [x["stepgym_steps"] for x in inputs]
        parts = _gather_all(self, {"steps": local, "width": width})
        rows = [len(p["steps"]) for p in parts]
        if len(set(rows)) != 1:
            raise StepRecordError(
                f"processes hold {rows} rows: TRL slices the global batch into equal parts, so rows were lost"
            )
        steps = [r for p in parts for r in p["steps"]]
        _check_groups(steps, self.num_generations if self.model.training else self.num_generations_eval)
        batch = step_batch_from_rollouts(
            steps,
            length=max(int(p["width"]) for p in parts),
            reward_scale=self.reward_scale,
            invalid_rule=self.invalid_rule,
        )
        return rows, int(self.accelerator.process_index) * rows[0], batch


def _gather_all(trainer: Any, obj: Any) -> list[Any]:
    """``[obj of process 0, obj of process 1, ...]`` (one process: ``[obj]``)."""
    if int(trainer.accelerator.num_processes) == 1:
        return [obj]
    from accelerate.utils import gather_object

    return list(gather_object([obj]))


def _broadcast(trainer: Any, obj: Any) -> Any:
    """The main process's ``obj`` on every process."""
    if int(trainer.accelerator.num_processes) == 1:
        return obj
    from accelerate.utils import broadcast_object_list

    box = [obj]
    broadcast_object_list(box, from_process=0)
    return box[0]


def _check_groups(steps: Sequence[Sequence[Mapping[str, Any]]], g: int) -> None:
    """Global row b must belong to group b // G, and every group must hold G rows: else a group lost rows or TRL's
    ``num_generations`` is not the group size the rollout played."""
    for b, recs in enumerate(steps):
        k = {int(s["group"]) for s in recs}
        if k != {b // g}:
            raise StepRecordError(
                f"global row {b} belongs to group {sorted(k)}, expected {b // g} with num_generations={g}: the "
                "rollout's groups do not match TRL's (a group split or lost rows, or num_generations is not the "
                "group size)"
            )
    if len(steps) % g:
        raise StepRecordError(f"the last group holds {len(steps) % g} of num_generations={g} rows")


def _gather_gaps(trainer: Any, local: dict[str, Any], rows: list[int], width: int) -> dict[str, Any]:
    """Every process's ``token_gaps`` result, stacked over the global batch on a grid ``width`` wide: ``delta``
    padded with NaN, ``delta_mask`` with False, ``target`` renumbered (steps of later processes come after)."""
    if int(trainer.accelerator.num_processes) == 1 and all(
        np.shape(v)[-1] == width if k != "target" else v.shape[1] == width for k, v in local.items()
    ):
        return local
    packed = {
        k: (v.token_step, v.n_steps, v.step_row) if k == "target" else np.asarray(v) for k, v in local.items()
    }
    parts = _gather_all(trainer, packed)
    keys = set(parts[0])
    if any(set(p) != keys for p in parts):
        raise StepRecordError(
            f"token_gaps returned different keys on different processes: {[sorted(p) for p in parts]}"
        )
    out: dict[str, Any] = {}

    def widen(a: np.ndarray, fill: Any) -> np.ndarray:
        return np.pad(a, ((0, 0), (0, width - a.shape[1])), constant_values=fill)

    for key in keys:
        if key == "target":
            ts, n, sr, row0 = [], 0, [], 0
            for p, r in zip(parts, rows, strict=True):
                t, k, s = p[key]
                ts.append(widen(np.where(t >= 0, t + n, -1), -1))
                sr.append(np.asarray(s) + row0)
                n, row0 = n + int(k), row0 + r
            out[key] = TokenLayout(
                np.concatenate(ts).astype(np.int64), n, np.concatenate(sr).astype(np.int64)
            )
        else:
            fill = False if parts[0][key].dtype == bool else np.nan
            out[key] = np.concatenate([widen(p[key], fill) for p in parts])
    return out
