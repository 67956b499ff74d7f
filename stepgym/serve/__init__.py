"""Serve any stepgym env (wrappers included) over the network, speaking OpenEnv 0.10's protocol.

``stepgym serve StepGym/ALFWorld-v0 --port 8000`` starts the server; any OpenEnv client (``GenericEnvClient``,
TRL's OpenEnv path, :class:`stepgym.serve.client.RemoteEnv`) connects to ``ws://127.0.0.1:8000/ws`` and gets one
env per WebSocket session. Every step's observation carries the env's text, its per-step reward and the whole
stepgym ``info`` dict (the :mod:`stepgym.schema` keys, as JSON): nothing is summed away.

The modules (imported only when used, so ``import stepgym`` stays light):

* :mod:`stepgym.serve.protocol` — the wire format (OpenEnv's messages), JSON typing of infos, error codes, limits;
* :mod:`stepgym.serve.pool` — where the envs live: in the server process, or in ``stepgym.workers`` processes;
* :mod:`stepgym.serve.sessions` — sessions: capacity, resume within a grace period, idle reaping, journals that
  survive a restart;
* :mod:`stepgym.serve.app` — the ASGI app (Starlette) and :func:`~stepgym.serve.app.run` (uvicorn);
* :mod:`stepgym.serve.guard` — what uvicorn lacks: a deadline on every request head, a cap on open connections;
* :mod:`stepgym.serve.client` — :class:`~stepgym.serve.client.RemoteEnv`, a Gymnasium env over OpenEnv's client.

See docs/serve.md.
"""
