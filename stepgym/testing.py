"""The test battery every stepgym env passes, shipped in the package so users can run it on their own envs.

Like PettingZoo's ``parallel_api_test``: ``check_text_env(make_env)`` runs Gymnasium's ``check_env``, a seeded
multi-step determinism check (same seed and actions => identical observations, rewards, flags and infos) and a
fuzz of malformed actions that must be answered, never raised.

Text spaces: stepgym's envs declare :class:`stepgym.spaces.UnicodeText` (any ``str`` up to a length). An env that
declares Gymnasium's ``gym.spaces.Text`` is accepted too: ``Text`` admits only its charset (letters and digits by
default, so ``"Two lamps are off."`` is outside ``Text(200)``), which no natural-language env means, so by default
the battery reads a ``Text`` space as "a string of its min..max length" (``strict_charset=True`` keeps Gymnasium's
reading, and its failure then names the space and what to use instead).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import gymnasium as gym
from gymnasium.utils.env_checker import check_env

__all__ = ["FUZZ_ACTIONS", "assert_same_infos", "check_determinism", "check_fuzz", "check_text_env"]

FUZZ_ACTIONS: tuple[Any, ...] = (
    "",
    " ",
    "\t\n  \r",
    "x" * 10_000,
    "go to " + "desk " * 2_000,
    "Ünïcödé 漢字 🙂 кириллица",
    "\x00\x01\x02\x1b[31mred\x1b[0m",
    "\u200b\u200b",
    "click[",
    "search[]",
    "]]][[[",
    "<action></action>",
    "take 🙂 from 🙂",
    "DROP TABLE products;--",
    "../../etc/passwd",
)


def assert_same_infos(a: dict[str, Any], b: dict[str, Any], where: str = "") -> None:
    """Deep equality of two info dicts (NaN equals NaN), with a message that names the differing key."""
    if a.keys() != b.keys():
        raise AssertionError(f"{where}: info keys differ: {sorted(set(a) ^ set(b))}")
    for k in a:
        if not _equal(a[k], b[k]):
            raise AssertionError(f"{where}: info[{k!r}] differs: {a[k]!r} != {b[k]!r}")


def _equal(x: Any, y: Any) -> bool:
    if isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y):
        return True
    if isinstance(x, dict) and isinstance(y, dict):
        return x.keys() == y.keys() and all(_equal(x[k], y[k]) for k in x)
    if isinstance(x, list | tuple) and isinstance(y, list | tuple):
        return len(x) == len(y) and all(_equal(u, v) for u, v in zip(x, y, strict=True))
    return type(x) is type(y) and x == y


def _rollout(
    env: gym.Env, seed: int, actions: Sequence[Any] | Callable[[int, str, dict], Any], n: int
) -> list[tuple]:
    obs, info = env.reset(seed=seed)
    trace: list[tuple] = [("reset", obs, info)]
    for t in range(n):
        a = actions(t, obs, info) if callable(actions) else actions[t % len(actions)]
        obs, r, term, trunc, info = env.step(a)
        trace.append((a, obs, r, term, trunc, info))
        if term or trunc:
            break
    return trace


def check_determinism(
    make_env: Callable[[], gym.Env], seed: int = 0, actions: Any = None, n_steps: int = 20
) -> int:
    """Two fresh envs, same seed and actions: every observation, reward, flag and info must be identical.

    ``actions`` is a sequence (cycled) or ``f(t, obs, info) -> action``; by default it is drawn from the first
    admissible action list in info, or the action space. Returns the number of steps compared.
    """
    from stepgym import schema

    if actions is None:

        def actions(t: int, obs: str, info: dict) -> Any:
            adm = info.get(schema.ADMISSIBLE_ACTIONS)
            return adm[(7 * t + 3) % len(adm)] if adm else f"action {t}"

    env_a, env_b = make_env(), make_env()
    try:
        ta = _rollout(env_a, seed, actions, n_steps)
        tb = _rollout(env_b, seed, actions, n_steps)
    finally:
        env_a.close()
        env_b.close()
    if len(ta) != len(tb):
        raise AssertionError(f"episode lengths differ: {len(ta)} vs {len(tb)}")
    for i, (ra, rb) in enumerate(zip(ta, tb, strict=True)):
        for j, (x, y) in enumerate(zip(ra, rb, strict=True)):
            if isinstance(x, dict):
                assert_same_infos(x, y, where=f"step {i}")
            elif not _equal(x, y):
                raise AssertionError(f"step {i}, field {j}: {x!r} != {y!r}")
    return len(ta) - 1


def check_fuzz(
    env: gym.Env, seed: int = 0, actions: Sequence[Any] = FUZZ_ACTIONS
) -> list[tuple[Any, str, dict]]:
    """Every malformed action must return normally with a string observation; returns (action, obs, info)."""
    out = []
    env.reset(seed=seed)
    for a in actions:
        obs, r, term, trunc, info = env.step(a)
        if not isinstance(obs, str):
            raise AssertionError(f"observation for {a!r:.40} is {type(obs).__name__}, not str")
        if not isinstance(r, float) or not isinstance(term, bool) or not isinstance(trunc, bool):
            raise AssertionError(f"bad types for {a!r:.40}: {type(r)}, {type(term)}, {type(trunc)}")
        out.append((a, obs, info))
        if term or trunc:
            env.reset(seed=seed)
    return out


def check_text_env(
    make_env: Callable[[], gym.Env] | gym.Env, seed: int = 0, *, strict_charset: bool = False
) -> None:
    """The whole battery: ``check_env`` on the unwrapped env, determinism, fuzz. ``strict_charset``: see the
    module docstring (``gym.spaces.Text`` spaces).

    ``make_env`` is a factory (``lambda: gym.make("MyOrg/My-v0")``: determinism needs fresh copies) or an env
    made with ``gym.make``: its spec then makes the copies (the env itself is checked, never closed). An env
    without a spec (built by calling its class) is refused with a ``TypeError`` that asks for a factory."""
    if isinstance(make_env, gym.Env):
        make_env = _factory_of(make_env)
    env = make_env()
    try:
        core = env.unwrapped
        if strict_charset:
            _check_env_explained(core)
        else:
            with _text_spaces_as_unicode(core):
                check_env(core, skip_render_check=True)
    finally:
        env.close()
    check_determinism(make_env, seed=seed)
    env = make_env()
    try:
        check_fuzz(env, seed=seed)
    finally:
        env.close()


def _factory_of(env: gym.Env) -> Callable[[], gym.Env]:
    """A factory of copies of ``env`` (made with ``gym.make``: its spec says how)."""
    spec = env.spec if env.spec is not None and env.spec.entry_point is not None else None
    if spec is None:
        raise TypeError(
            f"check_text_env needs a factory, e.g. check_text_env(lambda: gym.make(ID)), or an env made with "
            f"gym.make; this {type(env.unwrapped).__name__} has no spec to make the copies the checks compare"
        )
    return lambda: gym.make(spec)


def _text_spaces(env: gym.Env) -> dict[str, gym.spaces.Text]:
    names = ("observation_space", "action_space")
    return {n: getattr(env, n) for n in names if isinstance(getattr(env, n, None), gym.spaces.Text)}


@contextlib.contextmanager
def _text_spaces_as_unicode(env: gym.Env) -> Iterator[None]:
    """Give the env, for the duration, a ``UnicodeText`` of the same lengths in place of each ``Text`` space."""
    from stepgym.spaces import UnicodeText

    saved = _text_spaces(env)
    try:
        for name, space in saved.items():
            setattr(env, name, UnicodeText(max_length=space.max_length, min_length=space.min_length))
        yield
    finally:
        for name, space in saved.items():
            setattr(env, name, space)


def _check_env_explained(env: gym.Env) -> None:
    try:
        check_env(env, skip_render_check=True)
    except AssertionError as exc:
        texts = _text_spaces(env)
        if not texts:
            raise
        which = ", ".join(f"{n} = {s!r}" for n, s in texts.items())
        raise AssertionError(
            f"{exc}\nThe env declares {which}: Gymnasium's Text admits only its charset (letters and digits by "
            "default; spaces and punctuation are outside it). For free-form text use "
            "stepgym.spaces.UnicodeText(max_length=...), give Text a charset that covers the env's text, or run "
            "check_text_env without strict_charset."
        ) from exc
