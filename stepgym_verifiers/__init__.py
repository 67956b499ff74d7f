"""The verifiers plugin id ``stepgym-verifiers``: verifiers 0.4 loads a taskset (and its env) by importing a
top-level package of that name and reading the ``Taskset`` / ``Env`` subclasses in its ``__all__``, so this package
only re-exports :mod:`stepgym.integrations.verifiers` (``vf-eval stepgym-verifiers --env.taskset.env ...``)."""

from stepgym.integrations.verifiers import StepGymEnv, StepGymTaskset

__all__ = ["StepGymEnv", "StepGymTaskset"]
