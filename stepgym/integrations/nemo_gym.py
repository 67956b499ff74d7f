"""stepgym envs as a NeMo Gym 0.7 resources server, with every step's annotations kept.

NeMo Gym (``pip install nemo-gym==0.7.0``) runs an environment as a *resources server*: a FastAPI app that its
``gymnasium_agent`` drives with ``POST /reset`` then ``POST /step`` (one per model turn), the episode tied to a
cookie session. :class:`StepGymResourcesServer` is that server (a ``GymnasiumServer`` subclass), and it holds no
env itself: each NeMo Gym session is a session of a ``stepgym serve`` server (its HTTP endpoints, see
``docs/serve.md``), so the env runs wherever stepgym and its data are installed, with ``stepgym serve``'s worker
pool, deadlines, capacity limits and reaping, while the resources server runs in NeMo Gym's own environment (NeMo
Gym 0.7 needs Python >= 3.13.14, stepgym's env stack runs on 3.11).

What crosses over:

* ``/reset``: the dataset row's ``seed``, ``task_id`` and ``options`` fields are the env's reset arguments (every
  other row field is ignored). The answer is the env's first observation and its info dict.
* ``/step``: the text of the model's turn (``extract_text``) is the env's action, unparsed; serve the env with
  ``--wrapper stepgym.wrappers.text:TextInterfaceWrapper`` to have stepgym parse ``<action>`` tags and answer
  unparsable replies with its format feedback. The answer is the step's observation, reward, ``terminated``,
  ``truncated`` and the env's whole info dict (the ``stepgym/...`` keys of ``stepgym.schema``, as JSON).
* NeMo Gym's agent sums the step rewards and returns only the *last* step's info, so every step's info also
  carries ``stepgym_steps``: the episode so far, one record per reset or step (``action``, ``observation``,
  ``reward``, ``terminated``, ``truncated``, ``info``), exactly as ``stepgym serve`` answered it. Whichever step
  ends the rollout (the env's end, or the agent's ``max_steps``), the rollout's info holds the whole episode;
  nothing is summed away. (The records grow with the episode; the env's step limit bounds them.)

One process (``num_workers`` 1; more is refused at start): each episode's records live in it; the envs' work is
spread by ``stepgym serve --workers``. Errors keep their cause: an unreachable ``stepgym serve`` is a 503 naming its
URL; an error ``stepgym serve`` answers (a bad seed, a full server, an expired session) keeps its status and its
``{"message", "code"}`` (an env that failed mid-episode: ``EPISODE_ABORTED`` with its ``abort_cause``, never a
reward: docs/failures.md); a step before a reset is a 409; a reset whose ``stepgym serve`` session is gone (the server
restarted, or reaped it) opens a new one. ``/close`` (advertised through ``supports_explicit_close``) ends the
stepgym session early; a finished episode closes it by itself, and a session nobody closes is reaped by
``stepgym serve``'s idle timeout. A step whose answer was lost with a dropped connection is never sent twice: the
session's ``/state`` tells whether it was applied.

Run it the way NeMo Gym runs any resources server: a config entry and a ``resources_servers/stepgym/app.py`` that
calls ``StepGymResourcesServer.run_webserver()`` (``docs/nemo_gym.md`` has both), or ``python -m
stepgym.integrations.nemo_gym`` with the launcher's ``NEMO_GYM_CONFIG_DICT`` / ``NEMO_GYM_CONFIG_PATH`` set.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from stepgym import _deps

_deps.require("nemo_gym", "nemo-gym", what="the NeMo Gym resources server")

import aiohttp  # noqa: E402 - NeMo Gym's dependencies
from fastapi import HTTPException, Request  # noqa: E402
from nemo_gym.base_resources_server import BaseResourcesServerConfig  # noqa: E402
from nemo_gym.openai_utils import NeMoGymResponse  # noqa: E402
from nemo_gym.server_utils import request as nemo_request  # noqa: E402
from pydantic import Field, PrivateAttr  # noqa: E402
from resources_servers.gymnasium import GymnasiumServer, extract_text  # noqa: E402

__all__ = ["EPISODE_KEY", "RESET_FIELDS", "StepGymResourcesServer", "StepGymResourcesServerConfig"]

#: The key of every step's info that holds the episode so far (NeMo Gym's agent keeps only the last step's info).
EPISODE_KEY = "stepgym_steps"
#: The dataset row fields that are reset arguments; every other field of a row is ignored.
RESET_FIELDS = ("seed", "task_id", "options")


class StepGymResourcesServerConfig(BaseResourcesServerConfig):
    """The resources server's config entry (NeMo Gym's YAML), on top of NeMo Gym's host/port/entrypoint."""

    #: The ``stepgym serve`` server whose sessions this server's sessions are.
    stepgym_url: str = "http://127.0.0.1:8000"
    #: ``stepgym serve --token``, when it has one (sent as ``Authorization: Bearer <token>``).
    stepgym_token: str | None = None
    #: The most one reset or step may take, network included, before it is a 504.
    request_timeout_s: float = Field(300.0, gt=0)
    #: A NeMo Gym session unused this long is forgotten here (``stepgym serve`` reaps its side by itself).
    session_idle_s: float = Field(900.0, gt=0)


@dataclass
class _Episode:
    """One NeMo Gym session's stepgym session and what it has answered so far."""

    sid: str
    steps: list[dict[str, Any]] = field(default_factory=list)
    used: float = field(default_factory=time.monotonic)


class StepGymResourcesServer(GymnasiumServer):
    """A NeMo Gym ``GymnasiumServer`` whose episodes are ``stepgym serve`` sessions (see the module docstring)."""

    config: StepGymResourcesServerConfig
    ray_enabled = False
    _episodes: dict[str, _Episode] = PrivateAttr(default_factory=dict)

    def setup_webserver(self):
        # with several workers a step could reach one that never saw its episode's reset
        if (self.config.num_workers or 1) > 1:
            raise ValueError(
                f"{self.config.name}: num_workers={self.config.num_workers}, but a StepGymResourcesServer keeps each "
                "episode's records in its process: run it with one worker (stepgym serve --workers spreads the envs)"
            )
        app = super().setup_webserver()
        app.post("/close")(self._close_endpoint)
        return app

    # -- the Gymnasium interface NeMo Gym's agent drives -------------------------------------------------------
    async def reset(self, metadata: dict, session_id: str | None = None) -> tuple[str | None, dict]:
        self._forget_idle()
        key, body = _key(session_id), {k: metadata[k] for k in RESET_FIELDS if k in metadata}
        old, answer = self._episodes.get(key), None
        if old is not None:  # a second reset in one NeMo Gym session resets the same stepgym session ...
            try:
                answer = await self._call("/reset", {**body, "session_id": old.sid})
            except HTTPException as e:
                if e.status_code != 404:  # (a refused reset leaves the episode as it was)
                    raise
        if answer is None:  # ... unless there is none, or stepgym serve no longer has it: a new one
            answer = await self._call("/reset", body)
        obs = answer["observation"]
        self._episodes[key] = _Episode(obs["session_id"], [_record(None, answer)])
        return obs["text"], {**obs["info"], "supports_explicit_close": True}

    async def step(
        self, action: NeMoGymResponse, metadata: dict, session_id: str | None = None
    ) -> tuple[str | None, float, bool, bool, dict]:
        ep = self._episodes.get(_key(session_id))
        if ep is None:
            raise HTTPException(
                409, detail=_detail("step before reset: POST /reset starts an episode", "NOT_RESET")
            )
        text = extract_text(action)
        answer = await self._step_once(ep, text)
        ep.used = time.monotonic()
        ep.steps.append(_record(text, answer))
        obs = answer["observation"]
        terminated, truncated = bool(obs["terminated"]), bool(obs["truncated"])
        info = {**obs["info"], EPISODE_KEY: ep.steps}
        return obs["text"], float(answer["reward"]), terminated, truncated, info

    async def close_session(self, session_id: str | None) -> None:
        ep = self._episodes.pop(_key(session_id), None)
        await super().close_session(session_id)
        if ep is not None:
            try:
                await self._call("/close", {"session_id": ep.sid})
            except HTTPException as e:
                if e.status_code != 404:  # already reaped or closed: nothing is left to release
                    raise

    async def _close_endpoint(self, request: Request) -> dict:
        from nemo_gym.server_utils import SESSION_ID_KEY

        await self.close_session(request.session.get(SESSION_ID_KEY))
        return {}

    # -- stepgym serve over HTTP ---------------------------------------------------------------------------
    async def _step_once(self, ep: _Episode, text: str) -> dict[str, Any]:
        """Step the stepgym session exactly once, even when the connection drops with the step in flight: the
        session's ``state`` then says whether the step was applied (its answer is the session's last)."""
        body = {"action": {"action": text}, "session_id": ep.sid}
        try:
            return await self._call("/step", body, tries=1)
        except _ConnectionLost:
            state = await self._call("/state", {"session_id": ep.sid}, method="GET")
            if state.get("step_count") == len(ep.steps) and state.get("last"):  # steps[0] is the reset
                return state["last"]
            return await self._call("/step", body, tries=1)

    async def _call(
        self, path: str, body: dict[str, Any], *, method: str = "POST", tries: int = 6
    ) -> dict[str, Any]:
        """One request to ``stepgym serve``: its JSON answer, or an HTTPException that keeps the cause.

        Sent through NeMo Gym's own client (``nemo_gym.server_utils.request``: its connection pool and tracing),
        with its retries bounded to ``tries`` connection attempts, 0.5 s apart (it retries forever by default, and
        would send a step again after a dropped answer: steps go once, :meth:`_step_once`)."""
        import asyncio

        url = self.config.stepgym_url.rstrip("/") + path
        kwargs: dict[str, Any] = {"params": body} if method == "GET" else {"json": body}
        if self.config.stepgym_token:
            kwargs["headers"] = {"Authorization": f"Bearer {self.config.stepgym_token}"}
        try:
            async with asyncio.timeout(self.config.request_timeout_s):
                resp = await nemo_request(method, url, _max_connection_retries=tries, **kwargs)
                payload = await resp.json(content_type=None)
        except TimeoutError:
            raise HTTPException(
                504,
                detail=_detail(
                    f"stepgym serve at {url} did not answer within {self.config.request_timeout_s} s"
                ),
            ) from None
        except (OSError, aiohttp.ClientConnectionError) as e:  # refused, reset, disconnected, unreachable
            raise _ConnectionLost(
                503,
                detail=_detail(
                    f"stepgym serve at {self.config.stepgym_url} is unreachable ({type(e).__name__}: {e}); "
                    "start it with `stepgym serve ENV_ID --port PORT` and set stepgym_url"
                ),
            ) from None
        if resp.status >= 400:
            d = payload.get("detail") if isinstance(payload, dict) else None
            d = d if isinstance(d, dict) else {"message": str(payload)[:500], "code": "UNKNOWN"}
            detail = _detail(f"stepgym serve: {d.get('message')}", d.get("code"))
            if d.get("abort_cause"):  # EPISODE_ABORTED: an aborted episode, never a reward (docs/failures.md)
                detail["abort_cause"] = d["abort_cause"]
            raise HTTPException(resp.status, detail=detail)
        return payload

    def _forget_idle(self) -> None:
        cutoff = time.monotonic() - self.config.session_idle_s
        for k in [k for k, ep in self._episodes.items() if ep.used < cutoff]:
            del self._episodes[k]


class _ConnectionLost(HTTPException):
    """stepgym serve could not be reached (a 503): whether a step in flight was applied is unknown."""


def _key(session_id: str | None) -> str:
    if not session_id:
        raise HTTPException(400, detail=_detail("no NeMo Gym session: send the session cookie /reset set"))
    return session_id


def _detail(message: str, code: str | None = "SERVICE_UNAVAILABLE") -> dict[str, Any]:
    return {"message": message, "code": code}


def _record(action: str | None, answer: dict[str, Any]) -> dict[str, Any]:
    obs = answer["observation"]
    return {
        "action": action,
        "observation": obs["text"],
        "reward": answer["reward"],
        "terminated": bool(obs["terminated"]),
        "truncated": bool(obs["truncated"]),
        "info": obs["info"],
    }


if __name__ == "__main__":
    StepGymResourcesServer.run_webserver()
