"""Tool calls as text: the canonical action string of a call, and reading one back from what a model wrote.

A call is written ``{"name": "get_user_details", "arguments": {"user_id": "raj_sanchez_7340"}}`` (JSON, keys
sorted): the form Hermes/Qwen chat templates put inside ``<tool_call>`` tags and the form ``StepGym/Tau2-v0``
takes as an action and gives as ``stepgym/expert_action``. :func:`read_call` also takes the function form
``get_user_details(user_id="raj_sanchez_7340")`` and ``name({"user_id": ...})`` (ReAct replies). Anything else is a
message to the user.
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any

__all__ = ["call_text", "looks_like_call", "read_call"]

_FUNC = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*\((.*)\)\s*$", re.DOTALL)


def call_text(name: str, arguments: dict[str, Any]) -> str:
    """The canonical text of a call (JSON, sorted keys, no spaces lost)."""
    return json.dumps({"name": name, "arguments": arguments}, sort_keys=True, ensure_ascii=False)


def looks_like_call(text: str) -> bool:
    """Whether ``text`` is meant as a call (a JSON object, or ``name(...)`` alone), not a message."""
    s = text.strip()
    return s.startswith("{") or (bool(_FUNC.match(s)) and "\n" not in s.split("(", 1)[0])


def read_call(text: str) -> tuple[str, dict[str, Any]] | str:
    """``(name, arguments)`` of the call written in ``text``, or a one-line reason why it is not a well-formed
    call. ``text`` must be :func:`looks_like_call`."""
    s = text.strip()
    if s.startswith("{"):
        try:
            obj = json.loads(s)
        except json.JSONDecodeError as exc:
            return f"the tool call is not valid JSON ({exc.msg} at character {exc.pos})"
        if not isinstance(obj, dict):
            return "the tool call must be a JSON object"
        name = obj.get("name")
        args = obj.get("arguments", obj.get("parameters", {}))
        if isinstance(args, str):  # OpenAI's wire form carries the arguments as a JSON string
            try:
                args = json.loads(args) if args.strip() else {}
            except json.JSONDecodeError:
                return "the tool call's arguments string is not valid JSON"
        extra = set(obj) - {"name", "arguments", "parameters"}
        if extra:
            return f"the tool call has unknown fields {sorted(extra)} (expected name and arguments)"
    else:
        m = _FUNC.match(s)
        if m is None:
            return "not a tool call"
        name, body = m.group(1), m.group(2).strip()
        args = _function_args(body)
        if isinstance(args, str):
            return args
    if not isinstance(name, str) or not name:
        return "the tool call has no name"
    if not isinstance(args, dict) or not all(isinstance(k, str) for k in args):
        return "the tool call's arguments must be an object of named arguments"
    return name, args


def _function_args(body: str) -> dict[str, Any] | str:
    if not body:
        return {}
    if body.startswith("{"):
        try:
            obj = json.loads(body)
        except json.JSONDecodeError:
            return "the call's argument object is not valid JSON"
        return obj if isinstance(obj, dict) else "the call's argument must be an object"
    try:
        node = ast.parse(f"f({body})", mode="eval").body
    except SyntaxError:
        return "the call's arguments do not parse (write name(key=value, ...))"
    if not isinstance(node, ast.Call) or node.args:
        return "the call's arguments must be named (key=value)"
    out: dict[str, Any] = {}
    for kw in node.keywords:
        if kw.arg is None:
            return "the call's arguments must be named (key=value)"
        try:
            out[kw.arg] = ast.literal_eval(kw.value)
        except (ValueError, SyntaxError):
            return f"the value of {kw.arg} is not a Python literal (a string, number, list, dict, True/False/None)"
    return out
