"""Text formats as the trainer looks them up (:func:`resolve_format`: by name, else by env id, from the one
registry in :mod:`stepgym.wrappers.text`), and the reply renderer the scripted backend answers with."""

from __future__ import annotations

from collections.abc import Callable

from stepgym.wrappers.text import ENV_FAMILIES, FORMATS, TextFormat, get_format

__all__ = ["CREDIT_FORMAT", "reply_renderer", "resolve_format"]

#: The credit-assignment toys' format (registered as ``"credit"`` in :data:`stepgym.wrappers.text.FORMATS`).
CREDIT_FORMAT = FORMATS["credit"]


def resolve_format(env_id: str, name: str = "") -> TextFormat:
    """The text format by name, else by env id (:data:`stepgym.wrappers.text.ENV_FAMILIES`)."""
    key = name or ENV_FAMILIES.get(env_id)
    if not key:
        raise ValueError(
            f"no text format known for {env_id!r}: pass --env.text-format {'|'.join(sorted(FORMATS))}"
        )
    return get_format(key)


def reply_renderer(fmt: TextFormat) -> Callable[[str], str]:
    """How a scripted policy's action is written as a model reply in ``fmt`` (a valid reply by construction)."""
    if fmt.name == "credit":
        return lambda a: f"<action>{a}</action>"
    if fmt.name == "qa":
        return lambda a: a if "<" in a else f"<answer>{a}</answer>"
    return lambda a: f"<think>The next step is {a}.</think>\n<action>{a}</action>"
