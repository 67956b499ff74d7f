"""The reference a StepGym/Tau2-v0 episode is checked against: upstream's own orchestrator run and evaluator.

:func:`upstream_reward` replays the agent messages of a stepgym episode through upstream's ``Orchestrator.run``
(a scripted agent sends them in order; the user is a fresh stand-in user, or upstream's DummyUser in solo mode)
and scores the run with upstream's ``evaluate_simulation``. Equal rewards (and equal conversations) say that the
env's step loop is upstream's. :func:`play` runs an agent policy in the env: the expert, or the expert with one
deliberate fault (:data:`PERTURBATIONS`), so the check also covers failed trajectories.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from stepgym import schema
from stepgym.envs.tau2.calls import call_text, looks_like_call, read_call
from stepgym.envs.tau2.env import evaluate, gym_agent_class
from stepgym.envs.tau2.upstream import tau2
from stepgym.envs.tau2.users import ScenarioUser, stand_in_verdict

__all__ = ["PERTURBATIONS", "agent_messages", "conversation", "play", "sent_messages", "upstream_reward"]

PERTURBATIONS = (
    "none",
    "drop_first_write",
    "wrong_argument",
    "unknown_tool",
    "no_closing_info",
    "early_stop",
)


def agent_messages(trajectory: list[Any]) -> list[Any]:
    """The agent's messages of an upstream trajectory (deep copies)."""
    m = tau2().message
    return [copy.deepcopy(x) for x in trajectory if isinstance(x, m.AssistantMessage)]


def conversation(trajectory: list[Any]) -> list[tuple[str, str]]:
    """An upstream trajectory as (role, text) pairs without ids, costs or timestamps (for comparing two runs)."""
    out = []
    for x in trajectory:
        calls = getattr(x, "tool_calls", None)
        if calls:
            text = json.dumps([[c.name, c.arguments, c.requestor] for c in calls], sort_keys=True)
        else:
            text = str(x.content)
        out.append((x.role, text))
    return out


def _scripted_agent(messages: list[Any]) -> Any:
    """The env's agent (:func:`~stepgym.envs.tau2.env.gym_agent_class`) handed ``messages`` one per request, each a
    copy with a fresh timestamp."""
    base = gym_agent_class()

    class GymAgent(base):  # the subclass keeps the name upstream's solo mode accepts
        def __init__(self) -> None:
            super().__init__()
            self.queue = [copy.deepcopy(x) for x in messages]

        def generate_next_message(self, message: Any, state: Any) -> tuple[Any, Any]:
            if not self.queue:
                raise RuntimeError("the scripted agent ran out of messages")
            self.pending = self.queue.pop(0)
            self.pending.timestamp = tau2().message.AssistantMessage(role="assistant", content="x").timestamp
            return super().generate_next_message(message, state)

    return GymAgent()


def upstream_reward(env: Any, messages: list[Any], config: Any = None) -> tuple[float, list[Any]]:
    """(upstream's reward, upstream's trajectory) of ``messages`` sent by the agent in upstream's own run of the
    env's current task, with the env's domain, mode and orchestrator limits."""
    t = tau2()
    task = env._task
    domain = env._constructor_name()
    cfg = config or env.config
    environment = t.registry.get_env_constructor(domain)(solo_mode=env.solo_mode)
    holder: dict[str, Any] = {}
    if env.solo_mode:
        user = t.user.DummyUser()
    else:
        gold_end = env.gold(task).hashes[-1]  # the env's replay of the same gold calls (kept per task)
        tools = (
            {x.name for x in environment.get_user_tools()} if environment.user_tools is not None else set()
        )

        def verdict() -> str | None:
            o = holder["orch"]
            return stand_in_verdict(
                o, gold_end, task, (o.environment.get_db_hash(), o.environment.get_user_db_hash())
            )

        user = ScenarioUser(task, tools, verdict, cfg.patience)
    orch = t.orchestrator.Orchestrator(
        domain=env.domain,
        agent=_scripted_agent(messages),
        user=user,
        environment=environment,
        task=task,
        max_steps=cfg.max_messages,
        max_errors=cfg.max_errors,
        solo_mode=env.solo_mode,
    )
    holder["orch"] = orch
    sim = orch.run()
    got, _ = evaluate(sim, task, env.solo_mode, domain)
    return float(got.reward), sim.messages


def _perturb(kind: str, action: str, state: dict[str, Any], env: Any) -> str:
    """The action the perturbed expert sends instead of the expert's ``action`` (once per episode)."""
    if state.get("done") or kind == "none":
        return action
    if looks_like_call(action):
        got = read_call(action)
        name, args = got if not isinstance(got, str) else ("", {})
        writes = {s.name for s in env.gold().steps if s.writes}
        if kind == "drop_first_write" and name in writes and state.get("dropped", name) == name:
            state["dropped"] = name  # never made: each time the expert proposes it, something else is sent
            return "Let me check that for you." if not env.solo_mode else call_text("no_such_tool", {})
        if kind == "wrong_argument" and name in writes and args:
            key = sorted(args)[0]
            bad = dict(args)
            bad[key] = (str(bad[key]) + "X") if not isinstance(bad[key], (list, dict)) else []
            state["done"] = True
            return call_text(name, bad)
        if kind == "unknown_tool":
            state["done"] = True
            return call_text("no_such_tool", {"x": 1})
    elif kind == "no_closing_info" and action.startswith("Here is the information"):
        state["done"] = True
        return "Your request has been handled."
    elif kind == "early_stop" and env._orch is not None and not env.solo_mode:
        state["done"] = True
        return "###STOP###"
    return action


def sent_messages(env: Any) -> list[Any]:
    """The messages the agent sent in the env's episode: its trajectory's agent messages after the task's message
    history, without upstream's opening greeting (the orchestrator sends it)."""
    init = env._task.initial_state
    history = len(init.message_history or []) if init is not None else 0
    out = agent_messages(env._orch.trajectory[history:])
    greeting = tau2().orchestrator.DEFAULT_FIRST_AGENT_MESSAGE.content
    if not env.solo_mode and history == 0 and out and out[0].content == greeting:
        out = out[1:]
    return out


def play(env: Any, task_id: str, perturbation: str = "none", max_steps: int = 60) -> dict[str, Any]:
    """Play the expert (or the expert with one ``perturbation``) on ``task_id`` in the env (an unwrapped
    Tau2Env or a ``gym.make`` one). Returns reward, steps, terminated, info and the agent's messages."""
    if perturbation not in PERTURBATIONS:
        raise ValueError(f"perturbation must be one of {PERTURBATIONS}, got {perturbation!r}")
    base = env.unwrapped
    obs, info = env.reset(options={"task_id": task_id})
    state: dict[str, Any] = {}
    reward, steps, term, trunc = 0.0, 0, False, False
    invalid = 0
    while not (term or trunc) and steps < max_steps:
        action = info[schema.EXPERT_ACTION]
        if action is None:  # off the gold path: close the call (the stand-in user leaves after its patience)
            action = (
                call_text("done", {}) if base.solo_mode else "Is there anything else I can help you with?"
            )
        action = _perturb(perturbation, action, state, base)
        obs, reward, term, trunc, info = env.step(action)
        steps += 1
        invalid += not info[schema.ADMISSIBLE]
    return {
        "reward": float(reward),
        "steps": steps,
        "terminated": bool(term),
        "truncated": bool(trunc),
        "invalid_steps": invalid,
        "info": info,
        "messages": sent_messages(base),
        "trajectory": base._orch.get_trajectory(),
    }
