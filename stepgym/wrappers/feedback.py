"""Environment feedback and three separate validity flags for any text env.

AHEAD's teacher sees "environment feedback on every step" (the next observation, e.g. "Nothing happens."), so
every step's info should carry it. Frameworks commonly fold three different facts into one "valid action" flag;
they are kept apart here because they answer different questions:

* ``schema.FORMAT_VALID`` — the model's reply parsed into an action (set by
  :class:`~stepgym.wrappers.text.TextInterfaceWrapper`);
* ``schema.ADMISSIBLE`` — the env accepts this action in the state it was taken in;
* ``schema.EFFECTIVE`` — the action changed the world state.

:class:`EnvFeedbackWrapper` only **fills in what is missing**; an env or an inner wrapper that knows better
(ALFWorld and WebShop report ``ADMISSIBLE``/``EFFECTIVE`` from their engines) always wins. The fallbacks, in order:

``FEEDBACK``
    the observation returned by ``step`` ('' after ``reset``).
``FORMAT_VALID``
    the action is a usable string (``stepgym.envs.base.sanitize_action`` finds no problem with it). Without a text
    interface the caller passed the action directly, so the only "format" is being a non-empty string.
``ADMISSIBLE``
    0. ``False`` for a format-invalid step (no action was taken);
    1. the action (whitespace collapsed, case-insensitive) is in the ``ADMISSIBLE_ACTIONS`` list of the info the
       action was taken from;
    2. else, when the env reports ``INVALID_REASON``: the reason is empty;
    3. else the key is **left out**: an env that neither lists its actions nor says what it rejected cannot be
       judged, and guessing ``True`` would reproduce the conflation this wrapper exists to avoid.
``EFFECTIVE``
    1. ``False`` when the step is known format-invalid or inadmissible (a rejected action changes nothing — the
       ``TextEnv`` contract);
    2. else, when the state key is in both the previous and the new info: the key changed (``STATE_KEY`` by default;
       ``EnvFeedbackWrapper(env, state_key=...)`` names another info key or gives a function of the info, as
       ``ARGWrapper`` takes it);
    3. else ``None``: unknown. Neither an admissible list nor the observation text can say whether the world
       changed ("look" twice, a step counter in the text, two different error messages), and ``True`` there
       would mark every no-op effective. Readers of the flag (recordings, the viewer, the integrations' rates)
       treat ``None`` as unknown, not as ``False``. ``EnvFeedbackWrapper(env, observation_proxy=True)`` opts
       into the old, weak proxy instead (the observation changed), for envs whose text is a faithful state.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym

from stepgym import reference_graph as _rg
from stepgym import schema
from stepgym.envs.base import sanitize_action
from stepgym.text_utils import normalize_action

__all__ = ["EnvFeedbackWrapper", "fill_feedback_flags"]


def fill_feedback_flags(
    action: Any,
    info: dict[str, Any],
    *,
    observation: str,
    prev_info: dict[str, Any],
    prev_observation: str,
    observation_proxy: bool = False,
    state_key: Callable[[dict[str, Any]], Any] | str | None = None,
) -> dict[str, Any]:
    """Fill ``FEEDBACK``, ``FORMAT_VALID``, ``ADMISSIBLE`` and ``EFFECTIVE`` into ``info`` where missing.

    A pure function of the transition (``prev_info``/``prev_observation`` are from the state the action was taken
    in), so recorded trajectories can be annotated offline the same way. ``state_key`` is how ``EFFECTIVE`` reads
    the world state (``None``: ``schema.STATE_KEY``; an info key name; or a function of the info, as
    :class:`~stepgym.wrappers.arg.ARGWrapper` takes it); a state key missing from either info is unknown.
    ``observation_proxy`` judges ``EFFECTIVE`` by the observation text when there is no state key (else it is
    ``None``). Returns ``info`` (modified in place).
    """
    info.setdefault(schema.FEEDBACK, observation)
    if schema.FORMAT_VALID not in info:
        info[schema.FORMAT_VALID] = not sanitize_action(action)[1]
    if schema.PARSED_ACTION in info:  # a text interface sits inside: judge what the env received
        action = info[schema.PARSED_ACTION]
    if schema.ADMISSIBLE not in info:
        adm = prev_info.get(schema.ADMISSIBLE_ACTIONS)
        if info[schema.FORMAT_VALID] is False:
            info[schema.ADMISSIBLE] = False
        elif isinstance(adm, list | tuple) and isinstance(action, str):
            info[schema.ADMISSIBLE] = normalize_action(action) in {
                normalize_action(a) for a in adm if isinstance(a, str)
            }
        elif isinstance(info.get(schema.INVALID_REASON), str):
            info[schema.ADMISSIBLE] = info[schema.INVALID_REASON] == ""
    if schema.EFFECTIVE not in info:
        if info[schema.FORMAT_VALID] is False or info.get(schema.ADMISSIBLE) is False:
            info[schema.EFFECTIVE] = False
        elif (keys := _state_keys(state_key, prev_info, info)) is not None:
            info[schema.EFFECTIVE] = keys[0] != keys[1]
        elif observation_proxy:
            info[schema.EFFECTIVE] = observation != prev_observation
        else:
            info[schema.EFFECTIVE] = None  # unknown: nothing here can tell a no-op from a change
    return info


def _state_keys(
    state_key: Callable[[dict[str, Any]], Any] | str | None, before: dict[str, Any], after: dict[str, Any]
) -> tuple[Any, Any] | None:
    """The state keys of the two infos, or None when either lacks one."""
    if state_key is None:
        if schema.STATE_KEY in before and schema.STATE_KEY in after:
            return before[schema.STATE_KEY], after[schema.STATE_KEY]
        return None
    key = _rg.state_key_function(state_key)  # the ARG's rule: a name must be in info, a function is applied
    try:
        return key(before), key(after)
    except KeyError:
        return None


class EnvFeedbackWrapper(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Annotate every step with ``FEEDBACK``, ``FORMAT_VALID``, ``ADMISSIBLE`` and ``EFFECTIVE`` (see the module).

    Works on any Gymnasium env with text observations; values the env (or an inner wrapper) already put in info
    are never changed. Place it inside a :class:`~stepgym.wrappers.text.TextInterfaceWrapper` or outside it:
    inside, it sees the parsed action; outside, it judges ``PARSED_ACTION`` and keeps the flags the text interface
    set. (Outside a text interface with ``prompt_as_observation=True`` the observation fallback would compare
    prompts: put it inside then.) ``state_key``: how ``EFFECTIVE`` reads the world state, as ``ARGWrapper``'s
    (``None``: ``schema.STATE_KEY``; an info key name; a function of the info). ``observation_proxy=True``: see
    ``EFFECTIVE`` in the module docstring.

    Example::

        >>> import gymnasium as gym
        >>> import stepgym
        >>> from stepgym import schema
        >>> from stepgym.wrappers import EnvFeedbackWrapper
        >>> env = EnvFeedbackWrapper(gym.make("StepGym/CreditToy-v0"))
        >>> _ = env.reset(seed=0)
        >>> obs, reward, terminated, truncated, info = env.step("dance")
        >>> info[schema.FORMAT_VALID], info[schema.ADMISSIBLE], info[schema.FEEDBACK]
        (True, False, 'Nothing happens.')
    """

    def __init__(
        self,
        env: gym.Env,
        *,
        observation_proxy: bool = False,
        state_key: Callable[[dict[str, Any]], Any] | str | None = None,
    ):
        gym.utils.RecordConstructorArgs.__init__(
            self, observation_proxy=observation_proxy, state_key=state_key
        )
        gym.Wrapper.__init__(self, env)
        self.observation_proxy = bool(observation_proxy)
        self.state_key = state_key
        self._prev_obs = ""
        self._prev_info: dict[str, Any] = {}

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        info.setdefault(schema.FEEDBACK, "")
        self._prev_obs, self._prev_info = obs, info
        return obs, info

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        fill_feedback_flags(
            action,
            info,
            observation=obs,
            prev_info=self._prev_info,
            prev_observation=self._prev_obs,
            observation_proxy=self.observation_proxy,
            state_key=self.state_key,
        )
        self._prev_obs, self._prev_info = obs, info
        return obs, reward, terminated, truncated, info
