"""The protocol of a wrapper that keeps state in the parent process when its env copies run in workers.

Some wrappers hold state that every copy of a group must share and that grows from what the copies do: the
:class:`~stepgym.wrappers.arg.ARGWrapper`'s reference graph is the one stepgym ships. In one process the copies
share the wrapper's state object directly. When :class:`~stepgym.GroupEnv` runs them in worker processes (or on
Ray actors), each worker would otherwise hold its own copy and grow it apart from the others; instead such a
wrapper implements :class:`ParentStateWrapper` and the state is kept in the parent:

1. **Split.** ``GroupEnv`` finds the wrapper factory in ``wrappers=`` (the class, or a ``functools.partial`` of
   it) and calls ``cls.split_parent_state(*args, **kwargs)`` with the arguments the factory passes after the env.
   It returns the factory the workers build (one that reads the state and never changes it) and the
   :class:`ParentState` kept in this process. The worker factory carries the state as it is at that moment.
2. **Ship.** Before each reset, ``GroupEnv`` asks the parent state for its :meth:`~ParentState.payload` (plain,
   picklable data) and, when it differs from what the workers last got, sends it; in every worker each copy's
   wrapper receives it in :meth:`ParentStateWrapper.load_parent_state` (the worker pool's ``parent_state``
   operation). A worker that was restarted gets it again.
3. **Merge.** When every rollout of a group has finished, ``GroupEnv`` passes the group's trajectories (rollout
   order) to :meth:`ParentState.update`, which merges what the workers learned into the parent's state.

A state that changes in the parent (:attr:`ParentState.grows`) is refused on an executor shared by several groups
(each worker would grow its own copy): there, pass a wrapper that does not grow and update the state yourself.

Example (a wrapper counting the episodes every copy has finished, shared through the parent)::

    >>> import functools
    >>> import gymnasium as gym
    >>> class Count(gym.Wrapper):
    ...     def __init__(self, env, seen=0):
    ...         super().__init__(env)
    ...         self.seen = seen
    ...     @classmethod
    ...     def split_parent_state(cls, seen=0):
    ...         state = CountState(seen)
    ...         return functools.partial(cls, seen=seen), state
    ...     def load_parent_state(self, payload):
    ...         self.seen = payload
    >>> class CountState:
    ...     grows = True
    ...     def __init__(self, seen):
    ...         self.seen = seen
    ...     def payload(self):
    ...         return self.seen
    ...     def update(self, trajectories):
    ...         self.seen += len(trajectories)
    >>> isinstance(Count, ParentStateWrapper), isinstance(CountState(0), ParentState)
    (True, True)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    import gymnasium as gym

    from stepgym.schema import Trajectory

__all__ = ["ParentState", "ParentStateWrapper", "parent_state_wrappers", "split_parent_states"]

WrapperFn = Callable[["gym.Env"], "gym.Env"]


@runtime_checkable
class ParentState(Protocol):
    """What the parent process keeps of a :class:`ParentStateWrapper` whose copies run in workers."""

    @property
    def grows(self) -> bool:
        """Whether :meth:`update` changes the state (a shared remote executor refuses such a wrapper)."""
        ...

    def payload(self) -> Any:
        """The state as plain, picklable data for the workers; equal payloads mean nothing to send."""
        ...

    def update(self, trajectories: Sequence[Trajectory]) -> None:
        """Merge a finished group's trajectories (rollout order) into the state."""
        ...


@runtime_checkable
class ParentStateWrapper(Protocol):
    """A wrapper class whose state stays in the parent process when its copies run in workers (module docstring)."""

    @classmethod
    def split_parent_state(cls, *args: Any, **kwargs: Any) -> tuple[WrapperFn, ParentState]:
        """From the factory's arguments (those after the env): the factory the workers build, which reads the
        state and never changes it, and the state kept in the parent."""
        ...

    def load_parent_state(self, payload: Any) -> None:
        """In a worker: use the parent's state, sent as :meth:`ParentState.payload` returned it."""
        ...


def _factory_parts(w: Any) -> tuple[Any, tuple[Any, ...], dict[str, Any]]:
    import functools

    if isinstance(w, functools.partial):
        return w.func, w.args, dict(w.keywords)
    return w, (), {}


def split_parent_states(
    wrappers: Sequence[WrapperFn],
) -> tuple[tuple[WrapperFn, ...], tuple[ParentState, ...]]:
    """``wrappers`` with each :class:`ParentStateWrapper` factory replaced by its worker factory, and the states
    kept in the parent, in wrapper order (first = innermost)."""
    out: list[WrapperFn] = []
    states: list[ParentState] = []
    for w in wrappers:
        fn, args, kwargs = _factory_parts(w)
        if isinstance(fn, type) and isinstance(fn, ParentStateWrapper):
            worker_factory, state = fn.split_parent_state(*args, **kwargs)
            out.append(worker_factory)
            states.append(state)
        else:
            out.append(w)
    return tuple(out), tuple(states)


def parent_state_wrappers(env: Any) -> list[ParentStateWrapper]:
    """The wrappers around ``env`` that implement :class:`ParentStateWrapper`, innermost first (the order of
    :func:`split_parent_states`'s states)."""
    import gymnasium as gym

    found: list[Any] = []
    e: Any = env
    while isinstance(e, gym.Wrapper):
        if isinstance(type(e), ParentStateWrapper):  # the class: a wrapper's __getattr__ must not answer
            found.append(e)
        e = e.env
    return found[::-1]
