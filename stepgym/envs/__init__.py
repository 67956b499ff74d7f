"""stepgym's Gymnasium envs, registered under the ``StepGym`` namespace.

Entry points are strings, so registering imports none of the engines: TextWorld, the search indexes and the
browser load only when an env is made. Variants are keyword arguments (``split=``, ``goals=``, ``retriever=``),
never new id strings.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import gymnasium

from stepgym.errors import InvalidArgumentError

__all__ = ["ENV_IDS", "EnvEntry", "ExactStepLimit", "check_env_kwargs", "register_envs", "text_format_of"]


class EnvEntry(NamedTuple):
    """What stepgym declares about each env it registers, in one place."""

    entry_point: str
    #: the default step limit: the class's defaults (e.g. SearchQA's max_turns=4 + the forced answer turn,
    #: CreditFamily's horizon 10 + slack 10); tests/test_names.py checks them against the classes. Every env
    #: takes its limit as ``max_steps=`` (all steps, SearchQA's answer turn included); an env may also keep a
    #: historical keyword (SearchQA's ``max_turns``, CreditFamily's ``slack``) and refuses a contradiction.
    max_steps: int
    #: the name of its text format in :data:`stepgym.wrappers.text.FORMATS` (the prompt and the reply parser an
    #: LLM policy uses with it; :func:`stepgym.wrappers.text.make_text_env` looks it up here).
    text_format: str


_ENVS: dict[str, EnvEntry] = {
    "StepGym/ALFWorld-v0": EnvEntry("stepgym.envs.alfworld:ALFWorldEnv", 50, "alfworld"),
    "StepGym/WebShop-v0": EnvEntry("stepgym.envs.webshop:WebShopEnv", 15, "webshop"),
    "StepGym/WebShopSite-v0": EnvEntry("stepgym.envs.webshop:WebShopSiteEnv", 15, "webshop"),
    "StepGym/SearchQA-v0": EnvEntry("stepgym.envs.searchqa:SearchQAEnv", 5, "qa"),
    "StepGym/CreditToy-v0": EnvEntry("stepgym.envs.credit:CreditToyEnv", 10, "credit"),
    "StepGym/CreditFamily-v0": EnvEntry("stepgym.envs.credit_family:CreditFamilyEnv", 20, "credit"),
}
ENV_IDS = tuple(_ENVS)


def text_format_of(env_id: str) -> str | None:
    """The text format declared for a registered stepgym env id, or ``None`` for any other id."""
    entry = _ENVS.get(env_id)
    return entry.text_format if entry is not None else None


def check_env_kwargs(env_id: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` for ``gym.make(env_id, **kwargs)``, checked against the env's constructor (a command line's options).

    ``data_root`` is dropped for an env that reads no data files (the CreditToy and CreditFamily envs), so a
    shared ``--data-root`` flag works on every env; any other keyword the env does not take is an
    :class:`~stepgym.errors.InvalidArgumentError` naming the keywords it does take. Ids stepgym does not register
    pass through unchecked.
    """
    entry = _ENVS.get(env_id)
    if entry is None:
        return dict(kwargs)
    import importlib
    import inspect

    module, _, name = entry.entry_point.partition(":")
    params = inspect.signature(getattr(importlib.import_module(module), name)).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return dict(kwargs)
    out = {k: v for k, v in kwargs.items() if k in params or k != "data_root"}
    unknown = sorted(set(out) - set(params))
    if unknown:
        raise InvalidArgumentError(
            f"{env_id} takes no option {', '.join(unknown)}; its options are "
            f"{', '.join(p for p in params if p != 'self')}"
        )
    return out


def register_envs() -> None:
    """Register every stepgym env with Gymnasium (idempotent).

    Each id is registered with its default step limit, so code that reads the registry (``gym.spec(id)``, vector
    envs, a trainer's config check) sees it. ``gym.make`` then adds Gymnasium's ``TimeLimit``; the outermost
    :class:`ExactStepLimit` (an ``additional_wrappers`` entry of the spec) keeps that limit and the env's own one
    the same number and the env's exact ``truncated``.
    """
    for env_id, entry in _ENVS.items():
        if env_id in gymnasium.registry:
            continue
        gymnasium.register(
            id=env_id,
            entry_point=entry.entry_point,
            disable_env_checker=False,
            max_episode_steps=entry.max_steps,
            additional_wrappers=(
                gymnasium.envs.registration.WrapperSpec("ExactStepLimit", f"{__name__}:ExactStepLimit", {}),
            ),
        )


class ExactStepLimit(gymnasium.Wrapper, gymnasium.utils.RecordConstructorArgs):
    """Make Gymnasium's ``TimeLimit`` (added by ``gym.make`` from the registered limit) agree with the env's own.

    stepgym's envs enforce their step limit themselves (it is part of the task, e.g. SearchQA's forced answer turn,
    and ``truncated`` must be exact for the papers' protocol: never set on the step that terminates). Gymnasium's
    ``TimeLimit`` sets ``truncated`` on the last allowed step even when that step wins. So this wrapper, applied
    right outside it:

    * gives the two limits one value: ``gym.make(id, max_episode_steps=N)`` sets the env's limit to N; otherwise
      the ``TimeLimit`` takes the env's own (``max_steps=``, ``max_turns=``, ... as passed);
    * refuses ``max_episode_steps`` that contradicts the env's own keyword, naming both;
    * passes the env's ``truncated`` through unchanged on a terminating step.
    """

    def __init__(self, env: gymnasium.Env) -> None:
        gymnasium.utils.RecordConstructorArgs.__init__(self)
        gymnasium.Wrapper.__init__(self, env)
        limit = _time_limit(env)
        core: Any = env.unwrapped
        if limit is None or not hasattr(core, "max_steps"):
            return
        registered = gymnasium.registry.get(getattr(core.spec, "id", ""), None)
        default = getattr(registered, "max_episode_steps", None)
        asked = int(limit._max_episode_steps)
        if asked != default:  # gym.make(..., max_episode_steps=N): the user's limit
            if core.max_steps not in (default, asked):
                raise InvalidArgumentError(
                    f"max_episode_steps={asked} contradicts the env's own step limit {core.max_steps} (its "
                    f"keyword, e.g. max_steps=): pass one of them"
                )
            core.max_steps = asked
        limit._max_episode_steps = int(core.max_steps)
        limit._cached_spec = None

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        if terminated:  # TimeLimit flags a win on the last allowed step as truncated too; the env does not
            truncated = False
        return obs, reward, terminated, truncated, info


def _time_limit(env: Any) -> Any:
    while isinstance(env, gymnasium.Wrapper):
        if isinstance(env, gymnasium.wrappers.TimeLimit):
            return env
        env = env.env
    return None
