"""The learning study's second learner: the bundled trainer's own token-level policy
(:class:`stepgym.trainers.grpo.GRPOTrainer`: generation, per-token advantages, the PPO loss) instead of the linear
learner, in cells of the same schema (``learner: "llm"``), resumable.

Envs (:data:`LLM_ENVS`): ``CreditFamily`` (``StepGym/CreditFamily-v0``, trained on ``train``, evaluated on
``valid``, with the ``credit-*`` presets' tiny-model settings: prompt history, format warm-up, optimiser) and the
study's real envs (:data:`learning_study.ENVS` rows, with their trainer presets, ALFWorld's where an env has
none). Per method the shaper is :func:`learning_study.shaper_config`'s (the same configs as the linear learner's),
the ``-obs`` methods set ``env.anchor="observation"``, the ceiling sets ``env.value_labels`` (ValueWrapper's true
gains). The budget is the study's: ``--iterations`` of ``--n-tasks`` × ``--group-size``, the env row's step limit,
held-out success (sampled, ``--eval-tasks`` tasks per split, the same tasks and random stream for every method of
a seed) at iteration 0 and every ``--eval-every`` iterations. AHEAD and StepOPSD use the trainer's real teacher.
``--model tiny`` (a random in-process Qwen2-style model) runs on a CPU; a real model needs a GPU. The format
warm-up imitates a uniformly random admissible policy unless ``--warmup-policy`` names a noisy expert (the
``BabyAI-RedBall`` cells: ``noisy-expert:0.75`` for 600 steps on 256 episodes, so the tiny model reads its
observation before RL starts).

    python benchmarks/learning_study_llm.py --envs CreditFamily --methods grpo gigpo graphgpo oracle \
        --seeds 10 --workers 2 --out runs/ls_llm          # cells appended to runs/ls_llm/llm_cells.jsonl
    python benchmarks/learning_study_llm.py --envs BabyAI-RedBall --methods grpo gigpo graphgpo oracle \
        --warmup-policy noisy-expert:0.75 --warmup-steps 600 --warmup-episodes 256 --seeds 10 --workers 2 \
        --out runs/ls_llm_redball
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing as mp
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import learning_study as ls

from stepgym.trainers.presets import TRAINER_PRESETS, get_preset

#: the token-level learner's envs: the study's (the credit-assignment toy ``CreditFamily``, where the tiny model
#: learns on a CPU, and the real envs)
LLM_ENVS: dict[str, ls.EnvRow] = ls.ENVS
#: the env-row fields an LLM cell reads (the linear learner's rate, features and warm start are not among them)
ROW_FIELDS = ("name", "env_id", "train_split", "held_out", "max_steps", "preset", "kwargs")
#: the tiny model's recipe on a real env (:func:`tiny_recipe`): part of those cells' keys
TINY_REAL_ENV_RECIPE = "<env>-cpu preset, row's env options, 200-step format warm-up"
#: the tiny model's reply budget on a real env where it is not the CPU preset's: Sokoban's 12 tokens fit its
#: warm-up reply (the tags and a one-token move) exactly; the study's TextCraft keeps the distractor recipes the
#: CPU preset drops, whose replies took up to 75 tokens. The first recipe capped every env at 12, which cut
#: BabyAI's and TextCraft's replies before the action closed (the trainer now warns of it)
TINY_RESPONSE_TOKENS = {"Sokoban": 12, "TextCraft": 96}
#: the run folder's cache of finished format warm-ups (``warmup.cache_dir``): the methods of a seed warm up once;
#: delete it after changing the warm-up's code (its fingerprint covers settings and inputs, not code)
WARMUP_CACHE = "warmup_cache"
#: the cell settings that shape an LLM cell's result (its key's fingerprint)
LLM_ARGS = (
    "iterations",
    "n_tasks",
    "group_size",
    "eval_every",
    "eval_tasks",
    "max_steps",
    "model",
    "invalid_penalty",
)
#: settings that shape the result only when set (0: the preset's): in a cell's key only then, so the cells run
#: before they existed keep their keys
#: their command-line flags: name, type (its empty value: the preset's) and help
OPTIONAL_FLAGS: tuple[tuple[str, type, str], ...] = (
    ("lr", float, "the policy's learning rate for every method (0: the preset's, 5e-4)"),
    ("kl_coef", float, "every method's KL penalty to the policy it starts from (after the format warm-up; 0: the "
                       "preset's, none)"),
    ("epochs", int, "passes over each iteration's batch (0: the preset's, 1)"),
    ("mini_batches", int, "policy updates per pass, each on its share of the batch (0: the preset's, 1)"),
    ("warmup_policy", str, "the policy the format warm-up imitates for every method: noisy-expert:P or expert "
                           "('': the preset's, a uniformly random admissible policy)"),
    ("warmup_steps", int, "the format warm-up's SFT steps (0: the preset's, 200)"),
    ("warmup_episodes", int, "episodes of the imitated policy the warm-up learns from (0: the preset's, 64)"),
)  # fmt: skip
OPTIONAL_ARGS = tuple(name for name, _, _ in OPTIONAL_FLAGS)


def is_tiny(model: str) -> bool:
    """Whether ``model`` names the in-process tiny model (``tiny`` or ``tiny:<size>``)."""
    return model == "tiny" or model.startswith("tiny:")


def tiny_recipe(env: ls.EnvRow, model: str) -> Any:
    """The tiny model's trainer config on a real env, ``None`` where it has none (CreditFamily has its ``credit-*``
    presets; an env without a tiny ``<env>-cpu`` recipe uses its GPU preset). It is the env's CPU recipe (the tiny
    model, one observation of history, its prompt budget) with the ``credit-*`` presets' format warm-up: 200 SFT
    steps on a uniformly random admissible policy, so the model starts at about the random policy's success. The
    recipe's own 10 steps are a smoke run's, and a tiny model without a warm-up writes no valid reply at all (the
    first Sokoban trial: format-valid replies 0.00, no win in 64 rollouts)."""
    name = f"{env.preset}-cpu"
    if not is_tiny(model) or env.preset == "credit" or name not in TRAINER_PRESETS:
        return None
    cpu = get_preset(name)
    if cpu.model.name != "tiny":  # alfworld-cpu is SmolLM2's recipe
        return None
    return replace(cpu, warmup=get_preset("credit-grpo").warmup, eval=replace(cpu.eval, max_steps=0))


def response_tokens(env: ls.EnvRow, recipe: Any) -> int:
    """The tiny model's reply budget on ``env`` (its CPU recipe ``recipe``): :data:`TINY_RESPONSE_TOKENS`, else
    the recipe's."""
    return TINY_RESPONSE_TOKENS.get(env.name, recipe.rollout.max_response_tokens)


def _given(args: argparse.Namespace, name: str, preset: Any) -> Any:
    """An optional setting (:data:`OPTIONAL_ARGS`, ``lr``): the command line's value when set, else the preset's.
    Records from before an option have no such field in their args (the design-time script rebuilds cells from
    records), which reads as unset."""
    return getattr(args, name, 0) or preset


def llm_config(args: argparse.Namespace, env: ls.EnvRow, method: str, seed: int, out: Path) -> Any:
    """The trainer config of one cell: the env's preset (the ``credit-*`` one on CreditFamily), the method's
    shaper, the study's budget, the held-out splits."""
    base = method.removesuffix("-obs")
    tiny = is_tiny(args.model)
    if env.preset == "credit":
        cfg = get_preset("credit-grpo")
        kwargs = json.dumps(dict(env.kwargs))
    elif (cpu := tiny_recipe(env, args.model)) is not None:
        cfg = cpu
        kwargs = json.dumps(dict(env.kwargs))
    else:
        name = f"{env.preset}-{'grpo' if base in ('drgrpo', ls.CEILING) else base}"
        cfg = get_preset(name if name in TRAINER_PRESETS else f"alfworld-{name.split('-', 1)[1]}")
        kwargs = json.dumps(dict(env.kwargs)) if env.kwargs else cfg.env.kwargs
    shaper, _, _ = ls.shaper_config(env, method)
    shaper = replace(shaper, invalid_penalty=args.invalid_penalty)
    return replace(
        cfg,
        optim=replace(
            cfg.optim,
            lr=_given(args, "lr", cfg.optim.lr),
            epochs=_given(args, "epochs", cfg.optim.epochs),
            mini_batches=_given(args, "mini_batches", cfg.optim.mini_batches),
        ),
        loss=replace(cfg.loss, kl_coef=_given(args, "kl_coef", cfg.loss.kl_coef)),
        run=replace(
            cfg.run, output_dir=str(out), iterations=args.iterations, seed=seed, save_every=0, progress=False,
            tensorboard=False, report=False, threads=1 if tiny else cfg.run.threads,
        ),
        env=replace(
            cfg.env, id=env.env_id, kwargs=kwargs, train_split=env.train_split, eval_splits=env.held_out,
            max_steps=args.max_steps or env.max_steps,
            anchor="observation" if method.endswith("-obs") else "state_key", value_labels=method == ls.CEILING,
        ),
        model=replace(cfg.model, name=args.model, **({"tokenizer_corpus_episodes": 8} if tiny else {})),
        # the cells of one seed share their format warm-up (the same initial model and stream; bit for bit)
        warmup=replace(
            cfg.warmup,
            cache_dir=str(out.parent / WARMUP_CACHE),
            policy=_given(args, "warmup_policy", cfg.warmup.policy),
            steps=_given(args, "warmup_steps", cfg.warmup.steps),
            episodes=_given(args, "warmup_episodes", cfg.warmup.episodes),
        ),
        rollout=replace(
            cfg.rollout, n_tasks=args.n_tasks, group_size=args.group_size,
            **(
                {"max_prompt_tokens": 512, "max_response_tokens": response_tokens(env, cfg)}
                if tiny and env.preset != "credit"
                else {}
            ),
        ),
        shaper=shaper,
        eval=replace(cfg.eval, limit=args.eval_tasks, greedy=False, parallel=max(1, args.eval_tasks)),
    )  # fmt: skip


def cell_key(cell: dict) -> str:
    """llm/env/method/seed plus a fingerprint of the env row and the settings that shape the result."""
    row = LLM_ENVS[cell["env"]]
    what = {"env": {k: getattr(row, k) for k in ROW_FIELDS}, **{k: cell["args"].get(k) for k in LLM_ARGS}}
    what.update({k: cell["args"][k] for k in OPTIONAL_ARGS if cell["args"].get(k)})
    if (recipe := tiny_recipe(row, str(cell["args"].get("model")))) is not None:
        # cells of the first recipe (no format warm-up) never count as these
        what["recipe"] = TINY_REAL_ENV_RECIPE
        if (budget := response_tokens(row, recipe)) != 12:  # nor cells cut at 12 tokens (keys from before)
            what["response_tokens"] = budget
    fp = hashlib.sha1(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()[:10]
    return f"llm/{cell['env']}/{cell['method']}/{cell['seed']}/{fp}"


def cell_folder(cell: dict, out: Path) -> Path:
    """The trainer's output folder of ``cell`` under ``out``: env, method, seed and the key's fingerprint, so that
    runs of other settings on one ``--out`` (at once or one after another) never write into one folder."""
    return out / "_".join([cell["env"], cell["method"], str(cell["seed"]), cell_key(cell).rsplit("/", 1)[1]])


def plan(args: argparse.Namespace) -> list[dict]:
    a = {k: getattr(args, k) for k in LLM_ARGS + OPTIONAL_ARGS}
    return [
        {"env": env, "method": m, "seed": seed, "args": a}
        for seed in range(args.first_seed, args.first_seed + args.seeds)
        for env in args.envs
        for m in args.methods
    ]


def run_llm_cell(cell: dict, out: Path) -> dict[str, Any]:
    """Train one (env, method, seed) cell with the bundled trainer; its record (the linear cells' schema)."""
    from stepgym.data import sample_tasks
    from stepgym.trainers.grpo import GRPOTrainer

    args = argparse.Namespace(**cell["args"])
    env, method, seed = LLM_ENVS[cell["env"]], cell["method"], cell["seed"]
    t0 = time.perf_counter()
    cfg = llm_config(args, env, method, seed, cell_folder(cell, out))
    tr = GRPOTrainer(cfg)
    eval_its, held, train_curve = [0], [], []
    try:
        held.append({r["split"]: float(r["success"]) for r in tr.evaluate()})
        last: dict[str, Any] = {}
        for it in range(args.iterations):
            last = tr.step()
            train_curve.append(float(last.get("rollout/success", float("nan"))))
            if (it + 1) % args.eval_every == 0 or it + 1 == args.iterations:
                eval_its.append(it + 1)
                held.append({r["split"]: float(r["success"]) for r in tr.evaluate()})
    finally:
        tr.close()
    held_tasks = {}
    for split in env.held_out:
        e = ls.make_env(env, split) if env.name in ls.ENVS else None
        ids = list(e.task_ids) if e is not None else list(_credit_ids(cfg, split))
        held_tasks[split] = sample_tasks(ids, args.eval_tasks, seed=seed) if args.eval_tasks else ids
    return {
        "key": cell_key(cell),
        "args": dict(cell["args"]),
        "env": env.name,
        "method": method,
        "seed": seed,
        "learner": "llm",
        "model": args.model,
        "eval_its": eval_its,
        "held": held,
        "train_curve": train_curve,
        "held_tasks": held_tasks,
        "last_step": {k: v for k, v in last.items() if isinstance(v, int | float)},
        "seconds": time.perf_counter() - t0,
    }


#: the committed probes of the token-level learner on a real env: GRPO on the selection seed 100, one setting
#: changed per cell (docs/learning_study.md's probe table, :func:`probe_markdown`)
PROBES = tuple(
    Path(__file__).resolve().parent / "results" / f"learning_study_llm_{name}_cells.jsonl.gz"
    for name in (
        "sokoban_lr_2026-12-07",
        "babyai_probe_2026-12-07",
        "textcraft_probe_2026-12-07",
        # (2026-12-08) a noisy-expert warm-up on GoToLocal
        "babyai_warmup_probe_2026-12-08",
    )
)


def probe_flags(args: dict[str, Any]) -> str:
    """The command-line flags by which a cell's settings differ from the study's (its optional settings and the
    invalid-action penalty), or "(the study's)"."""
    set_ = {k: args[k] for k in (*OPTIONAL_ARGS, "invalid_penalty") if args.get(k)}
    return (
        " ".join(
            f"--{k.replace('_', '-')} {v if isinstance(v, str) else format(v, 'g')}" for k, v in set_.items()
        )
        or "(the study's)"
    )


def probe_markdown(paths: tuple[Path, ...] = PROBES) -> str:
    """The probe table: per cell, env, method and seed, the flags it ran with, held-out success at each evaluation,
    the share of format-valid replies in its last iteration, and its wall time."""
    lines = [
        "| env | method, seed | flags | held-out success at iterations | format-valid at the end | seconds |",
        "|---|---|---|---|---|---|",
    ]
    for path in paths:
        for r in ls.cs.load_cells(path):
            curve = ", ".join(f"{v:.3f}" for v in ls.held_curve(r))
            its = ", ".join(str(i) for i in r["eval_its"])
            valid = r["last_step"].get("rollout/format_valid_ratio", float("nan"))
            flags = probe_flags(r["args"])
            flags = flags if flags.startswith("(") else f"`{flags}`"
            lines.append(
                f"| {r['env']} | {r['method']}, {r['seed']} | {flags} | {curve} ({its}) "
                f"| {valid:.2f} | {r['seconds']:.0f} |"
            )
    return "\n".join(lines)


def _credit_ids(cfg: Any, split: str) -> tuple[str, ...]:
    import gymnasium as gym

    return gym.make(cfg.env.id, **cfg.env.make_kwargs(split)).unwrapped.task_ids


def sharing_order(cells: list[dict], workers: int) -> list[dict]:
    """``cells`` in the order that lets the methods of a seed share its format warm-up (:data:`WARMUP_CACHE`)
    across ``workers`` processes: seeds in blocks of ``workers``, each block method by method, so that the workers
    start on different seeds and each later cell of a block finds its seed's warm-up done."""
    envs = list(dict.fromkeys(c["env"] for c in cells))
    methods = list(dict.fromkeys(c["method"] for c in cells))
    rank = {s: i for i, s in enumerate(sorted({c["seed"] for c in cells}))}  # blocks of the seeds present
    w = max(1, workers)
    return sorted(
        cells,
        key=lambda c: (rank[c["seed"]] // w, envs.index(c["env"]), methods.index(c["method"]), c["seed"]),
    )


def run_llm(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every cell of ``args``'s plan not yet in ``<out>/llm_cells.jsonl`` (resumable: a finished cell is skipped,
    every cell written once); returns the records run now."""
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "llm_cells.jsonl"
    done = {r["key"] for r in ls.cs.load_cells(path)}
    todo = sharing_order([c for c in plan(args) if cell_key(c) not in done], args.workers)
    print(f"# learning study, llm learner: {len(done)} cells done, {len(todo)} to run", flush=True)
    records = []
    ctx = mp.get_context("spawn")
    with ctx.Pool(args.workers) if args.workers > 1 and len(todo) > 1 else ls.cs._Serial() as pool:
        for r in pool.imap_unordered(_run_one, [(cell, out / "llm") for cell in todo]):
            written = ls.append_once(path, r)
            records.append(r)
            y = ls.held_curve(r)
            print(
                f"{r['env']} {r['method']} seed {r['seed']}: held-out {y[0]:.2f} → {y[-1]:.2f} ({r['seconds']:.0f}s)"
                + ("" if written else " (already written)"),
                flush=True,
            )
    return records


def _run_one(job: tuple[dict, Path]) -> dict[str, Any]:
    return run_llm_cell(*job)


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--envs", nargs="+", default=["CreditFamily"], choices=list(LLM_ENVS))
    p.add_argument(
        "--methods", nargs="+", default=["grpo", "gigpo", "graphgpo", ls.CEILING], choices=list(ls.METHODS)
    )
    p.add_argument("--seeds", type=int, default=10)
    p.add_argument("--first-seed", type=int, default=0)
    p.add_argument("--iterations", type=int, default=20)
    p.add_argument("--n-tasks", type=int, default=4)
    p.add_argument("--group-size", type=int, default=8)
    p.add_argument("--eval-every", type=int, default=5)
    p.add_argument("--eval-tasks", type=int, default=40)
    p.add_argument("--max-steps", type=int, default=0, help="step limit (0: the env row's)")
    p.add_argument(
        "--invalid-penalty",
        type=float,
        default=0.0,
        help="every method's invalid-action penalty (0: none; with the presets' 0.1 the tiny model collapses onto "
        "a harmless distractor on CreditFamily, docs/learning_study.md)",
    )
    for name, kind, what in OPTIONAL_FLAGS:
        p.add_argument(f"--{name.replace('_', '-')}", type=kind, default=kind(), help=what)
    p.add_argument("--model", default="tiny", help="model name or folder ('tiny': in-process, CPU)")
    p.add_argument(
        "--workers", type=int, default=1, help="cells run in this many processes (one thread each)"
    )
    p.add_argument("--out", default="runs/learning_study_llm")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    run_llm(parse(argv))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
