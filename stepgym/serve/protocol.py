"""The wire format: OpenEnv 0.10's WebSocket and HTTP messages, with stepgym's annotations inside.

OpenEnv (``openenv.core.env_server.types``) frames every WebSocket message as ``{"type": ..., "data": ...}``:
the client sends ``reset`` (data: ``seed``, ``episode_id`` and extra reset arguments), ``step`` (data: the action
object), ``state`` and ``close``; the server answers ``observation`` (data: ``{"observation": {...}, "reward",
"done", "metadata"}``), ``state`` or ``error`` (data: ``{"message", "code"}``). The HTTP endpoints carry the same
payloads. stepgym fills them so that nothing of a step is lost:

* the action object is ``{"action": "<text>"}`` (OpenEnv's ``Action`` also allows ``metadata``);
* the observation object is ``{"text": <the env's observation>, "info": <the info dict, JSON-typed>,
  "terminated": bool, "truncated": bool, "session_id": str, "step_index": int}``; ``reward`` is the per-step
  reward (a float; ``None`` after reset) and ``done`` is ``terminated or truncated``, as OpenEnv defines it.

Info values become JSON without guessing: ``str``/``bool``/``int``/``float``/``None`` as they are, lists and
tuples as arrays, dicts with string keys as objects, NumPy scalars and arrays as their Python values. Anything
else (an object, a non-finite float, a non-string key) is refused with :class:`ProtocolError` naming the key,
never turned into a string that would silently differ from the in-process value.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from stepgym.errors import StepGymError

__all__ = [
    "ErrorCode",
    "ProtocolError",
    "ServeLimits",
    "accept_backlog",
    "connection_cap",
    "error_message",
    "observation_payload",
    "parse_json",
    "parse_message",
    "parse_step_request",
    "to_json",
]

#: The fields of stepgym's action object and observation object (defined once; the client reads the same names).
ACTION_FIELD = "action"
TEXT_FIELD = "text"
INFO_FIELD = "info"
TERMINATED_FIELD = "terminated"
TRUNCATED_FIELD = "truncated"
SESSION_FIELD = "session_id"
STEP_FIELD = "step_index"
#: Where a client sends the token when the server has one (``--token``).
AUTH_HEADER = "authorization"
#: The WebSocket query parameter that resumes a session (the same name OpenEnv uses to attach to a session).
SESSION_QUERY = "session_id"
#: The per-session secret: answered to the connection that holds a session (``metadata.session_secret``), and sent
#: back as this query parameter to take the session over while its old connection still looks alive.
SECRET_FIELD = "session_secret"


class ErrorCode:
    """OpenEnv's ``WSErrorCode`` values, plus the ones stepgym needs (all plain strings on the wire)."""

    INVALID_JSON = "INVALID_JSON"
    UNKNOWN_TYPE = "UNKNOWN_TYPE"
    VALIDATION_ERROR = "VALIDATION_ERROR"
    EXECUTION_ERROR = "EXECUTION_ERROR"
    CAPACITY_REACHED = "CAPACITY_REACHED"
    FACTORY_ERROR = "FACTORY_ERROR"
    SESSION_ERROR = "SESSION_ERROR"
    # stepgym's
    MESSAGE_TOO_LARGE = "MESSAGE_TOO_LARGE"
    NOT_RESET = "NOT_RESET"
    EPISODE_OVER = "EPISODE_OVER"
    TIMEOUT = "TIMEOUT"
    UNAUTHORIZED = "UNAUTHORIZED"
    #: a request (head or body) not received within ``ServeLimits.read_timeout_s``
    REQUEST_TIMEOUT = "REQUEST_TIMEOUT"
    #: the env (or a service it needs) failed mid-episode: the episode is aborted, never scored
    #: (docs/failures.md); the error's ``abort_cause`` is one of ``stepgym.schema.ABORT_CAUSES``
    EPISODE_ABORTED = "EPISODE_ABORTED"


class ProtocolError(StepGymError, ValueError):
    """A message the server cannot act on; ``code`` is its :class:`ErrorCode`. The session stays usable."""

    def __init__(self, message: str, code: str = ErrorCode.VALIDATION_ERROR, **extra: Any) -> None:
        super().__init__(message)
        self.code = code
        self.extra = extra  #: more fields of the error message (EPISODE_ABORTED: ``abort_cause``)


@dataclass(frozen=True)
class ServeLimits:
    """Bounds on what one client can ask of the server (every one has a deadline or a size)."""

    #: Largest WebSocket message or HTTP body the server reads, in bytes (a larger one gets MESSAGE_TOO_LARGE).
    max_message_bytes: int = 1 << 20
    #: Longest action text, in characters.
    max_action_chars: int = 16_384
    #: Most sessions held at once (attached or waiting for a reconnect); one more gets CAPACITY_REACHED at once.
    max_sessions: int = 2048
    #: Seconds a disconnected session waits for its client to reconnect with its session id.
    grace_s: float = 120.0
    #: Seconds a session may go without a message before it is closed and its env released.
    idle_timeout_s: float = 900.0
    #: Seconds one reset or step may take (enforced by killing the worker when envs run in workers).
    step_timeout_s: float = 120.0
    #: Seconds a client may take to send a whole request head (from connecting, or from the first byte of the next
    #: request on a kept-alive connection) and, separately, a whole request body; a silent or half-sent
    #: connection is then closed (HTTP: a 408 answer first).
    read_timeout_s: float = 10.0
    #: Most open connections (HTTP and WebSocket together); one more is answered 503 and closed at once. None: from
    #: the process's open-file limit (:func:`connection_cap`), so the server never runs out of file descriptors.
    max_connections: int | None = None
    #: Deepest nesting of arrays and objects in a message (a deeper one gets INVALID_JSON, never a crash).
    max_json_depth: int = 32

    def __post_init__(self) -> None:
        for name in ("max_message_bytes", "max_action_chars", "max_sessions", "max_json_depth"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)!r}")
        if self.max_connections is not None and int(self.max_connections) < 1:
            raise ValueError(f"max_connections must be >= 1 or None, got {self.max_connections!r}")
        for name in ("grace_s", "idle_timeout_s", "step_timeout_s", "read_timeout_s"):
            if not float(getattr(self, name)) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)!r}")


#: File descriptors kept free of connections when the cap comes from the open-file limit (the process's own files,
#: log files, worker pipes, journals).
_FD_RESERVE = 64


def _open_file_limit() -> int | None:
    """The process's soft open-file limit (None: unlimited or unknown)."""
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (ImportError, OSError, ValueError):
        return None
    return None if soft == resource.RLIM_INFINITY else int(soft)


def accept_backlog() -> int:
    """The listen backlog, which is also how many connections the event loop accepts in one go (asyncio takes up
    to ``backlog`` per wake-up, before any of them is refused): an eighth of the open-file limit, 16 to 1024."""
    soft = _open_file_limit()
    return 1024 if soft is None else max(16, min(1024, (soft - _FD_RESERVE) // 8))


def connection_cap(limits: ServeLimits) -> int:
    """``limits.max_connections``, or (None) what the open-file limit leaves: the soft limit less a reserve and
    two accept bursts (connections accepted but not yet refused and closed), 8 to 4096."""
    if limits.max_connections is not None:
        return int(limits.max_connections)
    soft = _open_file_limit()
    if soft is None:
        return 4096
    return max(8, min(4096, soft - _FD_RESERVE - 2 * accept_backlog()))


def _depth_ok(value: Any, limit: int) -> bool:
    """Whether ``value`` (parsed JSON) nests arrays and objects at most ``limit`` deep (iterative: no recursion)."""
    stack = [(value, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, dict):
            items = v.values()
        elif isinstance(v, list):
            items = v
        else:
            continue
        if d > limit:
            return False
        stack.extend((x, d + 1) for x in items if isinstance(x, dict | list))
    return True


def parse_json(raw: str | bytes, limits: ServeLimits) -> Any:
    """A message's JSON, refused (INVALID_JSON) when it is not JSON or nests deeper than ``limits.max_json_depth``
    (a very deep one would exhaust the parser's recursion: one error answer, never a crash or a dropped socket)."""
    try:
        value = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ProtocolError(f"Invalid JSON: {e}", ErrorCode.INVALID_JSON) from None
    except RecursionError:
        value = None
    else:
        if _depth_ok(value, limits.max_json_depth):
            return value
    raise ProtocolError(
        f"the message nests arrays/objects deeper than the server's limit of {limits.max_json_depth}",
        ErrorCode.INVALID_JSON,
    )


class _Unencodable(Exception):
    """Raised inside :func:`to_json`'s walk; collects the path to the bad value as it unwinds."""

    def __init__(self, why: str) -> None:
        self.why, self.path = why, []


def _walk(value: Any) -> Any:
    t = type(value)
    if t is str or t is bool or t is int or value is None:
        return value
    if t is float:
        if not math.isfinite(value):
            raise _Unencodable(f"{value!r}: JSON has no non-finite numbers")
        return value
    if t is list or t is tuple:
        if all(type(x) is str for x in value):  # the common case (admissible actions, ids): no walk
            return list(value)
        out = []
        for i, x in enumerate(value):
            try:
                out.append(_walk(x))
            except _Unencodable as e:
                e.path.append(f"[{i}]")
                raise
        return out
    if t is dict:
        out_d = {}
        for k, x in value.items():
            if type(k) is not str and not isinstance(k, str):
                raise _Unencodable(f"a non-string key {k!r}")
            try:
                out_d[str(k)] = _walk(x)
            except _Unencodable as e:
                e.path.append(f"[{str(k)!r}]")
                raise
        return out_d
    if isinstance(value, (str, bool, int, float, list, tuple, dict)):  # subclasses (schema.InfoKey is a str)
        base = next(b for b in (str, bool, int, float, list, tuple, dict) if isinstance(value, b))
        return _walk(base(value))
    item = getattr(value, "tolist", None)  # NumPy scalars and arrays
    if callable(item) and type(value).__module__ == "numpy":
        return _walk(item())
    raise _Unencodable(
        f"a {type(value).__name__}, which has no JSON form (use str, numbers, bools, lists, dicts)"
    )


def to_json(value: Any, where: str = "info") -> Any:
    """``value`` as plain JSON data (see the module docstring); :class:`ProtocolError` names what cannot be."""
    try:
        return _walk(value)
    except _Unencodable as e:
        path = where + "".join(reversed(e.path))
        raise ProtocolError(f"{path} is {e.why}", ErrorCode.EXECUTION_ERROR) from None


def observation_payload(
    obs: Any,
    info: dict[str, Any],
    *,
    session_id: str,
    step_index: int,
    reward: float | None = None,
    terminated: bool = False,
    truncated: bool = False,
) -> dict[str, Any]:
    """OpenEnv's observation payload (``serialize_observation``'s shape) for one reset or step."""
    observation = {
        TEXT_FIELD: to_json(obs, "observation"),
        INFO_FIELD: to_json(info),
        TERMINATED_FIELD: bool(terminated),
        TRUNCATED_FIELD: bool(truncated),
        SESSION_FIELD: session_id,
        STEP_FIELD: int(step_index),
    }
    return {
        "observation": observation,
        "reward": None if reward is None else float(reward),
        "done": bool(terminated or truncated),
        "metadata": {SESSION_FIELD: session_id},
    }


def error_message(message: str, code: str, **extra: Any) -> dict[str, Any]:
    """OpenEnv's ``WSErrorResponse``."""
    return {"type": "error", "data": {"message": message, "code": code, **extra}}


def parse_message(raw: str | bytes, limits: ServeLimits) -> tuple[str, dict[str, Any]]:
    """A WebSocket frame as ``(type, data)``; :class:`ProtocolError` for oversized, malformed or unknown ones."""
    if len(raw) > limits.max_message_bytes:
        raise ProtocolError(
            f"message of {len(raw)} bytes is over the server's limit of {limits.max_message_bytes} bytes",
            ErrorCode.MESSAGE_TOO_LARGE,
        )
    msg = parse_json(raw, limits)
    if not isinstance(msg, dict):
        raise ProtocolError(
            'a message must be a JSON object {"type": ..., "data": ...}', ErrorCode.INVALID_JSON
        )
    kind = msg.get("type")
    if kind not in ("reset", "step", "state", "close"):
        raise ProtocolError(
            f"Unknown message type: {kind!r} (expected reset, step, state or close)", ErrorCode.UNKNOWN_TYPE
        )
    data = msg.get("data", {})
    if not isinstance(data, dict):
        raise ProtocolError(f"'data' of a {kind} message must be an object, not {type(data).__name__}")
    extra = set(msg) - {"type", "data"}
    if extra:
        raise ProtocolError(f"unexpected fields {sorted(extra)} in a {kind} message")
    return kind, data


def parse_step_request(data: dict[str, Any], limits: ServeLimits) -> str:
    """The action text of a step's action object ``{"action": "<text>", "metadata": {...}?}``."""
    extra = set(data) - {ACTION_FIELD, "metadata"}
    if extra:
        raise ProtocolError(f'unexpected fields {sorted(extra)} in the action (send {{"action": "<text>"}})')
    if ACTION_FIELD not in data:
        raise ProtocolError('the action has no "action" field (send {"action": "<text>"})')
    action = data[ACTION_FIELD]
    if not isinstance(action, str):
        raise ProtocolError(f'"action" must be a string, not {type(action).__name__}')
    if len(action) > limits.max_action_chars:
        raise ProtocolError(
            f"action of {len(action)} characters is over the limit of {limits.max_action_chars}",
            ErrorCode.MESSAGE_TOO_LARGE,
        )
    return action


def parse_reset(data: dict[str, Any]) -> tuple[int | None, dict[str, Any] | None, str | None]:
    """``(seed, options, episode_id)`` of a reset's data. Options are the env's own reset options
    (``{"task_id": ...}``); OpenEnv sends extra reset arguments at the top level, so ``task_id`` is accepted there
    too."""
    extra = set(data) - {"seed", "options", "episode_id", "task_id"}
    if extra:
        raise ProtocolError(
            f"unexpected reset arguments {sorted(extra)} (seed, options, episode_id, task_id)"
        )
    seed = data.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
        raise ProtocolError(f"seed must be a non-negative integer or null, not {seed!r}")
    options = data.get("options")
    if options is not None and not isinstance(options, dict):
        raise ProtocolError(f"options must be an object or null, not {type(options).__name__}")
    if "task_id" in data:
        if not isinstance(data["task_id"], str):
            raise ProtocolError("task_id must be a string")
        options = {**(options or {}), "task_id": data["task_id"]}
    episode = data.get("episode_id")
    if episode is not None and (not isinstance(episode, str) or len(episode) > 255):
        raise ProtocolError("episode_id must be a string of at most 255 characters")
    return seed, options, episode
