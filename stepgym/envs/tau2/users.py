"""The users of StepGym/Tau2-v0: a deterministic stand-in for tests and CPU runs, and upstream's LLM user.

:class:`ScenarioUser` is **a stand-in, not the benchmark's user**: it answers from the task's scenario (the reason
for the call and the known info), performs the device actions the agent asks for (telecom), says yes to
confirmations, and ends the call when the task's goal is met (the databases in the gold end state and the required
information said), on a transfer to a human agent, or after ``patience`` turns without progress. Scores against it
are not tau2-bench scores. The benchmark's user is upstream's ``UserSimulator`` (an LLM reading the scenario and
upstream's simulation guidelines), which :func:`llm_user` builds against any OpenAI-compatible endpoint.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from stepgym.envs.tau2.upstream import tau2
from stepgym.errors import ServiceUnavailableError

__all__ = ["USER_MODES", "ScenarioUser", "UserUnavailableError", "llm_user", "scenario_opening"]

USER_MODES = ("scenario", "llm")

STOP = "###STOP###"
TRANSFER = "###TRANSFER###"


class UserUnavailableError(ServiceUnavailableError):
    """The user simulator's LLM endpoint gave no answer: the episode is aborted (``user_unavailable``), never
    scored."""

    abort_cause = "user_unavailable"


def scenario_opening(task: Any) -> str:
    """What the stand-in user says first: the scenario's reason for the call and the info it knows."""
    ins = task.user_scenario.instructions
    if isinstance(ins, str):
        return ins.strip()
    parts = [ins.reason_for_call, ins.known_info]
    return "\n\n".join(p.strip() for p in parts if p and p.strip())


_CALL = re.compile(r"\b([a-z_][a-z0-9_]*)\(([^()]*)\)")


def requested_calls(text: str, user_tools: set[str]) -> list[tuple[str, dict[str, Any]]]:
    """The device actions an agent message asks for, written ``tool_name(...)`` with JSON or key=value arguments."""
    from stepgym.envs.tau2.calls import read_call

    out = []
    for m in _CALL.finditer(text or ""):
        if m.group(1) not in user_tools:
            continue
        got = read_call(m.group(0))
        if not isinstance(got, str):
            out.append(got)
    return out


def _make_scenario_user_class() -> type:
    base = tau2().user_base
    msg = tau2().message

    class _ScenarioUser(base.BaseUser):
        def __init__(self, task: Any, user_tools: set[str], verdict: Callable[[], str | None], patience: int):
            super().__init__(instructions=str(task.user_scenario), llm=None)
            self.task = task
            self.user_tools = set(user_tools)
            self.verdict = verdict
            self.patience = int(patience)
            self.idle = 0
            self.opened = False
            self.calls = 0

        def get_init_state(self, message_history: list[Any] | None = None) -> Any:
            history = list(message_history or [])
            self.opened = any(isinstance(m, msg.UserMessage) for m in history)
            return base.UserState(system_messages=[], messages=history)

        @classmethod
        def is_stop(cls, message: Any) -> bool:
            if message.is_tool_call():
                return False
            return STOP in (message.content or "") or TRANSFER in (message.content or "")

        def set_seed(self, seed: int) -> None:  # deterministic: nothing to seed
            pass

        def generate_next_message(self, message: Any, state: Any) -> tuple[Any, Any]:
            if isinstance(message, msg.MultiToolMessage):
                state.messages.extend(message.tool_messages)
                results = [m.content for m in message.tool_messages]
            else:
                state.messages.append(message)
                results = [message.content] if isinstance(message, msg.ToolMessage) else []
            if results:  # the device answered the actions asked for: report what it shows
                text = "I did that. My phone shows: " + " | ".join(str(r) for r in results)
            else:
                text = self._answer(message.content or "")
            if isinstance(text, list):
                self.calls += len(text)
                out = msg.UserMessage(
                    role="user",
                    tool_calls=[
                        msg.ToolCall(
                            id=f"user-{self.calls - len(text) + i}", name=n, arguments=a, requestor="user"
                        )
                        for i, (n, a) in enumerate(text)
                    ],
                )
            else:
                out = msg.UserMessage(role="user", content=text)
            state.messages.append(out)
            return out, state

        def _answer(self, text: str) -> str | list[tuple[str, dict[str, Any]]]:
            if not self.opened:
                self.opened = True
                return scenario_opening(self.task)
            asked = requested_calls(text, self.user_tools)
            if asked:
                self.idle = 0
                return asked
            verdict = self.verdict()
            if verdict is not None:
                return verdict
            self.idle += 1
            if self.idle > self.patience:
                return "I have to go now, thank you. " + STOP
            known = getattr(self.task.user_scenario.instructions, "known_info", None) or ""
            return ("Yes, please go ahead. " + known.strip()).strip()

    return _ScenarioUser


_CLASS: list[type] = []


def ScenarioUser(
    task: Any, user_tools: set[str], verdict: Callable[[], str | None], patience: int = 5
) -> Any:
    """The deterministic stand-in user (an upstream ``BaseUser``; see the module). ``verdict()`` returns the
    message that ends the call (the goal is met, or the agent transferred the user) or ``None`` to go on."""
    if not _CLASS:
        _CLASS.append(_make_scenario_user_class())
    return _CLASS[0](task, user_tools, verdict, patience)


def llm_user(task: Any, user_tools: list[Any] | None, endpoint: dict[str, Any]) -> Any:
    """Upstream's ``UserSimulator`` for ``task`` (its instructions are ``str(task.user_scenario)``, as upstream's
    runner builds it) talking to an OpenAI-compatible endpoint through litellm: ``endpoint`` holds ``base_url``,
    ``model`` and optionally ``api_key``, ``temperature``, ``timeout`` (s) and ``retries``."""
    missing = {"base_url", "model"} - set(endpoint)
    if missing:
        raise ValueError(f"user_endpoint needs {sorted(missing)} (got {sorted(endpoint)})")
    args = {
        "api_base": str(endpoint["base_url"]).rstrip("/"),
        "api_key": str(endpoint.get("api_key") or "EMPTY"),
        "temperature": float(endpoint.get("temperature", 0.0)),
        "timeout": float(endpoint.get("timeout", 60.0)),
        "num_retries": int(endpoint.get("retries", 2)),
    }
    model = str(endpoint["model"])
    return tau2().user.UserSimulator(
        tools=user_tools or None,
        instructions=str(task.user_scenario),
        llm=model if model.startswith("openai/") else f"openai/{model}",  # litellm's OpenAI-compatible route
        llm_args=args,
    )


def said_flags(trajectory: list[Any], info: list[str]) -> list[bool]:
    """Which of ``info`` an agent text message of ``trajectory`` says (upstream's CommunicateEvaluator's test: the
    info lower-cased, in the message lower-cased and without commas)."""
    m = tau2().message
    texts = [
        (x.content or "").lower().replace(",", "")
        for x in trajectory
        if isinstance(x, m.AssistantMessage) and x.has_text_content()
    ]
    return [any(str(i).lower() in t for t in texts) for i in info]


def stand_in_verdict(
    orchestrator: Any, gold_end: tuple[Any, Any], task: Any, hashes: tuple[Any, Any]
) -> str | None:
    """How the stand-in user ends the call, or None to go on: a transfer once the agent called
    ``transfer_to_human_agents``; a stop once ``hashes`` (the databases now) equal the gold end state ``gold_end``
    and the agent has said every piece of info the task requires."""
    m = tau2().message
    for x in orchestrator.trajectory:
        calls = x.tool_calls if isinstance(x, m.AssistantMessage) and x.is_tool_call() else []
        if any(c.name == "transfer_to_human_agents" for c in calls):
            return "Okay, I will wait for a human agent. " + TRANSFER
    if hashes != gold_end:
        return None
    info = (
        list(task.evaluation_criteria.communicate_info or []) if task.evaluation_criteria is not None else []
    )
    if not all(said_flags(orchestrator.trajectory, info)):
        return None
    return "Thank you, that is all I needed. " + STOP


def user_failure(exc: BaseException) -> UserUnavailableError:
    """The abort error of a user LLM call that raised ``exc`` (one line)."""
    detail = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
    return UserUnavailableError(
        f"the user simulator's endpoint did not answer: {type(exc).__name__}: {detail}"
    )
