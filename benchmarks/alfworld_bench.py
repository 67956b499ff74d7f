"""ALFWorld speed: stepgym's env against the raw upstream path, on the same games, in the same run.

Raw upstream = ``textworld.gym.register_game`` + ``textworld.gym.make`` with ALFWorld's ``AlfredDemangler`` and
``AlfredInfos`` wrappers and ``EnvInfos(won, admissible_commands, facts)`` (facts are what stepgym's symbolic
state needs), the way ALFWorld's own ``AlfredTWEnv`` plays a game. Both replay each game's stored walkthrough.

Measured per game:
* cold reset: raw register+make+reset vs stepgym reset(options={"task_id": ...}) on a game not loaded yet;
* re-reset: resetting the same, already loaded game again (what a GRPO group does G times per task);
* step: mean seconds per walkthrough step (stepgym with and without the expert's per-step next action); raw is
  also timed without ``facts`` (the lean upstream setting, which cannot give a symbolic state).

Run: ``STEPGYM_DATA=../shared/data python benchmarks/alfworld_bench.py --games 20``
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import gymnasium as gym

import stepgym  # noqa: F401 - registers the envs


def raw_env(game_file: str, facts: bool = True):
    import textworld
    import textworld.gym
    from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos

    infos = textworld.EnvInfos(won=True, admissible_commands=True, facts=facts, extras=["gamefile"])
    env_id = textworld.gym.register_game(
        game_file, infos, max_episode_steps=50, wrappers=[AlfredDemangler(), AlfredInfos]
    )
    return textworld.gym.make(env_id)


def bench(split: str, n_games: int, repeats: int) -> dict[str, list[float]]:
    env = gym.make("StepGym/ALFWorld-v0", split=split).unwrapped
    env_noexp = gym.make("StepGym/ALFWorld-v0", split=split, expert=False).unwrapped
    games = env.games[:: max(1, len(env.games) // n_games)][:n_games]
    out: dict[str, list[float]] = {
        k: []
        for k in (
            "raw_cold",
            "raw_rereset",
            "raw_step",
            "raw_step_nofacts",
            "sg_cold",
            "sg_rereset",
            "sg_step",
            "sg_step_noexpert",
        )
    }
    for g in games:
        t = time.perf_counter()
        raw = raw_env(str(g.game_file))
        raw.reset()
        out["raw_cold"].append(time.perf_counter() - t)
        for _ in range(repeats):
            t = time.perf_counter()
            raw.reset()
            out["raw_rereset"].append(time.perf_counter() - t)
        raw.reset()
        t = time.perf_counter()
        env.reset(options={"task_id": g.task_id})
        out["sg_cold"].append(time.perf_counter() - t)
        walkthrough = env.walkthrough
        for _ in range(repeats):
            t = time.perf_counter()
            env.reset(options={"task_id": g.task_id})
            out["sg_rereset"].append(time.perf_counter() - t)
        t = time.perf_counter()
        for a in walkthrough:
            raw.step(a)
        out["raw_step"].append((time.perf_counter() - t) / len(walkthrough))
        t = time.perf_counter()
        for a in walkthrough:
            env.step(a)
        out["sg_step"].append((time.perf_counter() - t) / len(walkthrough))
        env_noexp.reset(options={"task_id": g.task_id})
        t = time.perf_counter()
        for a in walkthrough:
            env_noexp.step(a)
        out["sg_step_noexpert"].append((time.perf_counter() - t) / len(walkthrough))
        raw.close()
        lean = raw_env(str(g.game_file), facts=False)
        lean.reset()
        t = time.perf_counter()
        for a in walkthrough:
            lean.step(a)
        out["raw_step_nofacts"].append((time.perf_counter() - t) / len(walkthrough))
        lean.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--split", default="valid_seen")
    ap.add_argument("--games", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=3, help="re-resets per game")
    args = ap.parse_args()
    r = bench(args.split, args.games, args.repeats)
    med = {k: statistics.median(v) for k, v in r.items()}
    print(
        f"# ALFWorld speed, {args.split}, {args.games} games, {time.strftime('%Y-%m-%d')}, "
        f"{platform.processor() or platform.machine()}, Python {platform.python_version()}"
    )
    print("| measure | raw upstream | stepgym | ratio (raw / stepgym) |")
    print("|---|---|---|---|")
    print(
        f"| reset, game not loaded yet (median s) | {med['raw_cold']:.3f} | {med['sg_cold']:.3f} | {med['raw_cold'] / med['sg_cold']:.1f}x |"
    )
    print(
        f"| re-reset of a loaded game (median s) | {med['raw_rereset']:.3f} | {med['sg_rereset']:.4f} | {med['raw_rereset'] / med['sg_rereset']:.1f}x |"
    )
    print(
        f"| step, with expert (median ms) | {1e3 * med['raw_step']:.1f} | {1e3 * med['sg_step']:.1f} | {med['raw_step'] / med['sg_step']:.2f}x |"
    )
    print(
        f"| step, no expert (median ms) | {1e3 * med['raw_step']:.1f} | {1e3 * med['sg_step_noexpert']:.1f} | {med['raw_step'] / med['sg_step_noexpert']:.2f}x |"
    )
    print(
        f"| step, raw without facts vs stepgym with expert (median ms) | {1e3 * med['raw_step_nofacts']:.1f} | {1e3 * med['sg_step']:.1f} | {med['raw_step_nofacts'] / med['sg_step']:.2f}x |"
    )
    print(f"| steps/s, with expert | {1 / med['raw_step']:.1f} | {1 / med['sg_step']:.1f} | |")


if __name__ == "__main__":
    main()
