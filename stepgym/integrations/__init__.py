"""Adapters that plug stepgym's envs and step-level credit into RL trainers people already run.

Each trainer has its own module, imported only when asked for, behind its own extra; a missing trainer raises
``gymnasium.error.DependencyNotInstalled`` naming the pip command:

* :mod:`stepgym.integrations.trl` (``pip install 'stepgym[trl]'``): TRL's ``GRPOTrainer`` through
  ``environment_factory`` (the env's action as a tool) or ``rollout_func`` (multi-turn groups over
  :class:`stepgym.GroupEnv`), and :class:`~stepgym.integrations.trl.StepGRPOTrainer`, which replaces TRL's one
  advantage per sequence with stepgym's per-token advantages.

* :mod:`stepgym.integrations.skyrl` (``pip install 'stepgym[skyrl]'``): stepgym envs as SkyRL-gym 0.4 text envs
  (``register(env_id)`` then ``skyrl_gym.make``), per-turn reward and the step annotations in each step's metadata;
  ``StepAdvantageMixin`` puts stepgym's per-token advantages into SkyRL's trainer.

* :mod:`stepgym.integrations.verl` (``pip install 'stepgym[verl]'``, in an environment of its own): a verl 0.9
  agent loop (``"stepgym"``), stepgym's shapers as verl advantage estimators (``stepgym_gigpo``, ...), and
  :mod:`stepgym.integrations.verl.train`, verl's v1 trainer with every shaper in its advantage step.

* :mod:`stepgym.integrations.verifiers` (``pip install 'stepgym[verifiers]'``): a verifiers 0.4 taskset and env
  (``vf-eval stepgym-verifiers``), the env's return as the reward and the step annotations in ``trace.info``.

* :mod:`stepgym.integrations.openrlhf` (``pip install 'stepgym[openrlhf]'``): ``agent_classes(env_id)`` for
  OpenRLHF 0.11's ``--train.agent_func_path`` (step annotations in ``extra_logs``);
  :mod:`stepgym.integrations.openrlhf_train` runs OpenRLHF's trainer with stepgym's advantages.

* :mod:`stepgym.integrations.nemo_gym` (``pip install 'stepgym[nemo-gym]'``, Python >= 3.13.14): a NeMo Gym 0.7
  resources server whose episodes are ``stepgym serve`` sessions (every step's info holds the episode so far).

Each adapter is a thin module over the adapter skeleton in :mod:`stepgym.steps`, the one home of a step's data,
below every trainer (the bundled one included): the step record (:mod:`stepgym.steps.record`), ``Episode``
(:mod:`stepgym.steps.episode`, one episode as every adapter plays it), ``shape_rows``
(:mod:`stepgym.steps.advantages`, a trainer's token rows to stepgym's token advantages), the task rows
(:mod:`stepgym.steps.tasks`) and the teachers' contexts (:mod:`stepgym.steps.teacher_context`). This package
exports no names of its own.
"""

from __future__ import annotations

__all__: list[str] = []
