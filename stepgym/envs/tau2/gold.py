"""The gold path of a task: upstream's gold actions replayed on upstream's environment, state by state.

``GoldPath(task, domain)`` replays the task's gold calls (``evaluation_criteria.actions``) one at a time from the
task's initial state, as upstream's evaluator does, and keeps the database hashes (agent and user database) after
each prefix. A call that changes them is a *write*. Comparing the live database with these hashes says how many
gold writes the conversation has realised (the deepest gold prefix whose state equals the live one), which is the
sub-goal count, the expert's position and the steps-to-go bound.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from stepgym.envs.tau2.upstream import tau2

__all__ = ["GoldPath", "db_hashes", "fresh_environment"]

#: upstream's hash of a database, by the digest of the database's JSON text: an episode of a task starts from the
#: state every episode of it starts from, and the same writes lead to the same states, so most states recur
_HASHES: OrderedDict[tuple[str, bytes], str] = OrderedDict()
_HASHES_MAX = 512
_HASHES_LOCK = threading.Lock()  # envs of one process may step in threads (the env executor)


def db_hashes(environment: Any) -> tuple[str | None, str | None]:
    """(agent database hash, user database hash) of an upstream environment: upstream's own hashes
    (``Environment.get_db_hash`` / ``get_user_db_hash``), equal to them for every database."""
    return _toolkit_hash(environment.tools), _toolkit_hash(environment.user_tools)


def _toolkit_hash(toolkit: Any) -> str | None:
    """``toolkit.get_db_hash()`` (None without a toolkit), kept by a digest of the database's JSON text.

    Upstream hashes the sorted JSON of ``db.model_dump()``, about 0.2 s on the airline database; pydantic writes the
    database's own JSON about ten times faster. Two databases of one class with the same JSON text have the same
    ``model_dump()`` (the JSON text carries every value with its type), so the same upstream hash: that one is
    computed once and looked up after."""
    if toolkit is None:
        return None
    db = getattr(toolkit, "db", None)
    if db is None or not hasattr(db, "model_dump_json"):
        return toolkit.get_db_hash()  # upstream's own answer (its error, for a toolkit without a database)
    try:
        text = db.model_dump_json()
    except (ValueError, TypeError):  # a value pydantic cannot write as JSON: upstream's hash, uncached
        return toolkit.get_db_hash()
    key = (
        f"{type(db).__module__}.{type(db).__qualname__}",
        hashlib.blake2b(text.encode(), digest_size=32).digest(),
    )
    with _HASHES_LOCK:
        got = _HASHES.get(key)
        if got is not None:
            _HASHES.move_to_end(key)
            return got
    got = toolkit.get_db_hash()
    with _HASHES_LOCK:
        _HASHES[key] = got
        while len(_HASHES) > _HASHES_MAX:
            _HASHES.popitem(last=False)
    return got


def fresh_environment(domain: str, task: Any, solo_mode: bool = False) -> Any:
    """Upstream's environment of ``domain`` in the task's initial state (its data, actions and message history)."""
    env = tau2().registry.get_env_constructor(domain)(solo_mode=solo_mode)
    init = task.initial_state
    env.set_state(
        initialization_data=init.initialization_data if init is not None else None,
        initialization_actions=init.initialization_actions if init is not None else None,
        message_history=(init.message_history or []) if init is not None else [],
    )
    return env


@dataclass(frozen=True)
class GoldStep:
    """One gold call: its name, arguments and requestor, and whether it changes the databases."""

    name: str
    arguments: dict[str, Any]
    requestor: str
    writes: bool
    fails: bool


class GoldPath:
    """The gold calls of one task with the database state after every prefix (see the module)."""

    def __init__(self, domain: str, task: Any):
        criteria = task.evaluation_criteria
        self.actions: tuple[Any, ...] = tuple((criteria.actions or []) if criteria is not None else [])
        env = fresh_environment(domain, task)
        hashes = [db_hashes(env)]
        steps = []
        m = tau2().message
        for k, action in enumerate(self.actions):
            # upstream's evaluator replays gold calls with make_tool_call and ignores their errors; the live
            # conversation goes through get_response (which also syncs the user's device): so does this replay
            out = env.get_response(
                m.ToolCall(
                    id=f"gold-{k}", name=action.name, arguments=action.arguments, requestor=action.requestor
                )
            )
            hashes.append(db_hashes(env))
            steps.append(
                GoldStep(
                    action.name, dict(action.arguments), action.requestor, hashes[-1] != hashes[-2], out.error
                )
            )
        self.steps: tuple[GoldStep, ...] = tuple(steps)
        self.hashes: tuple[tuple[str | None, str | None], ...] = tuple(hashes)
        self.n_writes = sum(s.writes for s in self.steps)

    def depth(self, state: tuple[str | None, str | None]) -> int | None:
        """The longest gold prefix whose database state is ``state`` (None: the state is on no gold prefix)."""
        for k in range(len(self.hashes) - 1, -1, -1):
            if self.hashes[k] == state:
                return k
        return None

    def writes_realised(self, depth: int | None) -> int:
        """Gold writes among the first ``depth`` gold calls (0 for a state off the gold path)."""
        return 0 if depth is None else sum(s.writes for s in self.steps[:depth])

    def pending(self, depth: int | None, called: list[Any]) -> list[int]:
        """Indices of the gold calls not yet realised, in gold order: a write beyond ``depth``, or a read (a call
        that changes nothing) that no call in ``called`` matches (upstream's ``compare_with_tool_call``).
        ``depth`` None (the state left the gold path): every gold call beyond the start is pending."""
        d = 0 if depth is None else depth
        out = []
        for k, (step, action) in enumerate(zip(self.steps, self.actions, strict=True)):
            if step.writes and k < d:
                continue
            if not step.writes and any(action.compare_with_tool_call(c) for c in called):
                continue
            out.append(k)
        return out
