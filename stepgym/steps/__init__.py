"""The one home of a step's data: what every trainer (the bundled one and each adapter) reads about a step.

Below the bundled trainer (:mod:`stepgym.trainers`) and the adapters (:mod:`stepgym.integrations`), above the envs,
wrappers and shapers. A change to how a step is credited touches this package and nothing else:

* :mod:`stepgym.steps.record`: the step record (``StepRecord``), read once per step from its info
  (``step_annotations``), the episode record, and the one validity rule (``valid_flags``);
* :mod:`stepgym.steps.batch`: the one :class:`~stepgym.shapers.StepBatch` builder (``build_step_batch``) and
  ``step_batch_from_trajectories`` for a loop of one's own;
* :mod:`stepgym.steps.row`: the bundled trainer's rows (``StepRow``: one row per step, its tokens and the record)
  as the builder's input;
* :mod:`stepgym.steps.advantages`: ``shape_rows``, rows of steps → the shapers → token advantages, for the bundled
  trainer (one row per step) and every adapter (one row per episode);
* :mod:`stepgym.steps.episode`: ``Episode``, one episode as every adapter plays it;
* :mod:`stepgym.steps.tasks`: an env's task split as a trainer's prompt rows;
* :mod:`stepgym.steps.teacher_context`: what the AHEAD / StepOPSD teachers read, on both layouts.

Import each name from its module (``from stepgym.steps.tasks import task_dataset``): the package exports none itself.
"""

from __future__ import annotations

__all__: list[str] = []
