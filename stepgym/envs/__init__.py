# Over 400 lines: the registry: every built-in env's registration and what it declares.
"""stepgym's Gymnasium envs, registered under the ``StepGym`` namespace.

A built-in env is one folder here whose ``__init__`` makes one :func:`register` call (the credit toys' folder makes
two, one per toy): its entry point, step limit, text format, splits, value oracle (``values.py`` in the same folder)
and task types. Importing this package imports each folder (:func:`register_envs`), so every registered env is in
:data:`ENV_IDS`. Entry points are strings and the folders export their classes lazily, so registering imports none of
the engines: TextWorld, the search indexes and the browser load only when an env is made. Variants are keyword
arguments (``split=``, ``goals=``, ``retriever=``), never new id strings.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium

from stepgym.errors import InvalidArgumentError

__all__ = [
    "ENV_IDS",
    "EnvEntry",
    "EnvSplits",
    "ExactStepLimit",
    "check_env_kwargs",
    "check_split",
    "env_entry",
    "env_has_splits",
    "env_make_kwargs",
    "register",
    "register_envs",
    "registered_envs",
    "resolve_env_id",
    "text_format_of",
]


@dataclass(frozen=True)
class EnvSplits:
    """The ``split=`` values an env accepts and the one an evaluation uses when none is named (the papers'
    evaluation split: ALFWorld's in-distribution ``valid_seen``, WebShop's and Search-QA's ``test``)."""

    names: tuple[str, ...]
    evaluation: str

    def __post_init__(self) -> None:
        if not self.names or self.evaluation not in self.names:
            raise InvalidArgumentError(
                f"EnvSplits: the evaluation split {self.evaluation!r} must be one of the splits {self.names}"
            )


@dataclass(frozen=True)
class EnvEntry:
    """What an env declares about itself when it is registered (:func:`register`): everything a trainer, an
    evaluation, the text interface or :class:`~stepgym.values.ValueWrapper` needs to know about it, in one place."""

    entry_point: str
    """``"module:Class"`` (or a factory): imported only when the env is made."""
    max_steps: int
    """The default step limit. The env takes its limit as ``max_steps=`` (every step counts, SearchQA's forced
    answer turn included); an env may also keep a historical keyword (SearchQA's ``max_turns``, CreditFamily's
    ``slack``) and refuse a contradiction. tests/test_names.py checks stepgym's own against the classes."""
    text_format: str | None = None
    """Its text format: a name in :data:`stepgym.wrappers.text.FORMATS`, or ``"module:ATTR"`` naming a
    :class:`~stepgym.text_format.TextFormat` (an env's own prompt, in its own module). ``None``: the plain format
    (:func:`stepgym.wrappers.text.resolve_format` says so in the log)."""
    splits: EnvSplits | None = None
    """The ``split=`` values it takes and its evaluation split; ``None``: it takes no ``split=``."""
    value_oracle: str | None = None
    """``"module:factory"``; ``factory(env, budget)`` returns its :class:`~stepgym.envs.oracle.ValueOracle` (the
    exact step values of :class:`~stepgym.values.ValueWrapper`). ``None``: no oracle, unless the env class brings
    a ``value_oracle(budget)`` method."""
    no_values: str | None = None
    """Why the env has no exact step values (e.g. its state is too large): ``ValueWrapper`` refuses it with this
    reason instead of guessing."""
    task_types: tuple[str, ...] | str = ()
    """The task types its info's ``TASK_TYPE`` takes (success is reported per type); ``()`` when untyped; or
    ``"module:ATTR"`` naming the tuple, read on first use (:meth:`types`), so registering imports nothing."""

    def types(self) -> tuple[str, ...]:
        """The declared task types (a ``"module:ATTR"`` reference imported now)."""
        if isinstance(self.task_types, str):
            import importlib

            module, _, attr = self.task_types.partition(":")
            return tuple(str(t) for t in getattr(importlib.import_module(module), attr))
        return self.task_types


_ENVS: dict[str, EnvEntry] = {}


def register(
    env_id: str,
    entry_point: str,
    *,
    max_steps: int,
    text_format: str | None = None,
    splits: EnvSplits | Sequence[str] | None = None,
    value_oracle: str | None = None,
    no_values: str | None = None,
    task_types: Sequence[str] | str = (),
) -> EnvEntry:
    """Register a text env with Gymnasium and declare what stepgym needs to know about it (:class:`EnvEntry`).

    One call per env, the way ``gymnasium.register`` is called: stepgym's own envs are registered this way
    (each in its own folder, :func:`register_envs`) and so is a user's (docs/byo_env.md). The entry point is a string, so nothing heavy
    is imported until the env is made. ``splits`` may be a sequence of names (the first is then the evaluation
    split). Registering the same id again with the same declaration does nothing; with another one it is an
    :class:`~stepgym.errors.InvalidArgumentError`.

    The registered spec carries the step limit (``max_episode_steps``) and :class:`ExactStepLimit`, so
    ``gym.make(env_id)`` truncates exactly where the env does.
    """
    if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
        raise InvalidArgumentError(
            f"register({env_id!r}): max_steps must be a positive int, got {max_steps!r}"
        )
    if not isinstance(entry_point, str) or ":" not in entry_point:
        raise InvalidArgumentError(
            f"register({env_id!r}): entry_point must be a 'module:Class' string, got {entry_point!r}"
        )
    for name, ref in (("text_format", text_format), ("value_oracle", value_oracle)):
        if ref is not None and not isinstance(ref, str):
            raise InvalidArgumentError(f"register({env_id!r}): {name} must be a string, got {ref!r}")
    if value_oracle is not None and ":" not in value_oracle:
        raise InvalidArgumentError(
            f"register({env_id!r}): value_oracle must be a 'module:factory' string, got {value_oracle!r}"
        )
    if value_oracle is not None and no_values is not None:
        raise InvalidArgumentError(f"register({env_id!r}): pass value_oracle or no_values, not both")
    if splits is not None and not isinstance(splits, EnvSplits):
        names = tuple(str(n) for n in splits)
        splits = EnvSplits(names, names[0] if names else "")
    if isinstance(task_types, str) and ":" not in task_types:
        raise InvalidArgumentError(
            f"register({env_id!r}): task_types is a sequence of names or a 'module:ATTR' string, got {task_types!r}"
        )
    types = task_types if isinstance(task_types, str) else tuple(str(t) for t in task_types)
    entry = EnvEntry(entry_point, int(max_steps), text_format, splits, value_oracle, no_values, types)
    known = _ENVS.get(env_id)
    if known is not None:
        if known != entry:
            raise InvalidArgumentError(f"{env_id} is already registered with another declaration: {known}")
        return known
    if env_id in gymnasium.registry:
        raise InvalidArgumentError(
            f"{env_id} is already registered with Gymnasium; register it once, with stepgym.envs.register"
        )
    gymnasium.register(
        id=env_id,
        entry_point=entry_point,
        disable_env_checker=False,
        max_episode_steps=entry.max_steps,
        additional_wrappers=(
            gymnasium.envs.registration.WrapperSpec("ExactStepLimit", f"{__name__}:ExactStepLimit", {}),
        ),
    )
    _ENVS[env_id] = entry
    return entry


def resolve_env_id(env_id: str) -> str:
    """The registry id of ``env_id``: Gymnasium's ``"module:Env-v0"`` form imports ``module`` (which registers the
    env, with :func:`register` or ``gymnasium.register``) and names ``Env-v0``; any other id is returned as is.

    A module that cannot be imported is an :class:`~stepgym.errors.InvalidArgumentError` naming it (one line)."""
    if not isinstance(env_id, str) or ":" not in env_id:
        return env_id
    module, _, bare = env_id.partition(":")
    import importlib

    try:
        importlib.import_module(module)
    except ModuleNotFoundError as exc:
        raise InvalidArgumentError(
            f"{env_id}: cannot import the module {module!r} that registers it ({exc}); is its folder on "
            "PYTHONPATH, or the current folder?"
        ) from None
    return bare


def env_entry(env_id: str) -> EnvEntry | None:
    """What ``env_id`` declared at :func:`register`, or ``None`` for an env registered with Gymnasium only
    (``"module:Env-v0"`` imports the module first, :func:`resolve_env_id`)."""
    return _ENVS.get(resolve_env_id(env_id))


def registered_envs() -> dict[str, EnvEntry]:
    """Every env registered through :func:`register` (stepgym's own and the user's), by id."""
    return dict(_ENVS)


def text_format_of(env_id: str) -> str | None:
    """The text format declared for a registered env id, or ``None`` when it declared none."""
    entry = env_entry(env_id)
    return entry.text_format if entry is not None else None


def check_split(env_id: str, split: str | None, *, flag: str = "--split") -> str:
    """The split to use for ``env_id``: ``split`` itself when the env has it, the env's evaluation split when
    ``split`` is ``None``; an env that declared no splits keeps ``split`` as given ('' when ``None``).

    Raises :class:`~stepgym.errors.InvalidArgumentError` listing the env's splits for one it does not have.
    """
    entry = env_entry(env_id)
    known = entry.splits if entry is not None else None
    if known is None:
        return split or ""
    if split is None:
        return known.evaluation
    if split not in known.names:
        raise InvalidArgumentError(
            f"{env_id} has no split {split!r}; its splits are {', '.join(known.names)} "
            f"(e.g. {flag} {known.evaluation}, its evaluation split)"
        )
    return split


def check_env_kwargs(env_id: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` for ``gym.make(env_id, **kwargs)``, checked against the env's constructor (a command line's options).

    ``data_root`` is dropped for an env that takes no such keyword (the CreditToy and CreditFamily envs, a user's
    env), so a shared ``--data-root`` flag works on every env; any other keyword the env does not take is an
    :class:`~stepgym.errors.InvalidArgumentError` naming the keywords it does take. An env whose constructor
    takes ``**kwargs`` gets them all.
    """
    params = _constructor_params(env_id)
    if params is None or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return dict(kwargs)
    out = {k: v for k, v in kwargs.items() if k in params or k != "data_root"}
    unknown = sorted(set(out) - set(params))
    if unknown:
        raise InvalidArgumentError(
            f"{env_id} takes no option {', '.join(unknown)}; its options are "
            f"{', '.join(p for p in params if p != 'self') or '(none)'}"
        )
    return out


def _constructor_params(env_id: str) -> Mapping[str, inspect.Parameter] | None:
    """The parameters of the registered entry point of ``env_id``, or ``None`` when they cannot be read (an id
    Gymnasium does not know, an entry point that does not import: ``gym.make`` says what is wrong with it)."""
    spec = gymnasium.registry.get(resolve_env_id(env_id))
    if spec is None or (not isinstance(spec.entry_point, str) and not callable(spec.entry_point)):
        return None
    try:
        target = (
            gymnasium.envs.registration.load_env_creator(spec.entry_point)
            if isinstance(spec.entry_point, str)
            else spec.entry_point
        )
        return _with_options_class(target, inspect.signature(target).parameters)
    except (ImportError, AttributeError, ValueError, TypeError):
        return None


def _with_options_class(
    target: Any, params: Mapping[str, inspect.Parameter]
) -> Mapping[str, inspect.Parameter]:
    """An env whose constructor takes ``**options`` for the fields of its ``options_class`` dataclass
    (:mod:`stepgym.envs.options`) takes exactly those names besides its own keywords."""
    cls = getattr(target, "options_class", None)
    var = [n for n, p in params.items() if p.kind is inspect.Parameter.VAR_KEYWORD]
    if not var or not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
        return params
    out = {n: p for n, p in params.items() if n not in var}
    for f in dataclasses.fields(cls):
        default = f.default if f.default is not dataclasses.MISSING else inspect.Parameter.empty
        out.setdefault(f.name, inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=default))
    return out


def _takes(params: Mapping[str, inspect.Parameter] | None, name: str) -> bool:
    return params is not None and name in params and params[name].kind is not inspect.Parameter.VAR_POSITIONAL


def env_make_kwargs(
    env_id: str, kwargs: Mapping[str, Any] | None = None, *, split: str | None = None, max_steps: int = 0
) -> dict[str, Any]:
    """Keyword arguments for ``gym.make(env_id, **out)`` that give the env a split and a step limit the way it
    offers them (the capabilities a trainer uses when an env has them; any Gymnasium text env works):

    * ``split`` (when not empty) is passed as ``split=`` when the env declared splits at :func:`register` (checked
      by :func:`check_split`) or its constructor takes a ``split`` parameter; an env with neither has no splits,
      and ``split`` is dropped (its tasks are drawn by seed, :func:`env_task_ids`).
    * ``max_steps`` (when > 0) is passed as ``max_steps=`` when the constructor takes it (every stepgym env does),
      else as ``max_episode_steps=``: ``gym.make`` then cuts episodes with Gymnasium's ``TimeLimit``. ``0`` keeps
      the env's own limit (its spec's ``max_episode_steps``, if any).

    ``kwargs`` (the user's own keywords) are checked by :func:`check_env_kwargs` and win over both. An id
    Gymnasium does not know is an :class:`~stepgym.errors.InvalidArgumentError` (one line, no traceback).
    """
    if resolve_env_id(env_id) not in gymnasium.registry:
        import difflib

        close = difflib.get_close_matches(resolve_env_id(env_id), list(gymnasium.registry), n=1, cutoff=0.8)
        hint = f"did you mean {close[0]}? Or " if close else ""
        raise InvalidArgumentError(
            f"no env registered as {env_id!r}: {hint}register it (stepgym.envs.register or gymnasium.register) "
            "in a module and name it as 'module:Env-v0', or import that module first"
        )
    user = check_env_kwargs(env_id, dict(kwargs or {}))
    out: dict[str, Any] = {}
    params = _constructor_params(env_id)
    if split:
        entry = env_entry(env_id)
        if entry is not None and entry.splits is not None:
            out["split"] = check_split(env_id, split, flag="split")
        elif _takes(params, "split"):
            out["split"] = split
    if max_steps and max_steps > 0:
        out["max_steps" if _takes(params, "max_steps") else "max_episode_steps"] = int(max_steps)
    out.update(user)
    return out


def env_has_splits(env_id: str) -> bool:
    """Whether ``env_id`` takes ``split=`` (declared splits, or a ``split`` parameter of its constructor)."""
    entry = env_entry(env_id)
    return (entry is not None and entry.splits is not None) or _takes(_constructor_params(env_id), "split")


def _own_modules() -> list[str]:
    """This package's modules and folders, in name order: each env folder registers its env(s) when imported, with
    one :func:`register` call each."""
    import pkgutil

    return [m.name for m in pkgutil.iter_modules(__path__, f"{__name__}.")]


def register_envs() -> tuple[str, ...]:
    """Register stepgym's own envs and return their ids (:data:`ENV_IDS`). Idempotent; ``import stepgym`` runs it.

    A built-in env is one folder of this package plus the :func:`register` call in it: importing the
    folder registers the env, and this imports every one of them. Nothing else lists the envs: :data:`ENV_IDS`,
    the docs' env table and the site's navigation are generated from the registry (scripts/doc_figures.py)."""
    import importlib

    if not _OWN:  # the first call, at this package's import: every id registered now is stepgym's own
        known = set(_ENVS)
        for name in _own_modules():
            importlib.import_module(name)
        _OWN.extend(env_id for env_id in _ENVS if env_id not in known)
    return tuple(_OWN)


_OWN: list[str] = []


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


#: stepgym's own env ids, in the order their folders register them (a user's registered envs are in
#: :func:`registered_envs`). Read from the registry, never listed by hand.
ENV_IDS: tuple[str, ...] = register_envs()
