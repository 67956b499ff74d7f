"""The env in-process, played with its own expert: the reference a served env is compared against.

``served_episode`` plays the same actions against ``stepgym serve`` over OpenEnv's websocket messages and returns
the same records, so a test compares the two lists.

``local_episode`` runs where stepgym's env stack is installed. Tests whose own interpreter lacks it (the NeMo Gym
tests run on Python 3.13) run this file with the main interpreter instead:
``python tests/_serve_reference.py ENV_ID KWARGS_JSON SEED MAX_STEPS [EXTRA_ACTION_JSON]`` prints the episode as
one JSON list.
"""

from __future__ import annotations

import json
import sys
from typing import Any


def fallback_action(env_id: str) -> str:
    """What to play when the env names no expert action."""
    return "answer: unknown" if "SearchQA" in env_id else "look"


def local_episode(
    env_id: str, kwargs: dict[str, Any], seed: int, max_steps: int, *, first_action: str | None = None
) -> list[dict[str, Any]]:
    """One record per reset or step (``action``, ``observation``, ``reward``, ``terminated``, ``truncated``,
    ``info`` as JSON, as ``stepgym serve`` answers it); the expert's actions, after ``first_action`` if given."""
    import gymnasium as gym

    import stepgym  # noqa: F401 - registers the envs
    from stepgym import schema
    from stepgym.serve.protocol import to_json

    env = gym.make(env_id, **kwargs)
    obs, info = env.reset(seed=seed)
    out = [_record(None, obs, None, False, False, to_json(info))]
    for k in range(max_steps):
        a = first_action if k == 0 and first_action is not None else None
        a = a or info.get(schema.EXPERT_ACTION) or fallback_action(env_id)
        obs, r, term, trunc, info = env.step(a)
        out.append(_record(a, obs, float(r), bool(term), bool(trunc), to_json(info)))
        if term or trunc:
            break
    env.close()
    return out


def served_episode(
    env_id: str, kwargs: dict[str, Any], seed: int, actions: list[str], *, timeout: float = 60
) -> list[dict[str, Any]]:
    """:func:`local_episode`'s records for ``actions`` played through a ``stepgym serve`` server on 127.0.0.1."""
    from websockets.sync.client import connect

    from stepgym.serve.protocol import ServeLimits
    from stepgym.serve.server import ServeConfig, ServerThread

    def ask(ws: Any, kind: str, data: dict[str, Any]) -> dict[str, Any]:
        ws.send(json.dumps({"type": kind, "data": data}))
        return json.loads(ws.recv(timeout=timeout))["data"]

    srv = ServerThread(ServeConfig(env_id, kwargs, port=0, limits=ServeLimits(max_sessions=1)))
    with srv, connect(srv.url.replace("http://", "ws://") + "/ws") as ws:
        o = ask(ws, "reset", {"seed": seed})["observation"]
        out = [_record(None, o["text"], None, False, False, o["info"])]
        for a in actions:
            d = ask(ws, "step", {"action": a})
            o = d["observation"]
            out.append(_record(a, o["text"], d["reward"], o["terminated"], o["truncated"], o["info"]))
        ws.send(json.dumps({"type": "close"}))
    return out


def _record(action, obs, reward, terminated, truncated, info) -> dict[str, Any]:
    return {
        "action": action,
        "observation": obs,
        "reward": reward,
        "terminated": terminated,
        "truncated": truncated,
        "info": info,
    }


if __name__ == "__main__":
    env_id, kwargs, seed, max_steps = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    first = json.loads(sys.argv[5]) if len(sys.argv) > 5 else None
    json.dump(local_episode(env_id, kwargs, seed, max_steps, first_action=first), sys.stdout)
