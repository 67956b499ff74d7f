"""A Gymnasium env whose copy lives on a ``stepgym serve`` server, reached through OpenEnv's own client.

:class:`RemoteEnv` drives OpenEnv 0.10's ``GenericEnvClient`` (its WebSocket session, in its synchronous form)
and gives back exactly what the env in-process would: ``reset`` -> ``(observation, info)``, ``step`` ->
``(observation, reward, terminated, truncated, info)`` with the per-step reward and the whole info dict. So every
trainer that takes a Gymnasium env or a factory of them (stepgym's own collector, ``GroupEnv``, the TRL, SkyRL and
verifiers adapters) can use a served env unchanged; ``stepgym.integrations.trl.environment_factory(
functools.partial(RemoteEnv, url))`` is TRL's OpenEnv path.

Dropped connections do not lose the episode: the server keeps the session for its grace period, and
``RemoteEnv`` reconnects with its session id (``/ws?session_id=...``), retrying until ``reconnect_deadline_s``.
If the connection dropped while a step was in flight, it asks the session's ``state`` whether that step was
applied and, if so, returns its recorded answer rather than stepping twice.

Needs ``pip install openenv==0.10.0`` (it pulls gradio and fastmcp; in an environment whose ``mcp`` must stay
newer, use a virtualenv of its own, as ``scripts/test_openenv.sh`` does).
"""

from __future__ import annotations

import contextlib
import time
from typing import Any, ClassVar

import gymnasium as gym

from stepgym import _deps
from stepgym.errors import SessionLostError, StepGymError
from stepgym.serve.protocol import (
    ACTION_FIELD,
    INFO_FIELD,
    SESSION_FIELD,
    SESSION_QUERY,
    TERMINATED_FIELD,
    TEXT_FIELD,
    TRUNCATED_FIELD,
)
from stepgym.spaces import UnicodeText

_deps.require("openenv.core", "openenv", what="stepgym.serve.client (OpenEnv's client)")

from openenv.core import GenericEnvClient  # noqa: E402
from websockets.exceptions import ConnectionClosed  # noqa: E402

__all__ = ["RemoteEnv", "RemoteEnvError", "StepGymEnvClient"]


class RemoteEnvError(StepGymError):
    """The server answered an error (its message and code are in the text); the session is still open."""


class StepGymEnvClient(GenericEnvClient):
    """OpenEnv's ``GenericEnvClient`` that reconnects to its own session: once ``resume_id`` is set, every new
    connection asks for ``/ws?session_id=<resume_id>``."""

    resume_id: str | None = None

    async def _connect_async(self) -> Any:
        if self.resume_id is not None and self._base_url is not None:
            self._set_base_url(self._base_url)
            self._ws_url = f"{self._ws_url}?{SESSION_QUERY}={self.resume_id}"
        return await super()._connect_async()


_TRANSIENT = (ConnectionError, ConnectionClosed, OSError, TimeoutError)


class RemoteEnv(gym.Env):
    """A served env as a Gymnasium env (see the module docstring).

    Args:
        base_url: the server, ``http://127.0.0.1:8000`` (or ``ws://...``).
        token: the server's bearer token, when it has one.
        message_timeout_s: the most one reset or step may take before it counts as lost.
        reconnect_deadline_s: how long to keep reconnecting after a dropped connection (the server's grace
            period should be longer).
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": []}

    def __init__(
        self,
        base_url: str,
        *,
        token: str | None = None,
        connect_timeout_s: float = 10.0,
        message_timeout_s: float = 120.0,
        reconnect_deadline_s: float = 60.0,
    ) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else None
        self._async = StepGymEnvClient(
            base_url=base_url,
            connect_timeout_s=connect_timeout_s,
            message_timeout_s=message_timeout_s,
            headers=headers,
        )
        self._client = self._async.sync()
        self.reconnect_deadline_s = float(reconnect_deadline_s)
        self.observation_space = UnicodeText()
        self.action_space = UnicodeText()
        self._steps = 0
        self.reconnects = 0

    @property
    def session_id(self) -> str | None:
        """The server's id of this env's session (set by the first reset)."""
        return self._async.resume_id

    # -- Gymnasium ------------------------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        kwargs: dict[str, Any] = {"seed": seed}
        if options:
            kwargs["options"] = options
        result = self._retrying(lambda: self._client.reset(**kwargs), applied=None)
        obs = result.observation
        self._async.resume_id = obs[SESSION_FIELD]
        self._steps = 0
        return obs[TEXT_FIELD], obs[INFO_FIELD]

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        expected = self._steps + 1
        result = self._retrying(lambda: self._client.step({ACTION_FIELD: action}), applied=expected)
        self._steps = expected
        obs = result.observation
        reward = float(result.reward) if result.reward is not None else 0.0
        return (
            obs[TEXT_FIELD],
            reward,
            bool(obs[TERMINATED_FIELD]),
            bool(obs[TRUNCATED_FIELD]),
            obs[INFO_FIELD],
        )

    def state(self) -> dict[str, Any]:
        """The session's state: ``step_count``, ``seed``, ``done`` and ``last`` (the last answer)."""
        return self._retrying(self._client.state, applied=None)

    def close(self) -> None:
        with contextlib.suppress(Exception):  # closing a connection that is already gone
            self._client.close()
        super().close()

    # -- failures -------------------------------------------------------------------------------------------
    def _retrying(self, call: Any, *, applied: int | None) -> Any:
        """``call()``, reconnecting after a dropped connection until the deadline. ``applied``: the step count
        the session has once this step is applied (a step whose answer was lost is not sent again)."""
        deadline = time.monotonic() + self.reconnect_deadline_s
        lost_in_flight = False
        while True:
            try:
                if lost_in_flight and applied is not None and self.session_id is not None:
                    state = self._client.state()
                    if int(state.get("step_count", -1)) == applied and state.get("last"):
                        return _result_of(state["last"])
                return call()
            except RuntimeError as e:
                busy = "held by a live connection" in str(e)  # the server has not yet seen our old one end
                if busy and lost_in_flight and time.monotonic() <= deadline:
                    with contextlib.suppress(Exception):
                        self._client.disconnect()
                    time.sleep(1.0)
                    continue
                if str(e).startswith("Server error:"):
                    raise RemoteEnvError(str(e)[len("Server error: ") :]) from None
                raise
            except _TRANSIENT as e:
                if time.monotonic() > deadline:
                    raise SessionLostError(
                        f"lost the connection to {self._async.base_url} and could not resume session "
                        f"{self.session_id} within {self.reconnect_deadline_s:.0f} s ({type(e).__name__}: {e})"
                    ) from e
                lost_in_flight = True
                self.reconnects += 1
                with contextlib.suppress(Exception):  # the socket is already gone
                    self._client.disconnect()
                time.sleep(min(1.0, 0.05 * self.reconnects))  # back off between reconnect attempts


def _result_of(payload: dict[str, Any]) -> Any:
    from openenv.core.client_types import StepResult

    return StepResult(
        observation=payload["observation"],
        reward=payload.get("reward"),
        done=payload.get("done", False),
        metadata=payload.get("metadata"),
    )
