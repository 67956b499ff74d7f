"""stepgym inside verl 0.9: an agent loop that plays a stepgym env, and stepgym's shapers as advantage estimators.

verl trains multi-turn agents through *agent loops*: for each dataset row an ``AgentLoopBase`` subclass, registered
by name, talks to verl's generation servers (``await self.server_manager.generate(...)``) and returns one
``AgentLoopOutput`` (prompt tokens, response tokens with a loss mask, a reward, extra fields). verl then turns a
batch of them into a ``DataProto`` and computes advantages with a registered estimator (``@register_adv_est``).

* :class:`StepGymAgentLoop` (registered as ``"stepgym"``) plays the row's task (``task_id``, see
  :func:`verl_rows`) through the same text interface the bundled trainer uses
  (:class:`~stepgym.wrappers.text.TextInterfaceWrapper`: ReAct prompts, strict parsing, an unparsable reply is an
  invalid step). The chat grows by verl's own Continuous Token builder (``ct_build_initial_tokens``,
  ``ct_merge_assistant_token``, ``ct_merge_context_msg``), so the model's reply tokens get ``response_mask`` 1 and
  the env's turns 0. ``reward_score`` is the episode return; ``extra_fields`` carry ``stepgym_steps`` (each step's
  annotation record with its reply's token span ``start``/``stop`` in response coordinates) and
  ``stepgym_episode`` (task id, won, return, ARG labels).
* Advantage estimators ``stepgym_grpo``, ``stepgym_drgrpo``, ``stepgym_gigpo``, ``stepgym_proas``, the graph
  bases' ``stepgym_graphgpo`` ... and one for every base registered in stepgym's shaper registry
  (:data:`ESTIMATORS`, :func:`estimator_presets`) run :func:`stepgym.shapers.shape_advantages` on verl's tensors. verl 0.9's
  ``compute_advantage`` hands a custom estimator only ``token_level_rewards``, ``response_mask``, ``index`` (the
  group uid) and ``config``: that is enough for the GRPO-family bases (steps = the runs of 1s in
  ``response_mask``, each step's reward = the token-level rewards from its first token to the next step's). GiGPO
  needs each step's state key and ProAS its ARG labels, which live in the agent loop's extra fields
  (``non_tensor_batch["stepgym_steps"]``) and which verl does not pass to custom estimators:
  :func:`compute_step_advantage` takes the whole ``DataProto`` for a trainer that calls it itself, and the
  estimators accept ``non_tensor_batch=`` and refuse clearly without it. AHEAD and StepOPSD need a teacher's
  log-prob gaps, which verl does not pass either: :func:`compute_step_advantage` takes them as ``delta=``.
* :mod:`stepgym.integrations.verl.train` is that trainer: verl's v1 trainer with its advantage step replaced, for
  every method (the teachers scored by verl's own actor / ref workers), and Hydra configs per benchmark.

Only CPU checks were run: verl's training needs GPUs (vLLM / SGLang servers, FSDP or Megatron).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any
from uuid import uuid4

import gymnasium as gym
import numpy as np

from stepgym import _deps, schema
from stepgym.episodes import EpisodeRecorder
from stepgym.errors import StepRecordError, abort_cause_of
from stepgym.group import WrapperFn
from stepgym.integrations.tasks import reset_args, task_rows
from stepgym.shapers import SHAPER_PRESETS, ShapeConfig, StepBatch, TokenLayout, shape_advantages
from stepgym.shapers.registry import NEEDS
from stepgym.shapers.registry import available as available_shapers
from stepgym.shapers.registry import get as get_shaper
from stepgym.step_record import ABORTED_STEP, INVALID_RULES, episode_annotations
from stepgym.steps import build_step_batch, mask_runs
from stepgym.wrappers.text import make_text_env

_deps.require("verl", "verl", what="the verl integration")
torch = _deps.require("torch", "verl")

from verl.experimental.agent_loop.agent_loop import (  # noqa: E402
    AgentLoopBase,
    AgentLoopMetrics,
    AgentLoopOutput,
    register,
)
from verl.trainer.ppo.core_algos import register_adv_est  # noqa: E402

__all__ = [
    "ESTIMATORS",
    "StepGymAgentLoop",
    "compute_step_advantage",
    "estimator_presets",
    "step_batch_from_verl",
    "verl_rows",
]


# ---------------------------------------------------------------------------------------------------------------
# Dataset rows
# ---------------------------------------------------------------------------------------------------------------
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


# ---------------------------------------------------------------------------------------------------------------
# The agent loop
# ---------------------------------------------------------------------------------------------------------------
@register("stepgym")
class StepGymAgentLoop(AgentLoopBase):
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
        self.env: gym.Env | None = None
        self.info: dict[str, Any] = {}

    # -- env ---------------------------------------------------------------------------------------------------
    def _make_env(self, row: Mapping[str, Any]) -> gym.Env:
        env_id = self.env_id or _row_value(row, "env_id")
        if not env_id:
            raise ValueError(
                "no stepgym env id: set env_id in the agent loop config or extra_info.env_id (verl_rows does)"
            )
        kwargs = self.env_kwargs if self.env_kwargs is not None else _row_value(row, "env_kwargs")
        if isinstance(kwargs, str):
            kwargs = json.loads(kwargs)
        # the given format, else the env's declared one, else a clear error (the inner env closed)
        env: gym.Env = make_text_env(
            str(env_id), dict(kwargs or {}), fmt=self.fmt or None, history=self.history_length
        )
        for w in self.wrappers:
            env = w(env)
        return env

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
        self.env = env = await self._in_thread(lambda: self._make_env(row))
        try:
            return await self._play(env, str(task_id), row, params)
        finally:
            env.close()

    async def _play(
        self, env: gym.Env, task_id: str, row: Mapping[str, Any], params: dict[str, Any]
    ) -> AgentLoopOutput:
        row_seed = _row_value(row, "seed")
        seed, options = reset_args(task_id, None if row_seed is None else int(row_seed))  # "seed:N": by seed
        obs, self.info = await self._in_thread(lambda: env.reset(seed=seed, options=options))
        recorder = EpisodeRecorder()
        recorder.start(obs, self.info)
        system = [
            {"role": "system", "content": m["content"]}
            for m in (row.get("raw_prompt") if row.get("raw_prompt") is not None else [])
            if isinstance(m, Mapping) and m.get("role") == "system"
        ]
        messages = [*system, {"role": "user", "content": env.get_wrapper_attr("prompt")}]
        tokens = await self.ct_build_initial_tokens(messages)
        mask: list[int] = []
        logprobs: list[float] | None = None
        spans: list[tuple[int, int]] = []
        request_id = uuid4().hex
        gen_s = env_s = 0.0
        while True:
            t0 = time.perf_counter()
            out = await self.server_manager.generate(
                request_id=request_id, prompt_ids=tokens, sampling_params=params
            )
            gen_s += time.perf_counter() - t0
            if logprobs is None and out.log_probs:
                logprobs = [0.0] * len(mask)  # logprobs start with the first reply that has them
            merged, mask, logprobs = await self.ct_merge_assistant_token(
                tokens, out.token_ids, mask, logprobs, assistant_logprobs=out.log_probs or None
            )
            tokens = merged.token_ids
            spans.append((len(mask) - merged.appended_token_count, len(mask)))
            reply = self.tokenizer.decode(out.token_ids, skip_special_tokens=True)
            t0 = time.perf_counter()
            try:
                obs, reward, term, trunc, self.info = await self._in_thread(lambda r=reply: env.step(r))
            except Exception as exc:  # an infrastructure failure: the episode ends aborted (docs/failures.md)
                assert recorder.trajectory is not None
                recorder.trajectory.abort(abort_cause_of(exc))
                break
            env_s += time.perf_counter() - t0
            recorder.add(reply, obs, reward, term, trunc, self.info)
            messages.append({"role": "assistant", "content": reply})
            if term or trunc or len(mask) >= self.response_length:
                break
            previous = list(messages)
            messages.append({"role": "user", "content": env.get_wrapper_attr("prompt")})
            merged, new_mask, new_logprobs = await self.ct_merge_context_msg(
                previous, messages, tokens, mask, logprobs
            )
            if len(new_mask) >= self.response_length:
                break  # no room for another turn: the episode is cut here, unfinished
            kept = len(mask) - merged.removed_prefix_token_count
            spans = [(min(s, kept), min(e, kept)) for s, e in spans]
            tokens, mask, logprobs = merged.token_ids, new_mask, new_logprobs
        return self._output(recorder.trajectory, tokens, mask, logprobs, spans, gen_s, env_s)

    def _output(
        self,
        traj: schema.Trajectory,
        tokens: list[int],
        mask: list[int],
        logprobs: list[float] | None,
        spans: list[tuple[int, int]],
        gen_s: float,
        env_s: float,
    ) -> AgentLoopOutput:
        n = self.response_length
        response = tokens[len(tokens) - len(mask) :] if mask else []
        prompt = tokens[: len(tokens) - len(mask)]
        episode = episode_annotations(traj)
        steps = episode.pop("steps")
        if traj.aborted:  # the last reply was never answered: a stand-in record; every record says aborted
            steps = [*steps, *[dict(ABORTED_STEP) for _ in spans[len(steps) :]]]
            for rec in steps:
                rec["aborted"] = True
        for rec, (s, e) in zip(steps, spans, strict=True):
            rec.update(start=min(s, n), stop=min(e, n))
        return AgentLoopOutput(
            prompt_ids=prompt,
            response_ids=response[:n],
            response_mask=mask[:n],
            response_logprobs=logprobs[:n] if logprobs else None,
            reward_score=float(episode["return"]),
            num_turns=len(steps) * 2 + 1,
            metrics=AgentLoopMetrics(generate_sequences=gen_s, tool_calls=env_s),
            extra_fields={
                "stepgym_steps": steps,
                "stepgym_episode": episode,
                "stepgym_trajectory": traj,  # AHEAD / StepOPSD rebuild their teacher contexts from it
                "turn_scores": [float(s["reward"]) for s in steps],
                "tool_rewards": [],
            },
        )


# ---------------------------------------------------------------------------------------------------------------
# Advantage estimators
# ---------------------------------------------------------------------------------------------------------------
def step_batch_from_verl(
    token_level_rewards: Any,
    response_mask: Any,
    index: Sequence[Any],
    steps: Sequence[Sequence[Mapping[str, Any]]] | None = None,
    *,
    invalid_rule: str = "format_or_inadmissible",
) -> StepBatch:
    """The shapers' :class:`StepBatch` for a verl batch.

    ``token_level_rewards`` and ``response_mask`` are verl's (B, L) tensors, ``index`` the group uid per row.
    Steps are the agent loop's spans (``steps[b][t]["start"/"stop"]``) when ``steps`` is given, else the runs of
    1s in ``response_mask``. A step's reward is the sum of ``token_level_rewards`` from its first token to the next
    step's first token (the last step: to the end), so whatever verl put in the rewards (the episode return at the
    last token, a KL penalty) is credited to the step it follows. With ``steps`` (the agent loop's
    ``stepgym_steps``): valid = format-valid (and admissible, ``invalid_rule="format_or_inadmissible"``), GiGPO's
    anchor = the state key the action was taken in, ProAS labels when every step has them.
    """
    if invalid_rule not in INVALID_RULES:
        raise ValueError(f"invalid_rule must be one of {INVALID_RULES}, got {invalid_rule!r}")
    rewards_bl = _numpy(token_level_rewards, np.float64)
    mask_bl = _numpy(response_mask, np.int64)
    if rewards_bl.shape != mask_bl.shape or rewards_bl.ndim != 2:
        raise ValueError(
            f"token_level_rewards {rewards_bl.shape} and response_mask {mask_bl.shape} must be (B, L)"
        )
    b, length = mask_bl.shape
    if len(index) != b:
        raise StepRecordError(f"index has {len(index)} entries for {b} rows")
    if steps is not None and len(steps) != b:
        raise StepRecordError(f"steps has {len(steps)} rows for {b} rows")
    # an aborted episode (docs/failures.md): its records say so; its rows get advantage 0, out of every statistic
    cut = [bool(steps is not None and steps[i] and any(r.get("aborted") for r in steps[i])) for i in range(b)]
    spans, rewards, records = [], [], []
    for i in range(b):
        if steps is not None and steps[i] is None:
            raise StepRecordError(f"row {i} has no stepgym_steps: was it played by StepGymAgentLoop?")
        recs = list(steps[i]) if steps is not None else []
        row_spans = [(int(r["start"]), int(r["stop"])) for r in recs] if recs else mask_runs(mask_bl[i])
        if recs:  # steps the response_length cut off entirely hold no token; they take no part
            keep = [t for t, (s, e) in enumerate(row_spans) if e > s]
            recs = [recs[t] for t in keep]
            row_spans = [row_spans[t] for t in keep]
        if not row_spans and not cut[i]:
            raise StepRecordError(f"row {i} has no response token (no step to credit)")
        starts = [s for s, _ in row_spans] + [length]
        rewards.append(
            [
                float(rewards_bl[i, (0 if t == 0 else s) : starts[t + 1]].sum())
                for t, (s, _) in enumerate(row_spans)
            ]
        )
        spans.append(row_spans)
        records.append(recs)
    return build_step_batch(
        spans,
        index,
        length,
        records=records if steps is not None else None,
        rewards=rewards,
        invalid_rule=invalid_rule,
        aborted=cut,
    )


def _numpy(x: Any, dtype: Any) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().numpy()
    return np.asarray(x, dtype=dtype)


def _needs_annotations(config: ShapeConfig) -> list[str]:
    """What the configured methods read from the agent loop's step records, from what each registered (``needs``)."""
    names = [config.base, *(["proas"] if config.proas else [])]
    need = [f"{NEEDS[n]} ({name})" for name in names for n in sorted(get_shaper(name).needs)]
    if config.invalid_penalty:
        need.append("format-valid / admissible flags (the invalid-action penalty)")
    return need


def _shape(
    config: ShapeConfig,
    token_level_rewards: Any,
    response_mask: Any,
    index: Sequence[Any] | None,
    steps: Sequence[Any] | None,
    *,
    update_index: int = 0,
    delta: Any = None,
    delta_mask: Any = None,
    target: TokenLayout | None = None,
    invalid_rule: str = "format_or_inadmissible",
) -> tuple[Any, Any]:
    if index is None:
        raise ValueError("stepgym's estimators need verl's group index (non_tensor_batch['uid'])")
    if steps is None and _needs_annotations(config):
        raise ValueError(
            f"this estimator needs {', '.join(_needs_annotations(config))} from the agent loop's extra field "
            "'stepgym_steps'; verl 0.9's compute_advantage passes custom estimators only token_level_rewards, "
            "response_mask, index and config. Call stepgym.integrations.verl.compute_step_advantage(data, ...) "
            "from your trainer, or pass non_tensor_batch=data.non_tensor_batch"
        )
    if config.token_reweight is not None and delta is None:
        raise ValueError(
            f"token_reweight={config.token_reweight!r} needs teacher log-prob gaps (delta=, (B, L)); verl does not "
            "pass a teacher to advantage estimators"
        )
    batch = step_batch_from_verl(
        token_level_rewards, response_mask, list(index), steps, invalid_rule=invalid_rule
    )
    if delta is not None:
        batch.delta = _numpy(delta, np.float64)
        batch.delta_mask = None if delta_mask is None else _numpy(delta_mask, bool)
    if config.token_reweight == "stepopsd":
        batch.target = target if target is not None else batch.layout
    shaped = shape_advantages(batch, config, update_index=update_index)
    mask = (
        response_mask
        if isinstance(response_mask, torch.Tensor)
        else torch.as_tensor(np.asarray(response_mask))
    )
    adv = torch.as_tensor(shaped.token_advantages, dtype=torch.float32, device=mask.device) * (mask > 0)
    return adv, adv.clone()


def compute_step_advantage(
    data: Any,
    shape_config: ShapeConfig | str = "gigpo-alfworld",
    *,
    update_index: int = 0,
    delta: Any = None,
    delta_mask: Any = None,
    target: TokenLayout | None = None,
    invalid_rule: str = "format_or_inadmissible",
) -> Any:
    """stepgym's per-token advantages for a verl ``DataProto``, written into ``data.batch["advantages"]`` and
    ``["returns"]`` (verl's convention) and returned.

    Reads ``token_level_rewards`` (or ``token_level_scores``), ``response_mask``, ``non_tensor_batch["uid"]`` and,
    when present, the agent loop's ``non_tensor_batch["stepgym_steps"]`` (needed for GiGPO and ProAS).
    ``delta``: the teacher − student log-prob gap (B, L) for AHEAD / StepOPSD presets (``delta_mask``: the tokens
    that have one; ``target``: StepOPSD's target spans, default every reply token). ``update_index``: completed
    policy updates (verl's ``global_steps - 1``).
    """
    cfg = ShapeConfig.from_preset(shape_config) if isinstance(shape_config, str) else shape_config
    keys = data.batch.keys()
    rewards = data.batch["token_level_rewards" if "token_level_rewards" in keys else "token_level_scores"]
    steps = data.non_tensor_batch.get("stepgym_steps")
    adv, ret = _shape(
        cfg,
        rewards,
        data.batch["response_mask"],
        data.non_tensor_batch.get("uid"),
        None if steps is None else list(steps),
        update_index=update_index,
        delta=delta,
        delta_mask=delta_mask,
        target=target,
        invalid_rule=invalid_rule,
    )
    data.batch["advantages"] = adv
    data.batch["returns"] = ret
    if steps is not None:  # an aborted episode's rows leave verl's loss (docs/failures.md)
        cut = [bool(r) and any(x.get("aborted") for x in r) for r in steps]
        if any(cut):
            keep = torch.as_tensor([not c for c in cut], device=data.batch["response_mask"].device)
            data.batch["response_mask"] = data.batch["response_mask"] * keep[:, None].to(
                data.batch["response_mask"].dtype
            )
    return data


def _estimator(preset: str) -> Callable[..., tuple[Any, Any]]:
    shape_config = ShapeConfig.from_preset(preset) if preset in SHAPER_PRESETS else ShapeConfig(base=preset)

    def estimator(
        token_level_rewards: Any,
        response_mask: Any,
        index: Sequence[Any] | None = None,
        config: Any = None,
        non_tensor_batch: Mapping[str, Any] | None = None,
        **_: Any,
    ) -> tuple[Any, Any]:
        steps = None if non_tensor_batch is None else non_tensor_batch.get("stepgym_steps")
        return _shape(
            shape_config,
            token_level_rewards,
            response_mask,
            index,
            None if steps is None else list(steps),
        )

    estimator.__name__ = f"stepgym_{preset.replace('-', '_')}_advantage"
    estimator.__doc__ = f"verl advantage estimator: stepgym's shape_advantages with the {preset!r} preset."
    return estimator


def estimator_presets() -> dict[str, str]:
    """verl estimator name → the stepgym preset it runs, derived from the shaper registry: every registered base
    method, and ProAS, ``m`` becomes ``stepgym_m`` running the first preset of ``m``, ``m-alfworld``, ``m-gigpo``
    that exists (a base of your own with no preset runs ``ShapeConfig(base=m)``). Token stages (AHEAD, StepOPSD)
    need a teacher, which verl does not hand to estimators, and are not among them."""
    out = {}
    for name in [*available_shapers("base"), "proas"]:
        preset = next((p for p in (name, f"{name}-alfworld", f"{name}-gigpo") if p in SHAPER_PRESETS), name)
        out[f"stepgym_{name}"] = preset
    return out


#: verl estimator name → stepgym preset (:func:`estimator_presets`). Set ``algorithm.adv_estimator`` to the name.
ESTIMATORS: dict[str, str] = estimator_presets()

for _name, _preset in ESTIMATORS.items():
    register_adv_est(_name)(_estimator(_preset))
