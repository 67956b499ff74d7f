"""The reply renderer the scripted backend answers with (the formats themselves, and which env uses which, are
declared once: :mod:`stepgym.wrappers.text` and :mod:`stepgym.envs`)."""

from __future__ import annotations

from collections.abc import Callable

from stepgym.wrappers.text import FORMATS, TextFormat

__all__ = ["CREDIT_FORMAT", "reply_renderer"]

#: The credit-assignment toys' format (registered as ``"credit"`` in :data:`stepgym.wrappers.text.FORMATS`).
CREDIT_FORMAT = FORMATS["credit"]


def reply_renderer(fmt: TextFormat) -> Callable[[str], str]:
    """How a scripted policy's action is written as a model reply in ``fmt`` (a valid reply by construction)."""
    if fmt.name == "credit":
        return lambda a: f"<action>{a}</action>"
    if fmt.name == "qa":
        return lambda a: a if "<" in a else f"<answer>{a}</answer>"
    return lambda a: f"<think>The next step is {a}.</think>\n<action>{a}</action>"
