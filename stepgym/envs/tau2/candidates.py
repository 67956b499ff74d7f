"""Candidate calls: a small, deterministic list of agent messages per step, for learners that choose from a list.

``StepGym/Tau2-v0`` takes free text (any tool call, any message), so it has no admissible actions of its own. With
``candidate_calls=True`` the env lists, in ``info[schema.ADMISSIBLE_ACTIONS]``, a handful of messages the agent
could send at this step:

* the expert's next action (a gold call, a request to the user, or the closing message), when there is one;
* two other tools of the domain, their required arguments drawn from the task's data (the arguments of the
  task's gold calls, then the ids of the domain's database tables: ``user_id`` from the users table, and so on);
* the expert's call with one argument changed to another value drawn the same way;
* a generic question to the user and the stock closing message (not in solo mode, where the agent only calls
  tools).

The draws are seeded by the task id and the step number, so a task's list at a step is the same in every episode
that reaches that step in the same state; the list is sorted (no position gives the expert away) and has no
duplicates. ``info["tau2/candidates_seen"]`` names the candidate calls whose argument values all appeared in the
conversation so far (the user's messages and the tools' answers: what the agent has read).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import numpy as np

from stepgym.envs.tau2.calls import call_text

__all__ = ["ASK_MESSAGE", "CLOSING_MESSAGE", "candidate_calls", "seen_calls"]

ASK_MESSAGE = "Could you tell me more about what you need?"
CLOSING_MESSAGE = "Your request has been handled. Is there anything else I can help you with?"
N_OTHER_TOOLS = 2


def _seed(task_id: str, step: int) -> int:
    return int(hashlib.sha1(f"{task_id}|{step}".encode()).hexdigest()[:12], 16)


def _scalars(value: Any) -> list[Any]:
    """The scalar leaves of an argument value (a list of passengers gives their names, dates, ...)."""
    if isinstance(value, dict):
        return [x for v in value.values() for x in _scalars(v)]
    if isinstance(value, list):
        return [x for v in value for x in _scalars(v)]
    return [value] if isinstance(value, (str, int, float)) and not isinstance(value, bool) else []


def value_pool(gold_actions: list[Any], db: Any) -> dict[str, list[Any]]:
    """The task's data per argument name: the values of that argument in the task's gold calls, then (an ``x_id``
    argument) the keys of the database's ``xs`` table, sorted."""
    pool: dict[str, list[Any]] = {}
    for a in gold_actions:
        for k, v in (a.arguments or {}).items():
            if (
                isinstance(v, (str, int, float))
                and not isinstance(v, bool)
                and v not in pool.setdefault(k, [])
            ):
                pool[k].append(v)
    tables: dict[str, list[str]] = {}
    for name in type(db).model_fields if db is not None else ():
        table = getattr(db, name, None)
        if isinstance(table, dict) and name.endswith("s"):
            tables[name[:-1] + "_id"] = sorted(str(x) for x in table)
    for k, ids in tables.items():
        pool.setdefault(k, [])
        pool[k] = pool[k] + [x for x in ids if x not in pool[k]]
    return pool


def _draw(
    key: str, spec: dict[str, Any], pool: dict[str, list[Any]], rng: np.random.Generator, avoid: Any
) -> Any:
    """A value for argument ``key`` (its JSON schema ``spec``): from the pool (the task's values first, with a
    small chance of another id), else a made-up one of the schema's type."""
    options = [v for v in pool.get(key, []) if v != avoid]
    own = [v for v in options[:8]]  # the task's values and the first table keys
    if options:
        pick = own if own and rng.random() < 0.7 else options
        return pick[int(rng.integers(len(pick)))]
    kind = spec.get("type")
    if spec.get("enum"):
        enum = [v for v in spec["enum"] if v != avoid] or list(spec["enum"])
        return enum[int(rng.integers(len(enum)))]
    if kind == "integer":
        return int(rng.integers(1, 10))
    if kind == "number":
        return float(rng.integers(1, 500))
    if kind == "boolean":
        return bool(rng.integers(2))
    if kind == "array":
        return []
    if kind == "object":
        return {}
    return f"{key.removesuffix('_id')}_{int(rng.integers(1000, 10000))}"


def candidate_calls(
    expert: str | None,
    schemas: list[dict[str, Any]],
    pool: dict[str, list[Any]],
    task_id: str,
    step: int,
    talk: bool = True,
) -> list[str]:
    """The candidate messages of one step (see the module), sorted, without duplicates; ``talk`` False (solo
    mode, where the agent only calls tools) leaves out the two stock messages."""
    rng = np.random.default_rng(_seed(task_id, step))
    tools = {s["function"]["name"]: s["function"].get("parameters") or {} for s in schemas}
    out = {ASK_MESSAGE, CLOSING_MESSAGE} if talk else set()
    call = json.loads(expert) if expert and expert.startswith("{") else None
    if expert:
        out.add(expert)
    others = sorted(n for n in tools if call is None or n != call["name"])
    for k in rng.permutation(len(others))[:N_OTHER_TOOLS]:
        params = tools[others[int(k)]]
        props = params.get("properties") or {}
        args = {a: _draw(a, props.get(a) or {}, pool, rng, None) for a in params.get("required") or []}
        out.add(call_text(others[int(k)], args))
    if call is not None and call["arguments"]:
        keys = sorted(call["arguments"])
        key = keys[int(rng.integers(len(keys)))]
        props = (tools.get(call["name"]) or {}).get("properties") or {}
        wrong = _draw(key, props.get(key) or {}, pool, rng, call["arguments"][key])
        if wrong != call["arguments"][key]:
            out.add(call_text(call["name"], {**call["arguments"], key: wrong}))
    return sorted(out)


def seen_calls(candidates: list[str], conversation: str) -> list[str]:
    """The candidate calls whose argument values all appear in ``conversation`` (a call without arguments counts
    as seen; a message is not a call)."""
    out = []
    for c in candidates:
        if not c.startswith("{"):
            continue
        values = _scalars(json.loads(c).get("arguments") or {})
        if all(str(v) in conversation for v in values):
            out.append(c)
    return out
