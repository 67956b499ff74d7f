"""Text rules shared by envs, wrappers and the reference graph, written once.

Several components compare actions as a person would read them: the ARG labels edges with actions, the oracle
analyzer compares a step with the expert's action, the feedback wrapper looks an action up in the admissible list,
and WebShop matches ``click[...]`` arguments against what the page shows. They must agree on when two action
strings are "the same", so the rule lives here, at the bottom of the import graph (envs may import it; it
imports nothing from stepgym).
"""

from __future__ import annotations

from typing import Any

__all__ = ["normalize_action"]


def normalize_action(action: Any) -> str:
    """An action for comparison: ``str()`` of it, lower-cased, whitespace runs collapsed to one space, stripped.

    ``"Go to  Desk 1"`` and ``" go to desk 1\\n"`` both give ``"go to desk 1"``.
    """
    return " ".join(str(action).lower().split())
