"""Sessions: one env per client, kept across dropped connections and, with a state folder, across restarts.

A session is created when a client connects without a session id and lives until the client sends ``close``, or
until it has been disconnected for longer than the grace period, or idle for longer than the idle timeout (the
reaper checks every few seconds). A client that reconnects with ``?session_id=<id>`` within the grace period gets
the same env back, mid-episode, exactly where it was: the env copy is simply kept alive meanwhile. Its ``state``
message answers the session's step count and last observation, so a client that lost the answer to a step can
tell whether the step was applied (and read its result) instead of sending it twice.

Restarts. With a state folder (``stepgym serve --state-dir``), every reset and step also updates a small journal
per session (seed, reset options, the actions so far and a digest of the last answer), written atomically (a
temporary file renamed over the old one), so a crash mid-write leaves the previous journal intact. A server started
again on the same folder restores a session when its client reconnects: it resets a free copy with the journal's
seed and options and replays the actions, then checks that the replayed answer has the journal's digest; stepgym's
envs are deterministic given the seed and the actions, and an env that is not is refused loudly (SESSION_ERROR)
rather than continued on a different state. (ALFWorld's native engine also has in-memory snapshots,
``get_state``/``set_state``; the server does not need them: a kept session keeps its live env, and a journal replay
is exact and needs nothing pickled.) Journals of sessions nobody reclaims are deleted after the grace period.

Session ids are 32 random hex digits made by the server; a client's id is checked against that form before it
is used anywhere, so no client text reaches a file path.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import re
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stepgym.atomic import atomic_write_json
from stepgym.serve.pool import CapacityError, EnvLostError, EnvPool
from stepgym.serve.protocol import ErrorCode, ProtocolError, ServeLimits, observation_payload, to_json

__all__ = ["Session", "SessionManager"]

_ID = re.compile(r"[0-9a-f]{32}")
_JOURNAL_VERSION = 1
#: Seconds a reconnect waits for the old connection of its session to end before it is refused.
TAKEOVER_WAIT_S = 3.0
#: The WebSocket ping interval (and timeout) the server runs with: a half-open connection ends within twice it.
_PING_S = 20.0
_SECRET_NAME = "session_secret"


def _digest(payload: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


@dataclass
class Session:
    """One client's env and episode."""

    id: str
    slot: int
    generation: int = 0
    seed: int | None = None
    options: dict[str, Any] | None = None
    episode_id: str | None = None
    actions: list[str] = field(default_factory=list)
    was_reset: bool = False
    done: bool = False
    attached: bool = True
    last_active: float = field(default_factory=time.monotonic)
    detached_at: float | None = None
    last: dict[str, Any] | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    #: Counts the connections that held this session; only the newest one may detach it.
    connection: int = 0
    #: Called (with a reason) when the reaper ends an attached session, so the transport can close its socket.
    on_reap: Callable[[str], Any] | None = None
    #: Answered to the connection holding the session; lets a reconnect take the session over at once even while
    #: the old connection still looks alive (without it, a live connection's session is not taken).
    secret: str = field(default_factory=lambda: secrets.token_hex(16))

    def state(self) -> dict[str, Any]:
        """OpenEnv's ``State`` (``episode_id``, ``step_count``) plus what a resuming client needs."""
        return {
            "episode_id": self.episode_id,
            "step_count": len(self.actions),
            "session_id": self.id,
            "seed": self.seed,
            "reset": self.was_reset,
            "done": self.done,
            "last": self.last,
        }


class SessionManager:
    """All sessions of one server over one :class:`~stepgym.serve.pool.EnvPool`."""

    def __init__(
        self,
        pool: EnvPool,
        limits: ServeLimits,
        *,
        state_dir: str | Path | None = None,
        fingerprint: str = "",
    ) -> None:
        self.pool, self.limits, self.fingerprint = pool, limits, fingerprint
        self.sessions: dict[str, Session] = {}
        self.state_dir = Path(state_dir) if state_dir is not None else None
        self._started = time.monotonic()
        if self.state_dir is not None:
            self.state_dir.mkdir(parents=True, exist_ok=True)
        self.counters = {
            "created": 0,
            "resumed": 0,
            "restored": 0,
            "reaped": 0,
            "refused_full": 0,
            "steps": 0,
        }

    # -- opening and closing -------------------------------------------------------------------------------
    async def open(self, resume_id: str | None = None, secret: str | None = None) -> Session:
        """A new session, or the one ``resume_id`` names (kept in memory, or restored from its journal); see
        :meth:`_resume` for when a session still held by a connection is given to another."""
        if resume_id is not None:
            return await self._resume(resume_id, secret)
        if len(self.sessions) >= self.limits.max_sessions:
            self.counters["refused_full"] += 1
            raise CapacityError(
                f"server full: {len(self.sessions)} of {self.limits.max_sessions} sessions in use"
            )
        try:
            slot = self.pool.acquire()
        except CapacityError as e:
            self.counters["refused_full"] += 1
            raise CapacityError(f"server full: {e}") from None
        s = Session(secrets.token_hex(16), slot, generation=self.pool.generation(slot))
        self.sessions[s.id] = s
        self.counters["created"] += 1
        return s

    async def _resume(self, sid: str, secret: str | None = None) -> Session:
        """The session ``sid`` for a new connection. One still held by a live connection is not taken from it: the
        new connection waits up to :data:`TAKEOVER_WAIT_S` for the old one to end (a client that dropped its
        connection mid-step), then is refused (SESSION_ERROR). A half-open old connection is noticed by the
        WebSocket pings and ends; a retry then succeeds. With the session's ``secret`` (answered to the
        connection that held it) the new connection takes over at once and the old one is closed."""
        if not _ID.fullmatch(sid):
            raise ProtocolError("a session id is 32 hex digits", ErrorCode.SESSION_ERROR)
        s = self.sessions.get(sid)
        if s is not None:
            owner = secret is not None and secrets.compare_digest(secret.encode(), s.secret.encode())
            if s.attached and s.on_reap is not None and not owner:
                waited = 0.0
                while s.attached and sid in self.sessions and waited < TAKEOVER_WAIT_S:
                    await asyncio.sleep(0.02)
                    waited += 0.02
                if s.attached and sid in self.sessions:
                    raise ProtocolError(
                        f"session {sid} is held by a live connection; a dead one is noticed within "
                        f"{_PING_S * 2:.0f} s (retry then), or send the session's {_SECRET_NAME} to take it over",
                        ErrorCode.SESSION_ERROR,
                    )
                if sid not in self.sessions:
                    raise ProtocolError(f"session {sid} was closed", ErrorCode.SESSION_ERROR)
            if s.attached and s.on_reap is not None:
                # the owner (it has the secret) gave up on its old connection: the new one takes over
                with contextlib.suppress(Exception):
                    s.on_reap("replaced by a new connection to this session")
            s.attached, s.detached_at, s.last_active = True, None, time.monotonic()
            s.connection += 1
            self.counters["resumed"] += 1
            return s
        journal = self._journal_path(sid)
        if journal is None or not journal.is_file():
            raise ProtocolError(
                f"unknown or expired session {sid} (sessions wait {self.limits.grace_s:.0f} s for a reconnect)",
                ErrorCode.SESSION_ERROR,
            )
        return await self._restore(sid, journal)

    async def _restore(self, sid: str, journal: Path) -> Session:
        try:
            rec = json.loads(journal.read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise ProtocolError(
                f"the journal of session {sid} is unreadable ({e})", ErrorCode.SESSION_ERROR
            ) from None
        if rec.get("v") != _JOURNAL_VERSION or rec.get("fingerprint") != self.fingerprint:
            raise ProtocolError(
                f"session {sid} was recorded by a server with another env or stepgym version; reset instead",
                ErrorCode.SESSION_ERROR,
            )
        if len(self.sessions) >= self.limits.max_sessions:
            raise CapacityError(
                f"server full: {len(self.sessions)} of {self.limits.max_sessions} sessions in use"
            )
        s = Session(sid, self.pool.acquire())
        s.generation = self.pool.generation(s.slot)
        self.sessions[sid] = s
        try:
            if rec["reset"]:
                await self.reset(s, rec["seed"], rec["options"], rec["episode_id"], journal=False)
                for a in rec["actions"]:
                    await self.step(s, a, journal=False)
            if rec["digest"] != (_digest(s.last) if s.last is not None else None):
                raise ProtocolError(
                    f"replaying session {sid} gave a different answer than before the restart (the env is not "
                    "deterministic given its seed and actions); reset instead",
                    ErrorCode.SESSION_ERROR,
                )
        except BaseException:
            self.close(s)
            raise
        self.counters["restored"] += 1
        return s

    def detach(self, s: Session) -> None:
        """The client's connection dropped without ``close``: keep the session for the grace period."""
        if s.id in self.sessions:
            s.attached, s.detached_at = False, time.monotonic()

    def close(self, s: Session) -> None:
        """End the session: give its env back and delete its journal."""
        if self.sessions.pop(s.id, None) is not None:
            self.pool.release(s.slot)
        path = self._journal_path(s.id)
        if path is not None:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()

    def close_all(self) -> None:
        """Shutdown: release every env but keep the journals, so a restarted server can restore the sessions."""
        for s in list(self.sessions.values()):
            self.sessions.pop(s.id, None)
            self.pool.release(s.slot)

    # -- the episode ---------------------------------------------------------------------------------------
    async def reset(
        self,
        s: Session,
        seed: int | None,
        options: dict[str, Any] | None,
        episode_id: str | None,
        *,
        journal=True,
    ) -> dict[str, Any]:
        s.last_active = time.monotonic()
        s.generation = self.pool.generation(s.slot)
        s.was_reset = False  # until this reset answers: a failed reset leaves nothing to step
        if self.pool.inline:
            obs, info = self.pool.reset_now(s.slot, seed, options)  # type: ignore[attr-defined]
        else:
            obs, info = await self._bounded(self.pool.reset(s.slot, seed, options), "reset")
        s.seed, s.options, s.episode_id = seed, to_json(options, "options"), episode_id
        s.actions, s.was_reset, s.done = [], True, False
        s.last = observation_payload(obs, info, session_id=s.id, step_index=0)
        if journal:
            self._write_journal(s)
        return s.last

    async def step(self, s: Session, action: str, *, journal=True) -> dict[str, Any]:
        s.last_active = time.monotonic()
        if not s.was_reset:
            raise ProtocolError("step before reset: send a reset message first", ErrorCode.NOT_RESET)
        if s.done:
            raise ProtocolError("the episode has ended; send reset to start another", ErrorCode.EPISODE_OVER)
        if s.generation != self.pool.generation(s.slot):
            s.was_reset = False
            raise ProtocolError(
                "this session's env worker was restarted: the episode is aborted; reset to continue",
                ErrorCode.EPISODE_ABORTED,
                abort_cause="worker_death",
            )
        try:
            if self.pool.inline:  # a cheap env: no task and no thread per step
                obs, reward, term, trunc, info = self.pool.step_now(s.slot, action)  # type: ignore[attr-defined]
            else:
                obs, reward, term, trunc, info = await self._bounded(self.pool.step(s.slot, action), "step")
        except EnvLostError as e:
            s.was_reset = False
            raise ProtocolError(
                f"the env was lost ({e}): the episode is aborted; reset to continue",
                ErrorCode.EPISODE_ABORTED,
                abort_cause=e.abort_cause,
            ) from None
        s.actions.append(action)
        s.done = bool(term or trunc)
        s.last = observation_payload(
            obs,
            info,
            session_id=s.id,
            step_index=len(s.actions),
            reward=reward,
            terminated=term,
            truncated=trunc,
        )
        self.counters["steps"] += 1
        if journal:
            self._write_journal(s)
        return s.last

    async def _bounded(self, coro: Any, what: str) -> Any:
        """A worker call: its deadline is the executor's own (``step_timeout_s``: a worker that does not answer
        in time is killed and restarted, and the call raises :class:`EnvLostError`). No ``asyncio.wait_for`` on
        top: cancelling the await would free the worker's lock while its thread still talks to the worker."""
        return await coro

    # -- reaping -------------------------------------------------------------------------------------------
    def reap(self, now: float | None = None) -> int:
        """End sessions past their grace period or idle timeout, and drop unclaimed journals; how many ended."""
        now = time.monotonic() if now is None else now
        ended = 0
        for s in list(self.sessions.values()):
            if s.lock.locked():  # mid-reset or mid-step: its own deadline applies
                continue
            expired = (
                not s.attached and s.detached_at is not None and now - s.detached_at > self.limits.grace_s
            )
            idle = now - s.last_active > self.limits.idle_timeout_s  # HTTP sessions too (they hold no socket)
            if expired or idle:
                if s.attached and s.on_reap is not None:
                    with contextlib.suppress(Exception):
                        s.on_reap(f"idle for more than {self.limits.idle_timeout_s:g} s")
                self.close(s)
                ended += 1
        self.counters["reaped"] += ended
        if self.state_dir is not None and now - self._started > self.limits.grace_s:
            self._drop_stale_journals()
        return ended

    async def reaper(self) -> None:
        """Run :meth:`reap` every few seconds (the app starts it as a task and cancels it on shutdown)."""
        period = max(0.05, min(5.0, self.limits.grace_s / 4, self.limits.idle_timeout_s / 4))
        while True:
            await asyncio.sleep(period)
            self.reap()

    # -- journals ------------------------------------------------------------------------------------------
    def _journal_path(self, sid: str) -> Path | None:
        if self.state_dir is None or not _ID.fullmatch(sid):
            return None
        return self.state_dir / f"{sid}.json"

    def _write_journal(self, s: Session) -> None:
        path = self._journal_path(s.id)
        if path is None:
            return
        rec = {
            "v": _JOURNAL_VERSION,
            "fingerprint": self.fingerprint,
            "seed": s.seed,
            "options": s.options,
            "episode_id": s.episode_id,
            "reset": s.was_reset,
            "actions": s.actions,
            "digest": _digest(s.last) if s.last is not None else None,
        }
        atomic_write_json(path, rec)

    def _drop_stale_journals(self) -> None:
        assert self.state_dir is not None
        cutoff = time.time() - self.limits.grace_s
        for p in self.state_dir.glob("*.json"):
            if p.stem in self.sessions or not _ID.fullmatch(p.stem):
                continue
            with contextlib.suppress(FileNotFoundError):
                if p.stat().st_mtime < cutoff:
                    p.unlink()
        for p in self.state_dir.glob(".journal-*.tmp"):  # left by a crash mid-write
            with contextlib.suppress(FileNotFoundError):
                if p.stat().st_mtime < cutoff:
                    p.unlink()
