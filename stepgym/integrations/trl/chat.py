"""Chat-template helpers for TRL: a template that renders tool calls, and the tokens a template puts around a
turn (prefix-preserving growth of one chat)."""

from __future__ import annotations

import importlib.resources
from typing import Any

from stepgym import _deps

_deps.require("trl", "trl", what="the TRL integration")

from trl.chat_template_utils import supports_tool_calling  # noqa: E402


def use_tool_chat_template(tokenizer: Any, template: str = "qwen2_5") -> Any:
    """Make ``tokenizer`` able to render tool calls, as TRL's ``environment_factory`` requires.

    A tokenizer whose template already passes TRL's ``supports_tool_calling`` check is returned unchanged.
    Otherwise its ``chat_template`` is replaced by ``template``, one of the templates TRL ships
    (``trl/chat_templates/<template>.jinja``); TRL recognises it and adds the matching response parser. The
    default, Qwen2.5's, is ChatML (``<|im_start|>`` / ``<|im_end|>``), the format SmolLM2 was trained on; its
    end-of-turn token must be the tokenizer's EOS so generation stops after a turn.
    """
    if supports_tool_calling(tokenizer):
        return tokenizer
    path = importlib.resources.files("trl") / "chat_templates" / f"{template}.jinja"
    if not path.is_file():
        raise ValueError(f"TRL ships no chat template named {template!r} (looked for {path})")
    tokenizer.chat_template = path.read_text()
    if not supports_tool_calling(
        tokenizer
    ):  # pragma: no cover - a shipped template that fails TRL's own check
        raise ValueError(f"TRL's {template!r} template does not render tool calls with this tokenizer")
    return tokenizer


def template_ids(
    tokenizer: Any, messages: list[dict[str, Any]], *, generation_prompt: bool, tools: Any = None
) -> list[int]:
    ids = tokenizer.apply_chat_template(
        messages, add_generation_prompt=generation_prompt, tokenize=True, return_dict=False, tools=tools
    )
    return list(ids[0] if ids and isinstance(ids[0], list) else ids)


def user_turn_ids(tokenizer: Any, content: str, role: str = "user") -> list[int]:
    """The tokens the chat template puts after a finished assistant turn (ending in EOS) for a new message
    ``content`` (a user message, or with ``role="tool"`` a tool's answer), up to and including the next assistant
    header."""
    base = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "ok"}]
    prefix = template_ids(tokenizer, base, generation_prompt=False)
    full = template_ids(tokenizer, [*base, {"role": role, "content": content}], generation_prompt=True)
    eos = [i for i, t in enumerate(prefix) if t == tokenizer.eos_token_id]
    if eos:
        prefix = prefix[: eos[-1] + 1]
    if full[: len(prefix)] != prefix:
        raise ValueError("the chat template is not prefix-preserving: a new user turn changes earlier tokens")
    return full[len(prefix) :]
