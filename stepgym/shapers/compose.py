# Over 400 lines: the shapers' pipeline: its batch type, its configuration and the one entry point.
"""The one function a trainer calls: the §0 pipeline of docs/shapers.md, with forbidden combinations refused.

Order (docs/shapers.md §0; the only order that keeps every method's stated property):

    rewards → invalid-action penalty → base advantage (GRPO / Dr.GRPO / DAPO / GiGPO / graph bases §10–§14)
            → ProAS step multipliers → broadcast to tokens → AHEAD or StepOPSD token reweighting
            → StepOPSD step normalisation (equal_step_mean_abs)
    (then the clipped policy loss with the DAPO knobs: ``stepgym.trainers.losses``)

Each stage is looked up by name in :mod:`stepgym.shapers.registry` (one call signature per stage), so a
function registered for a stage replaces the built-in one and ``ShapeConfig`` accepts its name.

Usage::

    from stepgym.shapers import ShapeConfig, StepBatch, TokenLayout, shape_advantages

    cfg = ShapeConfig.from_preset("gigpo-alfworld", proas=True)
    batch = StepBatch(group_ids=..., traj_ids=..., rewards=..., valid=..., anchor_obs=...,
                      reasonable=..., progress=..., layout=TokenLayout.from_step_rows(response_mask))
    out = shape_advantages(batch, cfg, update_index=k)   # k = completed policy updates, 0 at the first
    out.token_advantages  # (B, L) float64, 0 on prompt / observation / padding tokens

Refused (``ValueError`` at config construction):
* StepOPSD ``equal_step_mean_abs`` on top of ProAS — it equalises per-step magnitudes and so undoes APR's
  deliberate front-loading of the penalty (docs/shapers.md §0, §8.28);
* ``equal_step_mean_abs`` on top of AHEAD — same reason: it would flatten the extra weight AHEAD puts on the error
  steps that received a corrective hint (stepgym's judgement; the §0 order only places it after StepOPSD);
* AHEAD and StepOPSD together — both are a clipped teacher-gap reweight of the same advantage; stacking applies
  the gap twice and voids both papers' multiplier bounds (the §0 order says "AHEAD *or* StepOPSD");
* ProAS on base="hgpo" — HGPO has no trajectory-level advantage for ProAS to branch on (docs/shapers.md §14.3);
  ProAS on GraphGPO, RewardFlow, G2PO and the oracle shapes their episode term, as on GiGPO.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, is_dataclass, replace
from typing import Any, Literal

import numpy as np

# Importing the method modules registers them. isort: off: the graph bases register in the docs' order (§10
# GraphGPO, §11 HGPO, §12 RewardFlow, §13 G2PO), which GRAPH_BASES and every table built from it keep.
# isort: off
from stepgym.shapers import graphgpo, hgpo, rewardflow, g2po  # noqa: F401
from stepgym.shapers import ahead, grpo, oracle, proas, stepopsd  # noqa: F401

# isort: on
from stepgym.shapers import aborts as _ab
from stepgym.shapers._common import (
    Groups,
    as_float_array,
    check_lambda,
    check_same_length,
    check_traj_in_one_group,
)
from stepgym.shapers.aborts import AbortCounts
from stepgym.shapers.gigpo import GiGPOTerms
from stepgym.shapers.registry import BaseAdvantage, check_name, get, needing
from stepgym.shapers.rewards import (
    DEFAULT_INVALID_PENALTY,
    RECIPE_INVALID_PENALTY,
    episode_scores,
)
from stepgym.shapers.tokens import TokenLayout

__all__ = [
    "GRAPH_BASES",
    "SHAPER_PRESETS",
    "ShapeConfig",
    "ShapedAdvantages",
    "StepBatch",
    "merge_options",
    "shape_advantages",
]

#: The built-in names of the stage each config field selects (any name registered for that stage is accepted).
Base = Literal["grpo", "drgrpo", "dapo", "gigpo", "graphgpo", "hgpo", "rewardflow", "g2po", "oracle"]
#: The built-in bases that credit a step from the states a group visited (a graph or a history tree over state
#: keys): those registered as needing the ``state_chain`` (``registry.needing("state_chain")`` also lists yours).
GRAPH_BASES: tuple[str, ...] = needing("state_chain")
TokenReweight = Literal["ahead", "stepopsd"]


def merge_options(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """``old`` with ``new`` merged in, method by method and field by field (each side an options dataclass or a
    mapping of its fields)."""
    out = {name: _as_fields(value) for name, value in old.items()}
    for name, value in new.items():
        out[name] = {**out.get(name, {}), **_as_fields(value)}
    return out


def _as_fields(value: Any) -> dict[str, Any]:
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: getattr(value, f.name) for f in fields(value)}
    return dict(value)


def _checked_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """``options`` with each entry as its method's options dataclass; one clear ``ValueError`` for a name that is
    not registered, a method that takes no options, or a field its options do not have."""
    if not isinstance(options, Mapping):
        raise ValueError(
            f"ShapeConfig.options maps a method's name to its options, got {type(options).__name__}"
        )
    out: dict[str, Any] = {}
    for name, value in options.items():
        try:
            cls = get(name).options
        except KeyError as exc:
            raise ValueError(str(exc.args[0])) from None
        if cls is None:
            raise ValueError(f"{name!r} takes no options")
        if isinstance(value, cls):
            out[name] = value
            continue
        if not isinstance(value, Mapping):
            raise ValueError(
                f"options[{name!r}] must be a {cls.__name__} or a mapping of its fields, got {value!r}"
            )
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(value) - known)
        if unknown:
            raise ValueError(
                f"{name!r} has no option {', '.join(map(repr, unknown))}; its options are {', '.join(sorted(known))}"
            )
        out[name] = cls(**value)
    return out


@dataclass(frozen=True)
class ShapeConfig:
    """Which stages run and the settings they share, one frozen dataclass (defaults: docs/shapers.md §2.7, §4.3,
    §5.8). Each method's own settings live in its options dataclass, registered with it (``GiGPOOptions``,
    ``GraphGPOOptions``, ``AHEADOptions``, ...): ``options={"graphgpo": {"scale": 5.0}}`` (or an instance) sets
    them, :meth:`options_for` reads them with the method's defaults for what is not set."""

    base: str = "grpo"
    """Base advantage: "grpo" (mean/std), "drgrpo" (mean only), "dapo" (= GRPO; DAPO differs in loss/sampling),
    "gigpo" (episode + anchor-state terms), the graph / history credit bases "graphgpo", "hgpo", "rewardflow",
    "g2po", the analysis-only ceiling "oracle" (docs/shapers.md §10–§14), or any name registered for "base"."""
    eps: float = 1e-6
    """ε added to the std (every std-normalised statistic)."""
    singleton: Literal["verl", "zero"] = "verl"
    """Group of one: "verl" → μ = 0, σ = 1 (A = r/(1+ε)); "zero" → A = 0 (docs/shapers.md §8.1)."""
    cross_steps: bool = True
    """GRPO statistics over all step rows of a group (verl-agent, True) or one row per trajectory (False: use this
    for one-row-per-trajectory data such as Search-R1, where every trajectory has several steps). GiGPO always
    uses all rows."""
    invalid_penalty: float = DEFAULT_INVALID_PENALTY
    """c: subtracted from an invalid step row's score (and a step return). Default 0 (``DEFAULT_INVALID_PENALTY``,
    the one default every shaper function shares); verl-agent's recipes use 0.1, as the ALFWorld/WebShop presets."""
    gamma: float = 0.95
    """The discount γ of every step return (GiGPO Eq. 5; the graph bases' step returns)."""
    step_weight: float = 1.0
    """w: the weight of the step term in A^E + w·A^S (GiGPO Eq. 8; the graph bases and the oracle alike)."""
    proas: bool = False
    """Apply ProAS (MUI/APR) to the per-step base advantage. Needs ``reasonable`` and ``progress`` labels."""
    token_reweight: str | None = None
    """Teacher-gap token reweighting: None, "ahead" or "stepopsd" (never both), or a registered "token" stage.
    Needs ``delta`` while λ > 0."""
    step_norm: str | None = None
    """StepOPSD's per-step budget normalisation "equal_step_mean_abs" over the target spans (needs
    ``StepBatch.target``), or a registered "step_norm" stage."""
    options: Mapping[str, Any] = field(default_factory=dict)
    """Each method's own options by its registered name, as its options dataclass or a mapping of its fields
    (``{"gigpo": {"mode": "mean_std_norm"}}``); unset ones are the method's defaults (:meth:`options_for`)."""

    def __post_init__(self) -> None:
        check_name("base", self.base, "base")
        tr = self.token_reweight
        if isinstance(tr, list | tuple | set | frozenset):
            if {"ahead", "stepopsd"} <= set(tr):
                raise ValueError(
                    "AHEAD and StepOPSD cannot be combined: both reweight the same advantage by a clipped teacher "
                    "gap, so stacking them applies the gap twice and voids both multiplier bounds (docs/shapers.md §0: "
                    "'AHEAD or StepOPSD'). Choose token_reweight='ahead' or 'stepopsd'."
                )
            raise ValueError(f"token_reweight is a single choice (None, 'ahead' or 'stepopsd'), got {tr!r}")
        if tr is not None:
            check_name("token", tr, "token_reweight")
        if self.step_norm is not None:
            check_name("step_norm", self.step_norm, "step_norm")
        if self.step_norm and self.proas:
            raise ValueError(
                "StepOPSD's equal_step_mean_abs cannot run on top of ProAS: it equalises per-step magnitudes and "
                "so undoes APR's deliberate front-loading of the penalty on drift-causing steps (docs/shapers.md §0, §8.28). "
                "Disable one of step_norm / proas."
            )
        if self.step_norm and tr == "ahead":
            raise ValueError(
                "equal_step_mean_abs is StepOPSD's step normalisation; on top of AHEAD it would flatten the extra "
                "weight AHEAD puts on hinted error steps. Use token_reweight='stepopsd' or step_norm=None."
            )
        base = get(self.base, "base")
        if self.proas and base.proas is not True:
            raise ValueError(
                f"proas=True cannot run on base={self.base!r}: {base.proas} (docs/shapers.md §14.3). "
                "Use a base with an episode term (grpo, gigpo, graphgpo, rewardflow, g2po, oracle)."
            )
        object.__setattr__(self, "options", _checked_options(self.options))

    def options_for(self, name: str) -> Any:
        """The options of the method registered as ``name``: the config's own, else the method's defaults."""
        own = self.options.get(name)
        if own is not None:
            return own
        cls = get(name).options
        if cls is None:
            raise ValueError(f"{name!r} takes no options")
        return cls()

    @classmethod
    def from_preset(cls, name: str, **overrides: Any) -> ShapeConfig:
        """A paper setup from :data:`SHAPER_PRESETS`, with field overrides; ``options=`` is merged method by
        method, field by field, into the preset's own."""
        try:
            kwargs = dict(SHAPER_PRESETS[name])
        except KeyError:
            raise KeyError(f"unknown preset {name!r}; available: {sorted(SHAPER_PRESETS)}") from None
        unknown = set(overrides) - {f.name for f in fields(cls)}
        if unknown:
            raise TypeError(f"unknown ShapeConfig fields: {sorted(unknown)}")
        if "options" in overrides:
            overrides = {
                **overrides,
                "options": merge_options(kwargs.get("options", {}), overrides["options"]),
            }
        kwargs.update(overrides)
        return cls(**kwargs)

    def with_options(self, **options: Mapping[str, Any]) -> ShapeConfig:
        """This config with some methods' options changed field by field, e.g.
        ``cfg.with_options(graphgpo={"scale": 5.0})``."""
        return replace(self, options=merge_options(self.options, options))

    def replace(self, **changes: Any) -> ShapeConfig:
        return replace(self, **changes)

    def mixing_lambda(self, update_index: int) -> float:
        """The token-reweight mixing weight for the update that follows ``update_index`` completed updates
        (0 when no token reweighting; when it is 0 the teacher need not be scored)."""
        if self.token_reweight is None:
            return 0.0
        schedule = get(self.token_reweight, "token").schedule
        return 1.0 if schedule is None else float(get(schedule, "schedule")(self, update_index))


#: Paper setups (docs/shapers.md §2.7, §4.3, §5.8). ALFWorld recipes use the invalid-action penalty 0.1; Search-QA none.
SHAPER_PRESETS: dict[str, dict[str, Any]] = {
    "grpo": {"base": "grpo"},
    "grpo-alfworld": {"base": "grpo", "invalid_penalty": RECIPE_INVALID_PENALTY},
    "drgrpo": {"base": "drgrpo"},
    "dapo": {"base": "dapo"},
    "gigpo-alfworld": {
        "base": "gigpo",
        "options": {"gigpo": {"mode": "mean_std_norm"}},
        "invalid_penalty": RECIPE_INVALID_PENALTY,
    },
    "gigpo-webshop": {
        "base": "gigpo",
        "options": {"gigpo": {"mode": "mean_norm"}},
        "invalid_penalty": RECIPE_INVALID_PENALTY,
    },
    "proas-grpo": {"base": "grpo", "invalid_penalty": RECIPE_INVALID_PENALTY, "proas": True},
    "proas-gigpo": {
        "base": "gigpo",
        "options": {"gigpo": {"mode": "mean_std_norm"}},
        "invalid_penalty": RECIPE_INVALID_PENALTY,
        "proas": True,
    },
    "ahead": {"base": "grpo", "invalid_penalty": RECIPE_INVALID_PENALTY, "token_reweight": "ahead"},
    "stepopsd-alfworld": {
        "base": "grpo",
        "invalid_penalty": RECIPE_INVALID_PENALTY,
        "token_reweight": "stepopsd",
        "step_norm": "equal_step_mean_abs",
    },
    **{
        f"graphgpo-{env}": {"base": "graphgpo", "gamma": g, "invalid_penalty": RECIPE_INVALID_PENALTY}
        for env, g in (("alfworld", 0.1), ("webshop", 0.2))
    },
    "graphgpo-searchqa": {"base": "graphgpo", "gamma": 0.1},
    **{
        f"hgpo-{env}": {"base": "hgpo", "gamma": 0.95, "invalid_penalty": RECIPE_INVALID_PENALTY}
        for env in ("alfworld", "webshop")
    },
    "hgpo-searchqa": {"base": "hgpo", "gamma": 0.95},
    **{
        f"rewardflow-{env}": {"base": "rewardflow", "gamma": 0.9, "invalid_penalty": RECIPE_INVALID_PENALTY}
        for env in ("alfworld", "webshop")
    },
    "rewardflow-searchqa": {"base": "rewardflow", "gamma": 0.95},
    **{
        f"g2po-{env}": {"base": "g2po", "invalid_penalty": RECIPE_INVALID_PENALTY}
        for env in ("alfworld", "webshop")
    },
    "g2po-searchqa": {"base": "g2po"},
    "oracle": {"base": "oracle"},
    "stepopsd-searchqa": {
        "base": "grpo",
        "cross_steps": False,
        "token_reweight": "stepopsd",
        "step_norm": "equal_step_mean_abs",
    },
}


@dataclass
class StepBatch:
    """One batch, as flat per-step arrays (N,) plus an optional token layout (B, L).

    Per step row (N,), rows of one trajectory in time order (not necessarily contiguous):
        group_ids: GRPO group (task / prompt uid). traj_ids: trajectory. rewards: env reward r_{i,t} of the step
        (outcome-only tasks: the outcome on the last step, 0 before). The episode return is R_i = Σ_t r_{i,t}.
        valid: bool action validity (None: all valid). anchor_obs: GiGPO anchor observation.
        reasonable / progress: ProAS labels Rea_t, PA_t (``stepgym.schema``'s ARG annotations).
    Token level (B, L):
        layout: :class:`TokenLayout` mapping tokens to the N steps (one row per step or one per trajectory).
        delta: teacher − student log-prob gap (AHEAD: all generated tokens; StepOPSD: target spans, see
            ``scatter_span_deltas``); NaN/inf allowed. delta_mask: where the gap applies (AHEAD: optional SERL-style
            mask; StepOPSD default: the target spans).
        target: StepOPSD target spans as a :class:`TokenLayout` on the same (B, L) grid (``TokenLayout.from_spans``).
    Graph / history bases (docs/shapers.md §10–§14), per step row (N,):
        anchor_obs is the state *before* the step; next_obs the state *after* it, keyed the same way
            (``schema.STATE_KEY`` by default, or the observation text): next_obs[t] must equal anchor_obs[t+1].
        success: bool, True on the last row of a trajectory that reached the success terminal (only last rows
            are read). None: each code's rule (GraphGPO: episode return > 0; G2PO: return == 10 exactly).
        dones: bool, True on the last row when the episode ended before the row horizon (RewardFlow adds the
            state after it). None: every trajectory's last row counts as ended.
        step_index: int t of each row inside its trajectory (optional; checked to increase along trajectories).
        true_gain: float ``schema.VALUE_GAIN`` of the step (``ValueWrapper``; the "oracle" base needs it).
        actions: the action text of each step (RewardFlow's ALFWorld cleaning reads it).
    Failure semantics (docs/failures.md):
        aborted: bool (N,), True on every row of an episode an infrastructure failure cut off
            (``schema.ABORT_CAUSES``). None / all False: nothing aborted (results unchanged). Those rows are kept
            out of every statistic and get advantage 0 and loss mask 0.
    """

    group_ids: Sequence[Any] | np.ndarray
    traj_ids: Sequence[Any] | np.ndarray
    rewards: Any
    valid: Any = None
    anchor_obs: Sequence[Any] | None = None
    reasonable: Any = None
    progress: Any = None
    layout: TokenLayout | None = None
    delta: Any = None
    delta_mask: Any = None
    target: TokenLayout | None = None
    next_obs: Sequence[Any] | None = None
    success: Any = None
    dones: Any = None
    step_index: Any = None
    true_gain: Any = None
    actions: Sequence[Any] | None = None
    aborted: Any = None


#: The StepBatch fields that hold one entry per step row (N,).
_ROW_FIELDS = (
    "group_ids",
    "traj_ids",
    "rewards",
    "valid",
    "anchor_obs",
    "reasonable",
    "progress",
    "next_obs",
    "success",
    "dones",
    "step_index",
    "true_gain",
    "actions",
)


@dataclass(frozen=True)
class ShapedAdvantages:
    """What :func:`shape_advantages` returns."""

    token_advantages: np.ndarray | None  #: (B, L) final per-token advantages (None without a layout)
    step_advantages: np.ndarray  #: (N,) per-step values after ProAS (before token reweighting)
    base_advantages: np.ndarray  #: (N,) base advantage (GRPO / GiGPO combined) before ProAS
    scores: np.ndarray  #: (N,) row scores R_i − c(1 − v)
    lam: float  #: mixing weight used by the token reweighting (0 if none)
    #: the base's (episode, step) terms: GiGPO, GraphGPO, RewardFlow, G2PO, oracle (None for the others)
    gigpo: GiGPOTerms | None = field(default=None)
    #: (N,) bool: the rows the loss trains on (False on aborted episodes' rows); None means all rows
    loss_mask: np.ndarray | None = field(default=None)
    #: (B, L) bool: the tokens the loss trains on (response tokens of finished episodes); None without a layout
    token_loss_mask: np.ndarray | None = field(default=None)
    #: what the aborts of this batch cost (episodes, rows, groups left with fewer than two finished episodes)
    aborts: AbortCounts = field(default_factory=AbortCounts)


def shape_advantages(
    batch: StepBatch, config: ShapeConfig, *, update_index: int = 0, lam: float | None = None
) -> ShapedAdvantages:
    """Run the §0 pipeline on one batch and return per-step and per-token advantages.

    Args:
        batch: the :class:`StepBatch` (per-step arrays (N,), optional token layout and teacher gaps (B, L)).
        config: the :class:`ShapeConfig` (forbidden combinations were refused when it was built).
        update_index: completed policy updates before this one (0 at the first update). AHEAD uses it as k;
            StepOPSD as ``global_steps = update_index + 1`` (docs/shapers.md §4.3, §5.4).
        lam: override the scheduled mixing weight (e.g. 0 to switch the reweighting off).

    Returns a :class:`ShapedAdvantages`. Raises ``ValueError`` for non-finite rewards, mismatched lengths or
    shapes, missing inputs a configured stage needs, or a layout whose step count differs from N.

    Aborted episodes (``batch.aborted``, docs/failures.md): the batch restricted to its finished rows is shaped
    and the result scattered back, so the finished rows' advantages equal, exactly, those of the batch with the
    aborted episodes removed; aborted rows get 0 and ``loss_mask`` / ``token_loss_mask`` False. A group an abort
    left with fewer than two finished episodes gets 0 (``aborts.zeroed_groups``).
    """
    mask = None
    if batch.aborted is not None:
        n = len(batch.rewards)
        check_same_length(n, traj_ids=batch.traj_ids, group_ids=batch.group_ids)
        mask = _ab.abort_mask(batch.aborted, n, Groups(batch.traj_ids))
    if mask is None:
        out = _shape(replace(batch, aborted=None), config, update_index=update_index, lam=lam)
        tmask = batch.layout.response_mask if out.token_advantages is not None and batch.layout else None
        return replace(out, loss_mask=np.ones(len(out.step_advantages), dtype=bool), token_loss_mask=tmask)
    return _shape_without_aborted(batch, mask, config, update_index=update_index, lam=lam)


def _shape_without_aborted(
    batch: StepBatch, aborted: np.ndarray, config: ShapeConfig, *, update_index: int, lam: float | None
) -> ShapedAdvantages:
    """Shape the finished rows only, scatter back (aborted rows 0), zero the groups left with < 2 episodes."""
    keep = ~aborted
    idx = np.flatnonzero(keep)
    sub = replace(batch, aborted=None, **{f: _ab.take_rows(getattr(batch, f), idx) for f in _ROW_FIELDS})
    keep_rows = None
    if batch.layout is not None:
        if batch.layout.n_steps != len(keep):
            raise ValueError(
                f"the token layout has {batch.layout.n_steps} steps but the batch has {len(keep)} step rows"
            )
        keep_rows = ~_ab.token_rows_of(batch.layout, aborted)
        sub = replace(
            sub,
            layout=_ab.restrict_layout(batch.layout, keep_rows),
            delta=_ab.token_take(batch.delta, keep_rows),
            delta_mask=_ab.token_take(batch.delta_mask, keep_rows),
            target=None if batch.target is None else _ab.restrict_layout(batch.target, keep_rows),
        )
    out = _shape(sub, config, update_index=update_index, lam=lam)
    tg, gg = Groups(batch.traj_ids), Groups(batch.group_ids)
    zero, n_groups, n_eps = _ab.depleted_rows(aborted, gg, tg)
    zsub = zero[keep]

    def back(x: np.ndarray, fill: float = 0.0) -> np.ndarray:
        y = np.where(zsub, 0.0, x) if x.dtype.kind == "f" else x
        return _ab.scatter(y, keep, fill)

    terms = None
    if out.gigpo is not None:
        t = out.gigpo
        terms = GiGPOTerms(
            back(t.episode),
            back(t.step),
            _ab.scatter(t.scores, keep),
            _ab.scatter(t.returns, keep),
            _ab.scatter(t.step_groups, keep, -1),
        )
    token_adv = token_mask = None
    if out.token_advantages is not None and keep_rows is not None:
        ts = batch.layout.token_step  # type: ignore[union-attr]
        token_adv = _ab.scatter(out.token_advantages, keep_rows)
        token_adv[np.isin(ts, np.flatnonzero(zero))] = 0.0
        token_mask = (ts >= 0) & keep_rows[:, None]
    counts = AbortCounts(
        aborted_episodes=len(np.unique(tg.codes[aborted])),
        aborted_rows=int(aborted.sum()),
        zeroed_groups=n_groups,
        zeroed_episodes=n_eps,
    )
    return ShapedAdvantages(
        token_adv,
        back(out.step_advantages),
        back(out.base_advantages),
        _ab.scatter(out.scores, keep),
        out.lam,
        terms,
        keep.copy(),
        token_mask,
        counts,
    )


def _shape(
    batch: StepBatch, config: ShapeConfig, *, update_index: int = 0, lam: float | None = None
) -> ShapedAdvantages:
    """The §0 pipeline on a batch without aborted rows."""
    rewards = as_float_array(batch.rewards, "rewards", ndim=1, finite=True)
    n = len(rewards)
    check_same_length(
        n,
        "rewards",
        group_ids=batch.group_ids,
        traj_ids=batch.traj_ids,
        valid=batch.valid,
        anchor_obs=batch.anchor_obs,
        reasonable=batch.reasonable,
        progress=batch.progress,
        next_obs=batch.next_obs,
        success=batch.success,
        dones=batch.dones,
        step_index=batch.step_index,
        true_gain=batch.true_gain,
        actions=batch.actions,
    )
    tg = Groups(batch.traj_ids)
    gg = Groups(batch.group_ids)
    check_traj_in_one_group(gg, tg, batch.traj_ids)  # one rule for every base
    # the stages see int64 codes (first-appearance order) for the ids: every stage groups by them, none re-factorises
    coded = replace(batch, group_ids=gg.codes, traj_ids=tg.codes, rewards=rewards)
    # rewards → invalid-action penalty (R_i on every row of trajectory i, minus the row's own penalty)
    scores = get("invalid_action_penalty", "reward")(coded, config, episode_scores(rewards, tg))
    base = get(config.base, "base")(coded, config, scores)  # → base advantage
    if not isinstance(base, BaseAdvantage):
        base = BaseAdvantage(as_float_array(base, f"base stage {config.base!r} output", ndim=1, finite=True))
    check_same_length(n, **{f"base stage {config.base!r} output": base.values})
    step_adv = get("proas", "step")(coded, config, base) if config.proas else base.values  # → ProAS
    used_lam = config.mixing_lambda(update_index) if lam is None else float(check_lambda(lam))
    terms = base.terms if isinstance(base.terms, GiGPOTerms) else None
    if batch.layout is None:
        if config.token_reweight is not None or config.step_norm is not None:
            raise ValueError("token reweighting / step normalisation need StepBatch.layout")
        return ShapedAdvantages(None, step_adv, base.values, scores, used_lam, terms)
    if batch.layout.n_steps != n:
        raise ValueError(f"the token layout has {batch.layout.n_steps} steps but the batch has {n} step rows")
    tokens = get("broadcast", "broadcast")(coded, config, step_adv)  # → broadcast to tokens
    shaped = tokens
    if config.token_reweight is not None and used_lam > 0:  # → AHEAD or StepOPSD token reweighting
        shaped = get(config.token_reweight, "token")(coded, config, tokens, used_lam)
    if config.step_norm is not None:  # → StepOPSD step normalisation
        shaped = get(config.step_norm, "step_norm")(coded, config, shaped, tokens)
    return ShapedAdvantages(shaped, step_adv, base.values, scores, used_lam, terms)
