"""ALFWorld speed and memory: stepgym's native engine, stepgym's TextWorld engine and raw upstream, in one run.

All three play the same games (every ``len/--games``-th game of the split) and the same actions (each game's
stored walkthrough). Raw upstream = ``textworld.gym.register_game`` + ``textworld.gym.make`` with ALFWorld's
``AlfredDemangler`` and ``AlfredInfos`` wrappers and ``EnvInfos(won, admissible_commands, facts)``, the way
ALFWorld's own ``AlfredTWEnv`` plays a game (it has no per-step annotations or expert).

Each of the three is measured in a fresh process of its own, one after the other, so that neither the
objects one of them keeps alive (TextWorld's games are large) nor its garbage collections slow another down.
Each process first plays one game outside the sample (its walkthrough), so that imports and one-time set-up
are not charged to the first measured game.

Measured per game:
* new-game reset: raw register+make+reset vs stepgym ``reset(options={"task_id": ...})`` on a game that env has
  not loaded yet. For the native engine that game file was never loaded before in the process, so everything
  parsed from *it* is parsed in the timed reset; what is shared by all games is parsed once per process and
  reused (the PDDL domain, identical in every game; the grammar's action blocks, every grammar rule and string,
  keyed by their text, while the rule block holding the game's own task is decoded in each reset; the join plans
  of the domain's actions and their generated code), as are Python's imports;
* re-reset: resetting the same, already loaded game again (what a GRPO group does G times per task);
* annotated step: mean seconds per walkthrough step of ``StepGym/ALFWorld-v0`` with all annotations and the
  expert's next action (raw: a plain upstream step). For the native engine twice: the first play of the game
  (every state new) and a second play (states seen before, answered from its per-state cache);
* the engine's own step (``env.engine.step``: no annotations, no expert), first play;
* memory per env copy: resident memory added per env (4 envs in a fresh process, each reset on the same game).

Run: ``STEPGYM_DATA=../shared/data python benchmarks/alfworld_bench.py --games 20``
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import platform
import statistics
import time

import stepgym  # noqa: F401 - registers the envs

ENGINES = ("textworld", "native")
KINDS = ("raw", *ENGINES)


def raw_env(game_file: str, facts: bool = True):
    import textworld
    import textworld.gym
    from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos

    infos = textworld.EnvInfos(won=True, admissible_commands=True, facts=facts, extras=["gamefile"])
    env_id = textworld.gym.register_game(
        game_file, infos, max_episode_steps=50, wrappers=[AlfredDemangler(), AlfredInfos]
    )
    return textworld.gym.make(env_id)


def _make(split: str, engine: str, cache: int):
    from stepgym.envs.alfworld.env import ALFWorldEnv

    return ALFWorldEnv(split=split, engine=engine, game_cache_size=cache)


def _timed_steps(env, actions: list[str]) -> float:
    t = time.perf_counter()
    for a in actions:
        env.step(a)
    return (time.perf_counter() - t) / len(actions)


def _games(split: str, n_games: int):
    from stepgym.envs.alfworld.games import list_games

    games = list_games(split)
    return games[:: max(1, len(games) // n_games)][:n_games]


def _walkthrough(game) -> list[str]:
    with open(game.game_file, encoding="utf-8") as f:
        return list(json.load(f)["walkthrough"])


def bench(kind: str, split: str, n_games: int, repeats: int) -> dict[str, list[float]]:
    """The measures of one of ``KINDS`` on the bench's games (run in a process of its own)."""
    out: dict[str, list[float]] = {}

    def add(key: str, value: float) -> None:
        out.setdefault(f"{kind}_{key}", []).append(value)

    games = _games(split, n_games)
    env = None if kind == "raw" else _make(split, kind, cache=n_games + 1)
    # warm-up, the same for every kind: one game outside the sample is played first, so that imports and what
    # is shared by all games are in place before the first measured game
    from stepgym.envs.alfworld.games import list_games

    warm = next(g for g in reversed(list_games(split)) if g not in games)
    if env is None:
        raw = raw_env(str(warm.game_file))
        raw.reset()
        for a in _walkthrough(warm):
            raw.step(a)
        raw.close()
    else:
        env.reset(options={"task_id": warm.task_id})
        for a in env.walkthrough:
            env.step(a)
    for g in games:
        walkthrough = _walkthrough(g)
        if env is None:
            t = time.perf_counter()
            raw = raw_env(str(g.game_file))
            raw.reset()
            add("cold", time.perf_counter() - t)
            for _ in range(repeats):
                t = time.perf_counter()
                raw.reset()
                add("rereset", time.perf_counter() - t)
            raw.reset()
            add("step", _timed_steps(raw, walkthrough))
            raw.close()
            continue
        t = time.perf_counter()
        env.reset(options={"task_id": g.task_id})
        add("cold", time.perf_counter() - t)
        for _ in range(repeats):
            t = time.perf_counter()
            env.reset(options={"task_id": g.task_id})
            add("rereset", time.perf_counter() - t)
        if kind == "native":
            env.engine.clear_state_cache()  # every state new on the first play
        env.reset(options={"task_id": g.task_id})
        add("step", _timed_steps(env, walkthrough))
        if kind == "native":
            env.reset(options={"task_id": g.task_id})
            add("step_seen", _timed_steps(env, walkthrough))
        env.engine.load(g.game_file)  # the engine alone: no annotations, no expert
        if kind == "native":
            env.engine.clear_state_cache()
        env.engine.reset()
        t = time.perf_counter()
        for a in walkthrough:
            env.engine.step(a)
        add("engine_step", (time.perf_counter() - t) / len(walkthrough))
    return out


def _bench_child(kind: str, split: str, n_games: int, repeats: int, queue: mp.Queue) -> None:
    queue.put(bench(kind, split, n_games, repeats))


def bench_all(split: str, n_games: int, repeats: int) -> dict[str, list[float]]:
    """Every kind in a fresh process of its own, one after the other."""
    ctx = mp.get_context("spawn")
    out: dict[str, list[float]] = {}
    for kind in KINDS:
        queue = ctx.Queue()
        proc = ctx.Process(target=_bench_child, args=(kind, split, n_games, repeats, queue))
        proc.start()
        out.update(queue.get(timeout=3600))
        proc.join()
    return out


def _rss() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def _memory_child(kind: str, split: str, copies: int, queue: mp.Queue) -> None:
    import gc

    envs = []
    if kind == "raw":
        from stepgym.envs.alfworld.games import list_games

        game = list_games(split)[0]
        first = raw_env(str(game.game_file))
        first.reset()
        gc.collect()
        base = _rss()
        for _ in range(copies):
            e = raw_env(str(game.game_file))
            e.reset()
            envs.append(e)
    else:
        first = _make(split, kind, cache=1)
        first.reset(options={"task_index": 0})
        gc.collect()
        base = _rss()
        for _ in range(copies):
            e = _make(split, kind, cache=1)
            e.reset(options={"task_index": 0})
            envs.append(e)
    gc.collect()
    queue.put((_rss() - base) / copies)


def memory_per_copy(kind: str, split: str, copies: int = 4) -> float:
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_memory_child, args=(kind, split, copies, queue))
    proc.start()
    value = queue.get(timeout=600)
    proc.join()
    return value


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--split", default="valid_seen")
    ap.add_argument("--games", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=3, help="re-resets per game")
    args = ap.parse_args()
    r = bench_all(args.split, args.games, args.repeats)
    med = {k: statistics.median(v) for k, v in r.items()}
    mem = {k: memory_per_copy(k, args.split) / 2**20 for k in ("raw", *ENGINES)}
    print(
        f"# ALFWorld speed, {args.split}, {args.games} games, {time.strftime('%Y-%m-%d')}, "
        f"{platform.processor() or platform.machine()}, Python {platform.python_version()}"
    )
    print(
        "| measure | raw upstream | stepgym, TextWorld engine | stepgym, native engine | native vs TextWorld engine |"
    )
    print("|---|---|---|---|---|")

    def row(label: str, key: str, scale: float, fmt: str) -> None:
        raw = med.get(f"raw_{key}")
        tw, nat = med[f"textworld_{key}"], med[f"native_{key}"]
        raw_s = format(raw * scale, fmt) if raw is not None else "n/a"
        print(f"| {label} | {raw_s} | {tw * scale:{fmt}} | {nat * scale:{fmt}} | {tw / nat:.0f}x |")

    row("new-game reset (median ms)", "cold", 1e3, ".2f")
    row("re-reset of a loaded game (median ms)", "rereset", 1e3, ".3f")
    row("annotated step with expert, first play (median ms)", "step", 1e3, ".3f")
    row("engine step alone, no annotations or expert, first play (median ms)", "engine_step", 1e3, ".3f")
    seen = med["native_step_seen"]
    print(
        f"| annotated step with expert, states seen before (median ms) | | | {seen * 1e3:.3f} | "
        f"{med['textworld_step'] / seen:.0f}x |"
    )
    print(
        f"| annotated steps/s, first play | {1 / med['raw_step']:.0f} (no annotations) | "
        f"{1 / med['textworld_step']:.0f} | {1 / med['native_step']:.0f} | |"
    )
    print(f"| annotated steps/s, states seen before | | | {1 / seen:.0f} | |")
    print(
        f"| memory per env copy (MiB) | {mem['raw']:.1f} | {mem['textworld']:.1f} | {mem['native']:.1f} | "
        f"{mem['textworld'] / max(mem['native'], 1e-9):.1f}x less |"
    )


if __name__ == "__main__":
    main()
