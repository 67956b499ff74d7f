"""The shaper registry: the pipeline of docs/shapers.md §0 looks every stage up here by name.

Like verl's advantage-estimator registry, each *stage* has one call signature, so any function registered for a
stage can replace the built-in one: :func:`stepgym.shapers.shape_advantages` runs

    reward ("invalid_action_penalty") → base (``ShapeConfig.base``) → step ("proas" when ``ShapeConfig.proas``)
    → broadcast ("broadcast") → token (``ShapeConfig.token_reweight``, scheduled by its entry's ``schedule``)
    → step_norm (``ShapeConfig.step_norm``)

and ``ShapeConfig`` accepts any name registered for the stage of its field. Stage signatures (``batch`` is the
:class:`~stepgym.shapers.StepBatch` with its group and trajectory ids already factorised to int64 codes,
``config`` the :class:`~stepgym.shapers.ShapeConfig`; arrays are float64):

=========== ======================================================= =====================================
stage       call                                                    returns
=========== ======================================================= =====================================
reward      ``fn(batch, config, scores)``                           row scores (N,)
base        ``fn(batch, config, scores)``                           :class:`BaseAdvantage` or (N,) array
step        ``fn(batch, config, base)``  (``base``: BaseAdvantage)  per-step advantages (N,)
broadcast   ``fn(batch, config, step_values)``                      token advantages (B, L)
token       ``fn(batch, config, tokens, lam)``  (run when λ > 0)    reweighted tokens (B, L)
step_norm   ``fn(batch, config, shaped, tokens)``                   normalised tokens (B, L)
schedule    ``fn(config, update_index)``                            λ for the next update
=========== ======================================================= =====================================

Three more stages hold functions a *trainer* calls itself, outside the pipeline, with their own arguments:
``sampling`` (DAPO's dynamic-sampling filter), ``reward_term`` (DAPO's overlong punishment, added to the env
reward) and ``loss`` (the NumPy policy loss and aggregation). The maths of each built-in lives in its method's
module as a plain function (``grpo_advantage``, ``ahead_reweight``, ...); what is registered is a short adapter
from the stage signature to that function.

A third party registers a stage from its own module and names it in the config (``stepgym train
--shaper-module my_shapers --shaper.base my_base``; see docs/shapers_guide.md "Registering your own shaper")::

    from stepgym.shapers import BaseAdvantage, register, grpo_advantage

    @register("my_base", stage="base")
    def my_base(batch, config, scores):
        return BaseAdvantage(grpo_advantage(scores, batch.group_ids, traj_ids=batch.traj_ids))
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "NEEDS",
    "PIPELINE_STAGES",
    "STAGES",
    "BaseAdvantage",
    "ShaperEntry",
    "available",
    "get",
    "load_shaper_modules",
    "needing",
    "register",
]

#: Stages the pipeline composes, in the order of docs/shapers.md §0.
PIPELINE_STAGES = ("reward", "base", "step", "broadcast", "token", "step_norm", "schedule")
#: Every stage: the pipeline's plus those a trainer calls itself (sampling, reward terms, loss).
STAGES = ("sampling", "reward_term", *PIPELINE_STAGES, "loss")


@dataclass(frozen=True)
class BaseAdvantage:
    """What a ``base`` stage returns: per-step values (N,) and, optionally, the method's separate terms (GiGPO's
    :class:`~stepgym.shapers.GiGPOTerms`, which the ProAS step stage shapes term by term)."""

    values: np.ndarray
    terms: Any = None


#: What a shaper may need from the :class:`~stepgym.shapers.StepBatch` beyond ids and rewards (``ShaperEntry.needs``).
NEEDS = {
    "state_keys": "state keys (anchor_obs: the state before each step, schema.STATE_KEY or the observation text)",
    "state_chain": "the state chain (next_obs: the state after each step; dones and step_index when known)",
    "labels": "ARG labels (reasonable / progress, ProAS's labels)",
    "value_labels": "value labels (true_gain: ValueWrapper's exact step gain)",
    "teacher": "teacher log-prob gaps (delta, and delta_mask, per token)",
    "target_spans": "target spans (target: StepOPSD's spans of each step)",
    "actions": "actions (the action text of each step)",
}


@dataclass(frozen=True)
class ShaperEntry:
    """One registered function: call the entry like the function.

    Attributes:
        schedule: (token stages) the ``schedule`` entry that gives its mixing weight λ; none: λ = 1.
        options: the method's own options, a frozen dataclass whose defaults are the method's (its paper's or
            public code's); a config holds an instance per method (``ShapeConfig.options``), read with
            ``config.options_for(name)``. ``None``: the method takes none beyond the shared fields.
        needs: what it reads from the batch, as keys of :data:`NEEDS`.
        proas: (base stages) True when ProAS composes with it (shaping its episode term when it has one), else the
            reason it does not.
    """

    name: str
    fn: Callable[..., Any]
    stage: str
    summary: str
    schedule: str | None = None
    options: type | None = None
    needs: frozenset[str] = frozenset()
    proas: bool | str = True

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)


_REGISTRY: dict[str, ShaperEntry] = {}


def register(
    name: str,
    *,
    stage: str,
    summary: str = "",
    schedule: str | None = None,
    overwrite: bool = False,
    options: type | None = None,
    needs: Iterable[str] = (),
    proas: bool | str = True,
) -> Callable[[Callable], Callable]:
    """Decorator: register ``fn`` under ``name`` for ``stage`` (see the module docstring for each stage's
    signature), with what the method declares about itself (:class:`ShaperEntry`: its options dataclass, what it
    needs from the batch, whether ProAS composes with it). Names are unique across stages; re-registering a name
    needs ``overwrite=True``."""
    if stage not in STAGES:
        raise ValueError(f"unknown stage {stage!r}; expected one of {STAGES}")
    if schedule is not None and stage != "token":
        raise ValueError("only token stages take a schedule")
    if options is not None and not (dataclasses.is_dataclass(options) and isinstance(options, type)):
        raise ValueError(f"options of {name!r} must be a dataclass type, got {options!r}")
    needed = frozenset(needs)
    if needed - set(NEEDS):
        raise ValueError(f"unknown needs {sorted(needed - set(NEEDS))} for {name!r}; known: {sorted(NEEDS)}")
    if proas is not True and not (isinstance(proas, str) and proas):
        raise ValueError(f"proas of {name!r} is True or the reason ProAS does not compose with it")

    def deco(fn: Callable) -> Callable:
        if name in _REGISTRY and not overwrite and _REGISTRY[name].fn is not fn:
            raise ValueError(
                f"a shaper named {name!r} is already registered ({_REGISTRY[name].fn.__module__})"
            )
        doc = summary or (fn.__doc__ or "").strip().split("\n", 1)[0]
        _REGISTRY[name] = ShaperEntry(name, fn, stage, doc, schedule, options, needed, proas)
        return fn

    return deco


def get(name: str, stage: str | None = None) -> ShaperEntry:
    """The entry registered under ``name`` (call it like the function); with ``stage``, it must belong to it."""
    try:
        entry = _REGISTRY[name]
    except KeyError:
        raise KeyError(f"no shaper named {name!r}; registered: {sorted(_REGISTRY)}") from None
    if stage is not None and entry.stage != stage:
        raise KeyError(
            f"{name!r} is a {entry.stage!r} stage, not {stage!r}; {stage} stages: {available(stage)}"
        )
    return entry


def available(stage: str | None = None) -> list[str]:
    """Registered names, optionally only those of one stage."""
    return sorted(n for n, e in _REGISTRY.items() if stage is None or e.stage == stage)


def needing(need: str, stage: str = "base") -> tuple[str, ...]:
    """The names registered for ``stage`` that need ``need`` (a key of :data:`NEEDS`), in registration order:
    e.g. ``needing("state_chain")`` are the graph / history bases."""
    return tuple(n for n, e in _REGISTRY.items() if e.stage == stage and need in e.needs)


def check_name(stage: str, name: str, field: str) -> None:
    """``ValueError`` naming the registered choices when a config field names no ``stage`` entry."""
    entry = _REGISTRY.get(name)
    if entry is None or entry.stage != stage:
        raise ValueError(
            f"{field} must name a registered {stage!r} stage ({', '.join(available(stage))}), got {name!r}. "
            "A shaper of your own must be registered before the config is built: import its module first "
            "(stepgym train --shaper-module MODULE_OR_FILE)"
        )


def load_shaper_modules(specs: Iterable[str]) -> list[Any]:
    """Import each module that registers shapers: a dotted module name on ``sys.path`` or a ``.py`` file path.

    Used by ``stepgym train/eval --shaper-module``; a file is imported under the name ``stepgym_user_<stem>``
    (once per process). Raises :class:`stepgym.errors.StepGymError` naming what could not be imported.
    """
    from stepgym.errors import StepGymError

    mods = []
    for spec in specs:
        path = Path(spec)
        try:
            if spec.endswith(".py") or path.is_file():
                if not path.is_file():
                    raise FileNotFoundError(f"no such file: {path}")
                modname = f"stepgym_user_{path.stem}"
                if modname in sys.modules:
                    mods.append(sys.modules[modname])
                    continue
                loader = importlib.util.spec_from_file_location(modname, path)
                assert loader is not None and loader.loader is not None
                mod = importlib.util.module_from_spec(loader)
                sys.modules[modname] = mod
                try:
                    loader.loader.exec_module(mod)
                except BaseException:
                    del sys.modules[modname]
                    raise
            else:
                mod = importlib.import_module(spec)
        except (ImportError, FileNotFoundError, SyntaxError) as exc:
            raise StepGymError(
                f"--shaper-module {spec!r} could not be imported ({type(exc).__name__}: {exc}). Pass a module "
                "name importable from the current environment (PYTHONPATH) or the path of a .py file."
            ) from exc
        mods.append(mod)
    return mods
