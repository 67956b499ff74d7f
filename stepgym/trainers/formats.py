"""The reply renderer the scripted backend answers with (the formats themselves, and which env uses which, are
declared once: :mod:`stepgym.wrappers.text` and :mod:`stepgym.envs`)."""

from __future__ import annotations

from collections.abc import Callable

from stepgym.wrappers.text import FORMATS, TextFormat

__all__ = ["CREDIT_FORMAT", "has_action_tag", "reply_renderer"]

#: The credit-assignment toys' format (registered as ``"credit"`` in :data:`stepgym.wrappers.text.FORMATS`).
CREDIT_FORMAT = FORMATS["credit"]


#: The reply shapes a scripted action is written in, tried in order; the first one the format's own parser accepts
#: is used. A full turn the policy wrote itself (Search-QA's expert: ``<search>…</search>``) goes first, as is.
_SHAPES: tuple[Callable[[str], str], ...] = (
    lambda a: a,
    lambda a: f"<answer>{a}</answer>",
    lambda a: f"<action>{a}</action>",
    lambda a: f"<think>The next step is {a}.</think>\n<action>{a}</action>",
)


def reply_renderer(fmt: TextFormat) -> Callable[[str], str]:
    """How a scripted policy's action is written as a model reply in ``fmt``: the first of the shapes above
    (the action itself, ``<answer>``, ``<action>``, ``<think>`` + ``<action>``) that ``fmt.parse`` accepts, so the
    reply is valid in its own format by construction (every format of ``FORMATS``, and an env's own format with
    one of these shapes). An action no shape makes valid is written in the last shape, and parses as invalid."""

    def render(action: str) -> str:
        for shape in _SHAPES:
            reply = shape(action)
            if fmt.parse(reply).format_valid:
                return reply
        return _SHAPES[-1](action)

    return render


def has_action_tag(fmt: TextFormat) -> bool:
    """Whether ``fmt``'s replies carry an ``<action>…</action>`` tag (what StepOPSD's ``action_only`` spans
    target): the scripted reply of an action in it does."""
    return "<action>" in reply_renderer(fmt)("look")
