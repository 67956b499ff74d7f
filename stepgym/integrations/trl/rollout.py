"""``GroupRollout``: a TRL ``rollout_func`` playing multi-turn GRPO groups over :class:`stepgym.GroupEnv`, one
growing chat per rollout with each step's token span recorded; and ``episode_return``, a reward function."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from stepgym import _deps, schema
from stepgym.errors import ServiceUnavailableError, StepRecordError
from stepgym.group import EnvFactory, GroupConfig, GroupEnv, WrapperFn
from stepgym.integrations.tool_use import answer_message, env_tool_schemas
from stepgym.steps.episode import span_records
from stepgym.steps.tasks import reset_args, task_id_of_prompt
from stepgym.wrappers.text import text_wrappers

_deps.require("trl", "trl", what="the TRL integration")
torch = _deps.require("torch", "trl")

from trl.models import unwrap_model_for_generation  # noqa: E402

from stepgym.integrations.trl._common import broadcast, env_maker, format_name, gather_all  # noqa: E402
from stepgym.integrations.trl.chat import template_ids, user_turn_ids  # noqa: E402


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
        self.tools: list[dict[str, Any]] | None = (
            None  # a tool-use env's tool schemas (the template renders them)
        )

    def add(self, ids: Sequence[int], trained: bool, logprobs: Sequence[float] | None = None) -> None:
        self.completion.extend(int(i) for i in ids)
        self.mask.extend([1 if trained else 0] * len(ids))
        # the sampling log-prob of each generated token; env tokens have none (TRL reads None as "no correction")
        self.logprobs.extend(list(logprobs) if logprobs is not None else [None] * len(ids))
        if logprobs is not None:
            self.sampled = True


def _opening(group: GroupEnv, agent: str) -> str:
    """A tool-use rollout's first user turn: the env's instructions (without the format's tool list) and its first
    observation."""
    core = group.env_of(agent).unwrapped
    traj = group.trajectories[group.possible_agents.index(agent)]
    system = getattr(core, "system_prompt", None)
    goal = system() if callable(system) else str(traj.initial_info.get(schema.GOAL) or "")
    return f"{goal}\n\n{traj.initial_observation}" if goal else str(traj.initial_observation)


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
        on_failure: ``"abort"`` (default): an env or service failure ends that rollout's episode as aborted
            (``GroupConfig.on_failure``; docs/failures.md): its step records carry ``aborted`` and
            :class:`StepGRPOTrainer` gives its row advantage 0 and masks it out of the loss. ``"raise"``: the error
            stops the rollout.

    Called as ``rollout(prompts, trainer)``: the prompts come from
    :func:`stepgym.steps.tasks.task_dataset` (they carry the task id), repeated G times in a row by TRL. Each
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
        on_failure: str = "abort",
    ) -> None:
        if max_turn_tokens < 1:
            raise ValueError(f"max_turn_tokens must be >= 1, got {max_turn_tokens}")
        self._make = env_maker(env, env_kwargs)
        name = format_name(self._make, fmt)
        self._wrappers: list[WrapperFn] = [*text_wrappers(name, history=history_length), *wrappers]
        self.fmt = name
        self.max_turn_tokens = int(max_turn_tokens)
        self._group_config = GroupConfig(on_failure=on_failure)  # type: ignore[arg-type]
        self._rng = np.random.default_rng(seed)
        self._pool: dict[int, list[GroupEnv]] = {}

    def _groups(self, sizes: Sequence[int]) -> list[GroupEnv]:
        """One :class:`GroupEnv` per block, of the block's size (reused from call to call)."""
        out, used = [], dict.fromkeys(sizes, 0)
        for size in sizes:
            pool = self._pool.setdefault(size, [])
            if used[size] == len(pool):
                pool.append(
                    GroupEnv(lambda: self._make(), size, wrappers=self._wrappers, config=self._group_config)
                )
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
        parts = gather_all(trainer, rows)
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
        payload = broadcast(trainer, payload)
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
            env_seed, options = reset_args(task_id_of_prompt(prompts[rows[0]]), base + k)
            group.reset(seed=env_seed, options=options)
            system = [
                {"role": "system", "content": m["content"]}
                for m in prompts[rows[0]]
                if isinstance(m, Mapping) and m.get("role") == "system"
            ]
            tools = env_tool_schemas(group.env_of(group.possible_agents[0]))
            for agent, text in group.prompts().items():
                if (
                    tools is not None
                ):  # a tool-use env: the template renders its tools, answers come as messages
                    text = _opening(group, agent)
                messages = [*system, {"role": "user", "content": text}]
                r = _Rollout(b, agent, template_ids(tok, messages, generation_prompt=True, tools=tools))
                r.tools = tools
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
        return any(gather_all(trainer, mine))

    def _next_turn(self, r: _Rollout, group: GroupEnv, tok: Any, max_len: int) -> None:
        closing = [] if r.completion and r.completion[-1] == tok.eos_token_id else [tok.eos_token_id]
        if r.tools is not None:  # a tool-use env: the tool's answer (or the user's reply) as its own message
            step = group.trajectories[group.possible_agents.index(r.agent)].steps[-1]
            answer = answer_message(step.info.get(schema.PARSED_ACTION), step.next_observation)
            turn = closing + user_turn_ids(tok, answer["content"], role=answer["role"])
        else:
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
            ep, recs = span_records(traj, r.spans)  # an aborted episode's unanswered reply: a stand-in record
            ep["group"] = r.group
            for rec in recs:
                rec["group"] = r.group
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
