"""Tool-use envs in the trainers' own tool protocols: the env's tools as schemas or Python functions, and a call
back to the env's action.

A tool-use env (``StepGym/Tau2-v0``) exposes ``tool_schemas()`` on its core: the OpenAI/JSON schemas of the tools
the agent may call, known once the env is reset. Its action is one agent message: a call, written as the canonical
JSON of :func:`stepgym.envs.tau2.calls.call_text`, or a text message to the user. Trainers whose rollouts speak
tool calls natively (TRL's ``environment_factory``, verl's tool agent loop, verifiers' tool harnesses) end a turn
that has no call, so a conversation with a user needs the message as a tool too: :data:`MESSAGE_TOOL`
(``send_message(content)``), left out when the env takes no messages (tau2's solo mode).

:func:`agent_tools` gives the schemas the trainer renders; :func:`call_action` turns one call the trainer parsed
into the env's action; :func:`python_tool` builds a Python function whose signature and docstring give the same
schema through ``transformers.utils.get_json_schema`` (what TRL reads from an ``environment_factory`` class).
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from stepgym import schema
from stepgym.envs.tau2.calls import call_text

__all__ = [
    "MESSAGE_TOOL",
    "agent_tools",
    "answer_message",
    "call_action",
    "env_tool_schemas",
    "is_call",
    "message_tool_schema",
    "python_tool",
    "takes_messages",
    "tool_methods",
    "tool_use_opening",
]

#: The tool that sends a message to the user (its answer is the user's reply).
MESSAGE_TOOL = "send_message"

_PY_TYPES: dict[str, Any] = {
    "string": str,
    "integer": int,
    "number": float,
    "boolean": bool,
    "array": list,
    "object": dict,
}


def message_tool_schema() -> dict[str, Any]:
    """The schema of :data:`MESSAGE_TOOL`."""
    return {
        "type": "function",
        "function": {
            "name": MESSAGE_TOOL,
            "description": "Send a message to the user and read the user's reply.",
            "parameters": {
                "type": "object",
                "properties": {"content": {"type": "string", "description": "The message to the user."}},
                "required": ["content"],
            },
        },
    }


def env_tool_schemas(env: Any) -> list[dict[str, Any]] | None:
    """The tool schemas of a tool-use env (``env.unwrapped.tool_schemas()``, read after a reset), or ``None`` for
    an env without tools."""
    fn = getattr(getattr(env, "unwrapped", env), "tool_schemas", None)
    return list(fn()) if callable(fn) else None


def takes_messages(env: Any) -> bool:
    """Whether the tool-use env takes a text message to the user as an action (tau2: not in solo mode)."""
    return not bool(getattr(getattr(env, "unwrapped", env), "solo_mode", False))


def agent_tools(env: Any) -> list[dict[str, Any]] | None:
    """The tools a trainer offers the model for ``env`` (a reset tool-use env): its own, plus
    :data:`MESSAGE_TOOL` when it takes messages; ``None`` for an env without tools."""
    schemas = env_tool_schemas(env)
    if schemas is None:
        return None
    names = {s["function"]["name"] for s in schemas}
    if MESSAGE_TOOL in names:
        raise ValueError(f"the env has a tool named {MESSAGE_TOOL!r}, the name of the message tool")
    return schemas + ([message_tool_schema()] if takes_messages(env) else [])


def call_action(name: str, arguments: Mapping[str, Any] | str | None) -> str:
    """The env action of one tool call: the message itself for :data:`MESSAGE_TOOL`, else the call's canonical
    JSON. ``arguments`` may be OpenAI's JSON string; one that does not parse is passed on as a call the env
    answers as invalid (the env names the fault)."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError:
            return json.dumps({"name": name, "arguments": arguments})  # the env's parser names the bad JSON
    args = dict(arguments or {})
    if name == MESSAGE_TOOL:
        content = args.get("content")
        return content if isinstance(content, str) else json.dumps(args)
    return call_text(name, args)


def is_call(action: Any) -> bool:
    """Whether an env action (a parsed reply) is a tool call (the canonical JSON), not a message."""
    return isinstance(action, str) and action.lstrip().startswith("{")


def answer_message(action: Any, observation: Any) -> dict[str, str]:
    """The chat message carrying the env's answer to one step of a tool-use env: a ``tool`` message after a call
    (the tool's answer), else a ``user`` message (the user's reply, or the feedback on an unreadable reply)."""
    return {"role": "tool" if is_call(action) else "user", "content": str(observation)}


def tool_use_opening(episode: Any) -> str:
    """The first user turn of a tool-use episode whose tools the chat template renders: the env's instructions
    (``system_prompt()`` of its core, else the goal) and its first observation."""
    core = episode.env.unwrapped
    system = getattr(core, "system_prompt", None)
    goal = system() if callable(system) else str(episode.info.get(schema.GOAL) or "")
    first = str(episode.trajectory.initial_observation)
    return f"{goal}\n\n{first}" if goal else first


def _shape(schema: Mapping[str, Any], defs: Mapping[str, Any], depth: int = 0) -> str:
    """A compact picture of a nested JSON schema (``{"a": string, ...}``), for a description's text."""
    if depth > 4:
        return "..."
    if "$ref" in schema:
        schema = defs.get(str(schema["$ref"]).rsplit("/", 1)[-1], {})
    if "anyOf" in schema:
        options = [s for s in schema["anyOf"] if s.get("type") != "null"] or [{}]
        schema = options[0]
        if "$ref" in schema:
            schema = defs.get(str(schema["$ref"]).rsplit("/", 1)[-1], {})
    kind = schema.get("type")
    if kind == "object" and schema.get("properties"):
        inner = ", ".join(f'"{k}": {_shape(v, defs, depth + 1)}' for k, v in schema["properties"].items())
        return "{" + inner + "}"
    if kind == "array":
        return "[" + _shape(schema.get("items") or {}, defs, depth + 1) + ", ...]"
    return str(kind or "any")


def python_tool(
    schema: Mapping[str, Any], invoke: Callable[[Any, str, dict[str, Any]], str]
) -> Callable[..., str]:
    """A function (a method: its first parameter is ``self``) with the tool's name, typed keyword parameters and a
    Google-style docstring, so ``get_json_schema`` reads back the tool's schema (nested shapes and enums in the
    descriptions); calling it runs ``invoke(self, name, arguments)``."""
    fn_schema = schema["function"]
    name = str(fn_schema["name"])
    params = fn_schema.get("parameters") or {}
    props: Mapping[str, Any] = params.get("properties") or {}
    required = set(params.get("required") or [])
    defs = params.get("$defs") or {}
    sig_params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    annotations: dict[str, Any] = {"return": str}
    lines = []
    for key in sorted(props, key=lambda k: (k not in required, list(props).index(k))):
        prop = props[key]
        kind = prop.get("type")
        hint = _PY_TYPES.get(kind, Any) if isinstance(kind, str) else Any
        optional = key not in required
        annotations[key] = (hint | None) if optional and hint is not Any else hint
        default = None if optional else inspect.Parameter.empty
        sig_params.append(
            inspect.Parameter(
                key, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotations[key]
            )
        )
        desc = " ".join(str(prop.get("description") or key).split())
        if kind in ("array", "object") or "anyOf" in prop or "$ref" in prop:
            desc += f" Shape: {_shape(prop, defs)}."
        if "enum" in prop:
            desc += f" (choices: {json.dumps(prop['enum'])})"
        lines.append(f"    {key}: {desc}")

    def tool(self: Any, **arguments: Any) -> str:
        return invoke(self, name, {k: v for k, v in arguments.items() if v is not None or k in required})

    description = " ".join(str(fn_schema.get("description") or name).split())
    doc = description + ("\n\nArgs:\n" + "\n".join(lines) if lines else "")
    tool.__name__ = tool.__qualname__ = name
    tool.__doc__ = doc + "\n\nReturns:\n    The tool's answer, or the user's reply.\n"
    tool.__signature__ = inspect.Signature(sig_params, return_annotation=str)  # type: ignore[attr-defined]
    tool.__annotations__ = annotations
    return tool


def tool_methods(
    schemas: Sequence[Mapping[str, Any]], invoke: Callable[[Any, str, dict[str, Any]], str]
) -> dict[str, Callable[..., str]]:
    """:func:`python_tool` of every schema, by name (a class body for TRL's ``environment_factory``)."""
    return {str(s["function"]["name"]): python_tool(s, invoke) for s in schemas}
