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

Trainer-neutral pieces live here and import no trainer; each adapter above is a thin module over the first two
(the adapter skeleton):

* :mod:`stepgym.integrations.episode`: ``Episode``, one episode as every adapter plays it (the text stack, a task
  reset, each reply stepped and recorded with its step record, an env failure ending it aborted), and
  ``span_records`` (the step records with their replies' token spans);
* :mod:`stepgym.integrations.advantages`: ``shape_rows``, a trainer's token rows (reply spans, groups, step
  records) to stepgym's token advantages, after ``refuse_missing``'s one-line check that the trainer hands the
  method what it reads;

* :mod:`stepgym.integrations.tasks` turns an env's fixed task split (``env.unwrapped.task_ids``) into prompt rows,
  so every trainer trains and evaluates on the same tasks.

Below every trainer, shared with the bundled one: :mod:`stepgym.step_record` (the step record, read once per step
from its info into plain values a trainer's reward or metadata hook can carry: ``step_annotations``,
``episode_annotations``, ``STEP_FIELDS``) and :mod:`stepgym.steps` (the one ``StepBatch`` builder, for the bundled
trainer and every adapter; ``step_batch_from_trajectories`` for a loop of one's own over ``GroupEnv``; the reply
spans in a loss mask); their names for users (the record's functions, ``StepRecord``,
``step_batch_from_trajectories``) are re-exported here. Shared with the bundled trainer too:
:mod:`stepgym.teacher_context`, what the AHEAD / StepOPSD teachers read, on TRL's and verl's one-row-per-episode
layout as on the trainer's one row per step.
"""

from __future__ import annotations

from stepgym.lazy import lazy_exports

_EXPORTS = {
    "task_ids": "stepgym.integrations.tasks",
    "task_rows": "stepgym.integrations.tasks",
    "task_dataset": "stepgym.integrations.tasks",
    "task_id_of_prompt": "stepgym.integrations.tasks",
    "step_annotations": "stepgym.step_record",
    "episode_annotations": "stepgym.step_record",
    "STEP_FIELDS": "stepgym.step_record",
    "StepRecord": "stepgym.step_record",
    "step_batch_from_trajectories": "stepgym.steps",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
