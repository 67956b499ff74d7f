"""stepgym inside verl 0.9: an agent loop that plays a stepgym env, and stepgym's shapers as advantage estimators.

verl trains multi-turn agents through *agent loops*: for each dataset row an ``AgentLoopBase`` subclass, registered
by name, talks to verl's generation servers and returns one ``AgentLoopOutput`` (prompt tokens, response tokens
with a loss mask, a reward, extra fields). verl then turns a batch of them into a ``DataProto`` and computes
advantages with a registered estimator (``@register_adv_est``). This package only gathers the pieces; each is a
thin module over the adapter skeleton (:mod:`stepgym.steps.episode`, :mod:`stepgym.steps.advantages`):

* :mod:`stepgym.integrations.verl.agent_loop`: :class:`StepGymAgentLoop` (registered as ``"stepgym"``) and
  :func:`verl_rows`, the dataset rows it plays;
* :mod:`stepgym.integrations.verl.advantage`: the estimators ``stepgym_grpo``, ``stepgym_gigpo``, ... (one per
  registered base method, and ProAS: :data:`ESTIMATORS`), :func:`compute_step_advantage` for a whole ``DataProto``
  (the step records, a teacher's gaps) and :func:`step_batch_from_verl`;
* :mod:`stepgym.integrations.verl.train`: verl's v1 trainer with its advantage step replaced, for every method
  (the teachers scored by verl's own actor / ref workers), and Hydra configs per benchmark.

Importing the package registers the agent loop and the estimators with verl (``VERL_USE_EXTERNAL_MODULES=
stepgym.integrations.verl``). Only CPU checks were run: verl's training needs GPUs (vLLM / SGLang servers, FSDP or
Megatron).
"""

from __future__ import annotations

from stepgym import _deps

# here too, not only in the modules: a re-import of the package finds them already imported
_deps.require("verl", "verl", what="the verl integration")

from stepgym.integrations.verl.advantage import (  # noqa: E402
    ESTIMATORS,
    compute_step_advantage,
    estimator_presets,
    step_batch_from_verl,
)
from stepgym.integrations.verl.agent_loop import StepGymAgentLoop, verl_rows  # noqa: E402

__all__ = [
    "ESTIMATORS",
    "StepGymAgentLoop",
    "compute_step_advantage",
    "estimator_presets",
    "step_batch_from_verl",
    "verl_rows",
]
