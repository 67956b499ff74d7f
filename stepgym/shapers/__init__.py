"""Advantage shapers as pure NumPy functions: GRPO, Dr.GRPO, DAPO, GiGPO, ProAS, AHEAD, StepOPSD, and the graph /
history credit bases GraphGPO, HGPO, RewardFlow, G2PO with the perfect-credit ceiling "oracle" (docs/shapers.md).

Arrays in, arrays out, float64, no trainer state, no torch: ``import stepgym.shapers`` stays light (the
torch loss pieces are in :mod:`stepgym.trainers.losses`). A trainer normally calls one function,
:func:`shape_advantages`, with a :class:`StepBatch` and a :class:`ShapeConfig`; every stage is also callable on its
own and registered by name (:func:`get`, :func:`available`).

The maths, edge cases and resolved ambiguities are specified in docs/shapers.md (cited as "docs/shapers.md §n"),
one module per method; each function's docstring names its paper equation and any departure from the paper or the
public code.
"""

from __future__ import annotations

from stepgym.shapers.ahead import ahead_delta, ahead_lambda, ahead_reweight, ahead_weights
from stepgym.shapers.compose import (
    GRAPH_BASES,
    SHAPER_PRESETS,
    AbortCounts,
    ShapeConfig,
    ShapedAdvantages,
    StepBatch,
    shape_advantages,
)
from stepgym.shapers.dapo import (
    AGG_MODES,
    DAPO_CLIP_HIGH,
    DAPO_CLIP_LOW,
    agg_loss_np,
    clipped_surrogate_np,
    dynamic_sampling_keep,
    overlong_penalty,
    policy_loss_np,
)
from stepgym.shapers.g2po import G2POOptions, g2po_terms
from stepgym.shapers.gigpo import (
    GiGPOOptions,
    GiGPOTerms,
    build_step_groups,
    gigpo_advantage,
    gigpo_terms,
    step_discounted_returns,
    step_relative_advantage,
)
from stepgym.shapers.graphgpo import GraphGPOOptions, graph_distances, graphgpo_terms
from stepgym.shapers.grpo import drgrpo_advantage, grpo_advantage
from stepgym.shapers.hgpo import HGPOOptions, hgpo_advantage
from stepgym.shapers.oracle import oracle_terms
from stepgym.shapers.proas import proas_multipliers, proas_on_gigpo, proas_shape, proas_trajectory
from stepgym.shapers.registry import (
    PIPELINE_STAGES,
    STAGES,
    BaseAdvantage,
    ShaperEntry,
    available,
    get,
    load_shaper_modules,
    register,
)
from stepgym.shapers.rewardflow import RewardFlowOptions, propagate_decay, rewardflow_terms
from stepgym.shapers.rewards import (
    DEFAULT_INVALID_PENALTY,
    RECIPE_INVALID_PENALTY,
    apply_invalid_action_penalty,
    episode_scores,
)
from stepgym.shapers.shared import SharedOptions
from stepgym.shapers.stepopsd import (
    equal_step_mean_abs,
    opsd_span_gaps,
    scatter_span_deltas,
    stepopsd_lambda,
    stepopsd_reweight,
    stepopsd_weights,
)
from stepgym.shapers.stepopsd_text import (
    SPAN_MODES,
    ResponseStep,
    TargetSpan,
    char_span_to_token_span,
    extract_response_steps,
    structural_target_span,
    target_token_spans,
)
from stepgym.shapers.tokens import SEGMENT_KINDS, TokenLayout, broadcast_to_tokens, step_token_counts

__all__ = [
    "AGG_MODES",
    "DAPO_CLIP_HIGH",
    "DAPO_CLIP_LOW",
    "DEFAULT_INVALID_PENALTY",
    "GRAPH_BASES",
    "PIPELINE_STAGES",
    "RECIPE_INVALID_PENALTY",
    "SEGMENT_KINDS",
    "SHAPER_PRESETS",
    "SPAN_MODES",
    "STAGES",
    "AbortCounts",
    "BaseAdvantage",
    "G2POOptions",
    "GiGPOOptions",
    "GiGPOTerms",
    "GraphGPOOptions",
    "HGPOOptions",
    "ResponseStep",
    "RewardFlowOptions",
    "ShapeConfig",
    "ShapedAdvantages",
    "ShaperEntry",
    "SharedOptions",
    "StepBatch",
    "TargetSpan",
    "TokenLayout",
    "agg_loss_np",
    "ahead_delta",
    "ahead_lambda",
    "ahead_reweight",
    "ahead_weights",
    "apply_invalid_action_penalty",
    "available",
    "broadcast_to_tokens",
    "build_step_groups",
    "char_span_to_token_span",
    "clipped_surrogate_np",
    "drgrpo_advantage",
    "dynamic_sampling_keep",
    "episode_scores",
    "equal_step_mean_abs",
    "extract_response_steps",
    "g2po_terms",
    "get",
    "gigpo_advantage",
    "gigpo_terms",
    "graph_distances",
    "graphgpo_terms",
    "grpo_advantage",
    "hgpo_advantage",
    "load_shaper_modules",
    "opsd_span_gaps",
    "oracle_terms",
    "overlong_penalty",
    "policy_loss_np",
    "proas_multipliers",
    "proas_on_gigpo",
    "proas_shape",
    "proas_trajectory",
    "propagate_decay",
    "register",
    "rewardflow_terms",
    "scatter_span_deltas",
    "shape_advantages",
    "step_discounted_returns",
    "step_relative_advantage",
    "step_token_counts",
    "stepopsd_lambda",
    "stepopsd_reweight",
    "stepopsd_weights",
    "structural_target_span",
    "target_token_spans",
]
