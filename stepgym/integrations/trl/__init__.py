"""stepgym inside TRL's ``GRPOTrainer`` (TRL 1.16): two ways in, and step-level credit on top.

* :func:`environment_factory` — the class TRL instantiates per rollout (``GRPOTrainer(environment_factory=...)``).
  TRL turns every public method of that class into a tool, so the class has exactly three public methods:
  ``reset(**row)`` (reads ``task_id`` from the dataset row), one typed, documented tool that takes the env's action
  (``act(action: str) -> str`` by default) and ``get_reward()`` (the episode return). TRL's tool loop needs a chat
  template that renders tool calls; SmolLM2's does not, so :func:`use_tool_chat_template` installs one of the
  templates TRL ships (ChatML-based Qwen2.5 by default) when the tokenizer's own cannot.
* :class:`GroupRollout` — a ``rollout_func``: TRL hands it the batch's prompts with each prompt repeated G times in
  a row; each block of G is one :class:`stepgym.GroupEnv` group on one task. Each rollout is one growing chat (the
  text interface's prompt as the user turn, the model's reply as the assistant turn), stored as one token row whose
  env tokens are masked out of the loss (``env_mask``). It returns per-step annotations
  (:mod:`stepgym.steps.record`) with each step's token span, which reach TRL's reward functions as the
  ``stepgym_steps`` / ``stepgym_episode`` keyword arguments.
* :class:`StepGRPOTrainer` — a ``GRPOTrainer`` whose advantages are per token: the rollout's steps go through
  :func:`stepgym.shapers.shape_advantages` (GRPO, Dr.GRPO, GiGPO, ProAS; AHEAD and StepOPSD with the
  teacher rescoring of :class:`TeacherGaps`) instead of TRL's one advantage per sequence. It needs :class:`GroupRollout`, which knows which
  tokens belong to which env step; TRL's own tool loop (``environment_factory``) keeps no such record.
"""

from __future__ import annotations

from stepgym import _deps

_deps.require("trl", "trl", what="the TRL integration")
_deps.require("torch", "trl")

from stepgym.integrations.trl.chat import use_tool_chat_template  # noqa: E402
from stepgym.integrations.trl.rollout import GroupRollout, episode_return  # noqa: E402
from stepgym.integrations.trl.teacher import TeacherGaps  # noqa: E402
from stepgym.integrations.trl.tool_env import StepGymToolEnv, environment_factory  # noqa: E402
from stepgym.integrations.trl.trainer import StepGRPOTrainer, step_batch_from_rollouts  # noqa: E402

__all__ = [
    "GroupRollout",
    "StepGRPOTrainer",
    "StepGymToolEnv",
    "TeacherGaps",
    "environment_factory",
    "episode_return",
    "step_batch_from_rollouts",
    "use_tool_chat_template",
]
