"""Every shaper preset, and each method's options set away from its defaults, gives bit-for-bit the advantages it
gave before the options moved out of ``ShapeConfig`` into per-method dataclasses (issue: a shaper is one file).

``tests/data/shaper_outputs.json`` holds a digest of each case's outputs (step, base and token advantages and λ,
rounded to 12 decimals) computed by the code *before* the move, with the old flat fields; ``OLD_TO_NEW`` is the map
from those fields to the methods' options. Regenerate only for an intended change of the maths:
``python tests/test_shaper_outputs_unchanged.py --write`` (and say why in the commit).
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from stepgym.shapers import SHAPER_PRESETS, ShapeConfig, StepBatch, TokenLayout, shape_advantages

GOLDEN = Path(__file__).parent / "data" / "shaper_outputs.json"

#: (preset, overrides in the old flat fields) beyond the presets themselves: every method's options off default.
VARIANTS: list[tuple[str, dict]] = [
    ("gigpo-alfworld", {"step_weight": 0.5}),
    ("gigpo-alfworld", {"proas": True, "proas_target": "combined"}),
    ("gigpo-webshop", {"similarity": True, "similarity_tau": 0.8}),
    ("graphgpo-alfworld", {"graph_scale": 5.0, "normalize_distance": True, "episode_weight": 0.5}),
    ("graphgpo-alfworld", {"step_mode": "mean_norm", "similarity": True}),
    ("hgpo-alfworld", {"hgpo_history": 3, "hgpo_alpha": 0.5, "hgpo_base_group": True}),
    ("rewardflow-alfworld", {"rewardflow_rounds": 2, "rewardflow_alfworld_clean": True}),
    ("g2po-alfworld", {"g2po_success_reward": 1.0, "g2po_step_penalty": 0.3}),
    ("oracle", {"step_mode": "mean_norm"}),
    ("ahead", {"ahead_eps": 0.1, "ahead_lambda0": 0.9, "ahead_decay_steps": 3}),
    (
        "stepopsd-alfworld",
        {
            "opsd_alpha": 0.3,
            "opsd_weight_fn": "exp",
            "opsd_lambda0": 0.5,
            "opsd_decay_steps": 7,
            "step_norm_target": "modification",
            "step_norm_coef_clip": 1.5,
            "step_norm_eps": 1e-4,
        },
    ),
]

#: The old flat ``ShapeConfig`` field → (method, its option); method None: the config's base.
OLD_TO_NEW = {
    "gigpo_mode": ("gigpo", "mode"),
    "similarity": (None, "similarity"),
    "similarity_tau": (None, "similarity_tau"),
    "proas_target": ("proas", "target"),
    "ahead_eps": ("ahead", "eps"),
    "ahead_lambda0": ("ahead", "lambda0"),
    "ahead_decay_steps": ("ahead", "decay_steps"),
    "opsd_alpha": ("stepopsd", "alpha"),
    "opsd_weight_fn": ("stepopsd", "weight_fn"),
    "opsd_lambda0": ("stepopsd", "lambda0"),
    "opsd_decay_steps": ("stepopsd", "decay_steps"),
    "step_norm_target": ("equal_step_mean_abs", "target"),
    "step_norm_coef_clip": ("equal_step_mean_abs", "coef_clip"),
    "step_norm_eps": ("equal_step_mean_abs", "eps"),
    "step_mode": (None, "step_mode"),
    "episode_weight": ("graphgpo", "episode_weight"),
    "graph_scale": ("graphgpo", "scale"),
    "normalize_distance": ("graphgpo", "normalize_distance"),
    "hgpo_history": ("hgpo", "history"),
    "hgpo_alpha": ("hgpo", "alpha"),
    "hgpo_base_group": ("hgpo", "base_group"),
    "rewardflow_rounds": ("rewardflow", "rounds"),
    "rewardflow_alfworld_clean": ("rewardflow", "alfworld_clean"),
    "g2po_success_reward": ("g2po", "success_reward"),
    "g2po_step_penalty": ("g2po", "step_penalty"),
}


def random_batch(seed: int) -> StepBatch:
    """3 groups × 4 trajectories of 2–5 steps over 4 states, half of them won, with every optional field."""
    rng = np.random.default_rng(seed)
    cols: dict[str, list] = {
        k: [] for k in ["g", "tr", "rw", "va", "an", "nx", "rea", "pr", "dn", "si", "tg", "ac"]
    }
    for gi in range(3):
        for k in range(4):
            length = int(rng.integers(2, 6))
            states = [f"s{int(rng.integers(0, 4))}" for _ in range(length + 1)]
            win = rng.random() < 0.5
            for t in range(length):
                cols["g"].append(f"g{gi}")
                cols["tr"].append(f"g{gi}t{k}")
                cols["rw"].append((10.0 if win else 0.0) if t == length - 1 else 0.0)
                cols["va"].append(bool(rng.random() < 0.85))
                cols["an"].append(states[t])
                cols["nx"].append(states[t + 1])
                cols["rea"].append(bool(rng.random() < 0.7))
                cols["pr"].append(bool(rng.random() < 0.5))
                cols["dn"].append(t == length - 1 and win)
                cols["si"].append(t)
                cols["tg"].append(float(rng.integers(-1, 2)))
                cols["ac"].append(str(rng.choice(["look", "go to x", "take y", "inventory"])))
    rows, width = len(cols["g"]), 6
    mask = np.zeros((rows, width))
    for i in range(rows):
        mask[i, : int(rng.integers(1, width + 1))] = 1
    return StepBatch(
        group_ids=cols["g"], traj_ids=cols["tr"], rewards=cols["rw"], valid=cols["va"], anchor_obs=cols["an"],
        reasonable=cols["rea"], progress=cols["pr"], layout=TokenLayout.from_step_rows(mask),
        delta=rng.normal(size=(rows, width)), target=TokenLayout.from_step_rows(mask), next_obs=cols["nx"],
        dones=cols["dn"], step_index=cols["si"], true_gain=cols["tg"], actions=cols["ac"],
    )  # fmt: skip


def config(preset: str, old_fields: dict) -> ShapeConfig:
    cfg = ShapeConfig.from_preset(preset)
    shared, options = {}, {}
    for name, value in old_fields.items():
        if name in OLD_TO_NEW:
            method, option = OLD_TO_NEW[name]
            options.setdefault(method or cfg.base, {})[option] = value
        else:
            shared[name] = value
    cfg = cfg.replace(**shared) if shared else cfg
    return cfg.with_options(**options) if options else cfg


def digest(*arrays: np.ndarray | float | None) -> str:
    h = hashlib.sha256()
    for a in arrays:
        h.update(b"none" if a is None else np.round(np.asarray(a, dtype=np.float64), 12).tobytes())
    return h.hexdigest()[:24]


def cases() -> list[tuple[str, str, dict, int, int]]:
    out = []
    for i, (preset, old) in enumerate([(p, {}) for p in sorted(SHAPER_PRESETS)] + VARIANTS):
        for seed in range(3):
            for update in (0, 2):
                out.append((f"{i}:{preset}:{sorted(old.items())}:{seed}:{update}", preset, old, seed, update))
    return out


def outputs() -> dict[str, str]:
    result = {}
    for key, preset, old, seed, update in cases():
        r = shape_advantages(random_batch(seed), config(preset, old), update_index=update)
        result[key] = digest(r.step_advantages, r.base_advantages, r.token_advantages, r.lam)
    return result


def test_every_preset_and_option_gives_the_advantages_it_gave_before() -> None:
    golden = json.loads(GOLDEN.read_text())
    now = outputs()
    assert set(now) == set(golden), (
        "the cases changed: regenerate only for an intended change (module docstring)"
    )
    changed = [k for k in golden if golden[k] != now[k]]
    assert not changed, f"{len(changed)} of {len(golden)} cases changed, e.g. {changed[:3]}"


def test_an_option_that_changes_the_maths_changes_the_digest() -> None:
    """The digest can fail: a different option value gives a different digest."""
    batch = random_batch(0)
    a = shape_advantages(batch, config("graphgpo-alfworld", {}))
    b = shape_advantages(batch, config("graphgpo-alfworld", {"graph_scale": 5.0}))
    assert digest(a.step_advantages) != digest(b.step_advantages)


if __name__ == "__main__" and "--write" in sys.argv:
    GOLDEN.write_text(json.dumps(outputs(), indent=0, sort_keys=True) + "\n")
    print(f"wrote {GOLDEN}")
elif __name__ == "__main__":
    pytest.main([__file__, "-q"])
