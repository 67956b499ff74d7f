# Over 400 lines: the env, its step truth (validity, expert, sub-goals, state key, bound) and its upstream orchestration in one class.
"""``StepGym/Tau2-v0``: tau2-bench (Barres et al., 2025) on its own code, tools, databases, policies and evaluator.

One env step is one agent message: a tool call (the canonical JSON of :mod:`stepgym.envs.tau2.calls`, which the
text format :mod:`stepgym.envs.tau2.prompt` produces from a ``<tool_call>`` reply) or a text message to the user.
Upstream's orchestrator carries it: a call goes to the domain's tools and the observation is the tool's answer; a
message goes to the user, whose device actions (telecom) run on upstream's tools, and the observation is the
user's reply. The episode ends when upstream's orchestrator ends it (the user or the agent stops, too many tool
errors, too many messages) or at ``max_steps`` agent messages; its reward is upstream's ``evaluate_simulation``
(evaluation type ``all``: the database end state, the env assertions, the gold actions and the communicated info,
as each task's reward basis says) on the conversation upstream's orchestrator recorded.

Step truth (docs/tau2.md): each call's validity (a tool error, which is where upstream's tools enforce the
policy, or a call that does not parse), the expert's next action (the next gold call not yet realised given the
database so far), the gold writes realised (sub-goals), a state key (both databases' hashes plus the conversation's
phase) and a steps-to-go *bound*.
"""

from __future__ import annotations

import copy
import functools
import hashlib
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from stepgym import schema
from stepgym.envs.base import TextEnv, lru_get, read_text_action
from stepgym.envs.options import env_config
from stepgym.envs.tau2.calls import call_text, looks_like_call, read_call
from stepgym.envs.tau2.candidates import candidate_calls, seen_calls, value_pool
from stepgym.envs.tau2.gold import GoldPath, db_hashes
from stepgym.envs.tau2.prompt import render_tools
from stepgym.envs.tau2.upstream import DOMAINS, SOLO_DOMAINS, domain_splits, load_tasks, tau2
from stepgym.envs.tau2.users import (
    USER_MODES,
    ScenarioUser,
    llm_user,
    said_flags,
    stand_in_verdict,
    user_failure,
)
from stepgym.errors import InvalidArgumentError

__all__ = ["SPLITS", "Tau2Config", "Tau2Env", "task_ids"]

SPLITS = ("test", "train", "base", "small", "full")
"""The split names of upstream's ``split_tasks.json`` files (a domain has some of them: mock only ``base``)."""
MAX_ACTION_CHARS = 20_000
STOP_TOOL = "done"  # upstream's solo agent ends by calling it (LLMSoloAgent.STOP_FUNCTION_NAME)
STOP_TOKEN = "###STOP###"
USER_STAND_IN = "scenario stand-in (deterministic; not the benchmark's LLM user)"

# tau2's LLMAgent instruction, reworded: the system prompt an agent gets besides the policy and the tools
AGENT_INSTRUCTION = (
    "You are a customer service agent. Help the user according to the policy below. Each turn, either send one "
    "message to the user or make one tool call, never both. Always follow the policy."
)
SOLO_INSTRUCTION = (
    "You are a customer service agent. Solve the ticket below according to the policy, with tool calls only (you "
    f"cannot talk to the user). When the ticket is solved, call the `{STOP_TOOL}` tool alone."
)


@dataclass(frozen=True)
class Tau2Config:
    """StepGym/Tau2-v0's rarely-set options (``gym.make(..., max_errors=5)`` sets one by name)."""

    user_endpoint: dict[str, Any] = field(default_factory=dict)
    """``user="llm"``: ``{"base_url": ..., "model": ..., "api_key"?, "temperature"?, "timeout"?, "retries"?}`` of an
    OpenAI-compatible endpoint for upstream's UserSimulator."""
    max_errors: int = 10
    """Upstream's orchestrator ends the conversation after this many tool errors (its default, 10)."""
    max_messages: int = 100
    """Upstream's orchestrator step limit (messages of every role; its default, 100)."""
    patience: int = 5
    """The stand-in user ends the call after this many replies in a row without progress."""
    policy_type: str = "manual"
    """Telecom's policy text: ``"manual"`` (upstream's ``telecom``) or ``"workflow"`` (``telecom-workflow``)."""
    candidate_calls: bool = False
    """List a few candidate messages per step in ``info[schema.ADMISSIBLE_ACTIONS]`` (the expert's next action, other
    tools and a wrong argument drawn from the task's data, two stock messages; sorted, seeded by task and step:
    :mod:`stepgym.envs.tau2.candidates`), for learners that choose from a list. Off: no list (the env takes any
    message, as upstream)."""


def task_ids(domain: str, split: str) -> tuple[str, ...]:
    """The task ids of a domain's split (upstream's ``split_tasks.json``), in upstream's order."""
    splits = domain_splits(domain)
    if split not in splits:
        raise InvalidArgumentError(
            f"tau2 domain {domain!r} has no split {split!r}; its splits are {', '.join(sorted(splits))}"
        )
    return tuple(splits[split])


@functools.cache
def gym_agent_class() -> type:
    """Upstream's agent interface (``tau2().agent_base.BaseAgent``) answering with the message it was handed in
    ``pending``: the env hands it the step's message; :mod:`stepgym.envs.tau2.reference`'s scripted agent, each
    message of a script in turn. Upstream's solo mode accepts an agent of this class name, as its own gym interface
    does. Made once per process."""
    base = tau2().agent_base

    class GymAgent(base.BaseAgent):
        def __init__(self) -> None:
            self.pending: Any = None

        def generate_next_message(self, message: Any, state: Any) -> tuple[Any, Any]:
            if self.pending is None:
                raise RuntimeError("the orchestrator asked the agent twice for one env step")
            out, self.pending = self.pending, None
            return out, state

        def get_init_state(self, message_history: Any = None) -> Any:
            return None

        def stop(self, message: Any = None, state: Any = None) -> None:
            pass

        @classmethod
        def is_stop(cls, message: Any) -> bool:
            return bool(message.content) and STOP_TOKEN in message.content

        def set_seed(self, seed: int) -> None:
            pass

    return GymAgent


#: gold paths by (domain, task id), shared by the envs of a process (a GoldPath is never changed once built)
_GOLD: OrderedDict[tuple[str, str], GoldPath] = OrderedDict()
_GOLD_MAX = 4096


class Tau2Env(TextEnv):
    """tau2-bench's customer-service tasks, played one agent message per step, scored by upstream's evaluator.

    Example (the expert's first call on a mock task, against the deterministic stand-in user)::

        >>> import gymnasium as gym, stepgym
        >>> from stepgym import schema
        >>> env = gym.make("StepGym/Tau2-v0", domain="mock", split="base")
        >>> obs, info = env.reset(options={"task_id": "mock/create_task_1"})
        >>> info[schema.EXPERT_ACTION]
        '{"arguments": {"title": "Important Meeting", "user_id": "user_1"}, "name": "create_task"}'

    Args:
        domain: ``airline``, ``retail``, ``telecom`` or ``mock``.
        split: a split of upstream's ``split_tasks.json`` for the domain (default ``test``; mock: ``base``).
        user: ``"scenario"`` (the deterministic stand-in, :class:`~stepgym.envs.tau2.users.ScenarioUser`) or
            ``"llm"`` (upstream's UserSimulator at ``user_endpoint``).
        solo_mode: upstream's solo mode (telecom, mock): no user; the agent reads the task's ticket, may call the
            user's device tools itself and ends by calling ``done``.
        max_steps: agent messages per episode (truncation).
    """

    options_class = Tau2Config

    def __init__(
        self,
        domain: str = "airline",
        split: str | None = None,
        user: str = "scenario",
        solo_mode: bool = False,
        max_steps: int = 50,
        render_mode: str | None = None,
        config: Tau2Config | None = None,
        **options: Any,
    ) -> None:
        super().__init__(max_steps=max_steps, render_mode=render_mode)
        self.config = env_config(Tau2Config, config, options, type(self))
        if domain not in DOMAINS:
            raise InvalidArgumentError(f"tau2 domain must be one of {', '.join(DOMAINS)}, got {domain!r}")
        if user not in USER_MODES:
            raise InvalidArgumentError(f"user must be one of {', '.join(USER_MODES)}, got {user!r}")
        if solo_mode and domain not in SOLO_DOMAINS:
            raise InvalidArgumentError(
                f"solo_mode needs tasks with a ticket; the domains that have them are {', '.join(SOLO_DOMAINS)}"
            )
        if user == "llm" and not solo_mode:
            missing = {"base_url", "model"} - set(self.config.user_endpoint)
            if missing:
                raise InvalidArgumentError(f"user='llm' needs user_endpoint with {sorted(missing)}")
        if self.config.policy_type not in ("manual", "workflow"):
            raise InvalidArgumentError(
                f"policy_type must be manual or workflow, got {self.config.policy_type!r}"
            )
        self.domain = domain
        self.split = split or ("test" if "test" in domain_splits(domain) else "base")
        self.user_mode = user
        self.solo_mode = bool(solo_mode)
        ids = set(task_ids(domain, self.split))
        self.tasks = {t.id: t for t in load_tasks(domain) if t.id in ids}
        if self.solo_mode:
            self.tasks = {k: t for k, t in self.tasks.items() if _solo_ok(t)}
        self.task_ids: tuple[str, ...] = tuple(f"{domain}/{k}" for k in self.tasks)
        if not self.task_ids:
            raise InvalidArgumentError(f"tau2 {domain}/{self.split} has no task for this mode")
        self._gold: dict[str, GoldPath] = {}
        self._orch: Any = None
        self._task: Any = None
        self._reward_info: dict[str, Any] = {}
        self._hash_at: Any = None
        self._hash: tuple[str | None, str | None] = (None, None)
        self._schemas: list[dict[str, Any]] | None = None  # the tools are the same for every task of the env
        self._pools: dict[
            str, dict[str, list[Any]]
        ] = {}  # candidate_calls: the task's data per argument name

    # -- the upstream pieces --------------------------------------------------------------------------------
    def _constructor_name(self) -> str:
        return (
            "telecom-workflow"
            if self.domain == "telecom" and self.config.policy_type == "workflow"
            else self.domain
        )

    def gold(self, task: Any | None = None) -> GoldPath:
        """The gold path of ``task`` (default: the current task), replayed once and kept."""
        task = task or self._task
        if task.id not in self._gold:
            # the replay is the same for every env of the process: kept once
            self._gold[task.id] = lru_get(
                _GOLD, (self.domain, task.id), lambda: GoldPath(self.domain, task), _GOLD_MAX
            )
        return self._gold[task.id]

    @property
    def environment(self) -> Any:
        """Upstream's live environment of the episode (its tools and databases)."""
        return self._orch.environment

    @property
    def trajectory(self) -> list[Any]:
        """Upstream's messages of the episode so far, in upstream's order (what its evaluator reads)."""
        return self._orch.get_trajectory()

    def tool_schemas(self) -> list[dict[str, Any]]:
        """The OpenAI/JSON schemas of the tools the agent may call (upstream's ``Tool.openai_schema``; solo mode adds
        the user's device tools and ``done``)."""
        if self._schemas is not None:
            return copy.deepcopy(self._schemas)
        env = self.environment
        tools = list(env.get_tools())
        if self.solo_mode and env.user_tools is not None:
            tools += list(env.get_user_tools())
        out = [t.openai_schema for t in sorted(tools, key=lambda t: t.name)]
        if self.solo_mode:
            out.append(
                {
                    "type": "function",
                    "function": {
                        "name": STOP_TOOL,
                        "description": "Call this function when you are done with the task.",
                        "parameters": {"type": "object", "properties": {}, "required": []},
                    },
                }
            )
        self._schemas = copy.deepcopy(out)
        return out

    def system_prompt(self) -> str:
        """The agent's instructions and the domain's policy (and the ticket, in solo mode)."""
        policy = self.environment.get_policy()
        text = (
            f"<instructions>\n{SOLO_INSTRUCTION if self.solo_mode else AGENT_INSTRUCTION}\n</instructions>\n"
        )
        text += f"<policy>\n{policy}\n</policy>"
        if self.solo_mode:
            text += f"\n<ticket>\n{self._task.ticket}\n</ticket>"
        return text

    def _verdict(self) -> str | None:
        """The stand-in user's end of the call (:func:`~stepgym.envs.tau2.users.stand_in_verdict`)."""
        return stand_in_verdict(self._orch, self.gold().hashes[-1], self._task, self._hashes())

    def _hashes(self) -> tuple[str | None, str | None]:
        """Both databases' hashes now (computed once per orchestrator step: hashing a database is costly)."""
        if (
            not self._started
        ):  # solo mode before the first call: the task's initial state, as the gold replay's
            return self.gold().hashes[0]
        key = (id(self._orch), self._orch.step_count, self._orch.done)
        if self._hash_at != key:
            self._hash_at, self._hash = key, db_hashes(self.environment)
        return self._hash

    def _calls(self) -> list[Any]:
        m = tau2().message
        out = []
        for msg in self._orch.trajectory:
            if isinstance(msg, (m.AssistantMessage, m.UserMessage)) and msg.is_tool_call():
                out.extend(msg.tool_calls)
        return out

    def _said_flags(self, info: list[str]) -> list[bool]:
        return said_flags(self._orch.trajectory, info)

    # -- TextEnv hooks --------------------------------------------------------------------------------------
    def _clean_action(self, action: Any) -> tuple[str, str]:
        text, problem = read_text_action(action, MAX_ACTION_CHARS, noun="message")
        if not problem and not text.strip():
            problem = "the message is empty"
        return text.strip(), problem

    def _reset_task(self, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        task_id = options.get("task_id")
        if task_id is None:
            task_id = self.task_ids[int(self.np_random.integers(len(self.task_ids)))]
        bare = str(task_id).split("/", 1)[1] if str(task_id).startswith(f"{self.domain}/") else str(task_id)
        if bare not in self.tasks:
            raise ValueError(
                f"unknown task_id {task_id!r} for tau2 {self.domain}/{self.split} ({len(self.task_ids)} tasks, e.g. "
                f"{self.task_ids[0]!r})"
            )
        t = tau2()
        self._task = self.tasks[bare]
        self._reward_info = {}
        environment = t.registry.get_env_constructor(self._constructor_name())(solo_mode=self.solo_mode)
        self._agent = gym_agent_class()()
        user: Any
        if self.solo_mode:
            user = t.user.DummyUser()
            self._user_label = "none (solo mode)"
        elif self.user_mode == "llm":
            user_tools = environment.get_user_tools() if environment.user_tools is not None else None
            user = llm_user(self._task, user_tools, self.config.user_endpoint)
            self._user_label = f"upstream UserSimulator ({self.config.user_endpoint.get('model')})"
        else:
            tools = (
                {x.name for x in environment.get_user_tools()}
                if environment.user_tools is not None
                else set()
            )
            user = ScenarioUser(self._task, tools, self._verdict, self.config.patience)
            self._user_label = USER_STAND_IN
        self._orch = t.orchestrator.Orchestrator(
            domain=self.domain,
            agent=self._agent,
            user=user,
            environment=environment,
            task=self._task,
            max_steps=self.config.max_messages,
            max_errors=self.config.max_errors,
            solo_mode=self.solo_mode,
        )
        self._started = False
        self.gold()
        if not self.solo_mode:  # solo mode: upstream's initialize asks the agent for its first message
            self._start()
            self._advance()
        obs = (
            self._observation() if not self.solo_mode else "The ticket is in your instructions. Call a tool."
        )
        return obs, self._info(obs, True, False, "", None, at_reset=True)

    def _start(self) -> None:
        self._started = True
        try:
            self._orch.initialize()
        except Exception as exc:
            if self._user_is_llm():
                raise user_failure(exc) from exc
            raise

    def _user_is_llm(self) -> bool:
        return self.user_mode == "llm" and not self.solo_mode

    def _orch_step(self) -> None:
        """One step of upstream's orchestrator, with its run loop's checks (Orchestrator.run)."""
        o = self._orch
        to_user = o.to_role == t_role().USER
        try:
            o.step()
        except Exception as exc:
            if to_user and self._user_is_llm():
                raise user_failure(exc) from exc
            raise
        if o.to_role == t_role().ENV or o.done:
            return
        if o.step_count >= o.max_steps:
            o.done = True
            o.termination_reason = tau2().simulation.TerminationReason.MAX_STEPS
        if o.num_errors >= o.max_errors:
            o.done = True
            o.termination_reason = tau2().simulation.TerminationReason.TOO_MANY_ERRORS

    def _advance(self) -> None:
        """Run upstream's orchestrator until the agent is to speak again (or the conversation ended)."""
        o = self._orch
        while not o.done and o.to_role != t_role().AGENT:
            self._orch_step()

    def _observation(self) -> str:
        o = self._orch
        if o.message is None:
            return ""
        m = tau2().message
        msg = o.message
        if isinstance(msg, m.MultiToolMessage):
            return "\n".join(f"Tool result: {x.content}" for x in msg.tool_messages)
        if isinstance(msg, m.ToolMessage):
            return f"Tool result: {msg.content}"
        if isinstance(msg, m.UserMessage):
            return f"User: {msg.content}"
        return f"Agent: {msg.content}"

    def _message_of(self, action: str) -> tuple[Any, str, str | None]:
        """(upstream message, problem, tool name) for an action; ``problem`` non-empty: nothing is sent."""
        m = tau2().message
        if looks_like_call(action):
            got = read_call(action)
            if isinstance(got, str):
                return None, got, None
            name, args = got
            if self.solo_mode and name == STOP_TOOL:
                return m.AssistantMessage(role="assistant", content=STOP_TOKEN), "", name
            call = m.ToolCall(id=f"call-{self._steps}", name=name, arguments=args, requestor="assistant")
            return m.AssistantMessage(role="assistant", tool_calls=[call]), "", name
        if self.solo_mode and STOP_TOKEN not in action:
            return None, "solo mode: the agent can only call tools (end with the done tool)", None
        return m.AssistantMessage(role="assistant", content=action), "", None

    def _step_action(self, action: str, problem: str) -> tuple[str, float, bool, dict[str, Any]]:
        if (
            self._started and self._orch.done
        ):  # the user ended the call before the agent spoke (a task's history)
            reward = self._evaluate()
            obs = "The user has ended the conversation."
            return (
                obs,
                reward,
                True,
                self._info(obs, False, False, "the conversation had already ended", reward),
            )
        if not problem:
            msg, problem, tool = self._message_of(action)
        if problem:
            obs = f"Invalid action: {problem}"
            return obs, 0.0, False, self._info(obs, False, False, problem, None)
        before = self.state_key()
        keeps = self._keeps_databases(tool)
        self._agent.pending = msg
        if not self._started:
            self._start()
            if not self._orch.done:
                self._advance()
        else:
            self._orch_step()
            self._advance()
        if keeps:  # the databases are as before: their hashes too (hashing a database is the costly part)
            self._hash_at = (id(self._orch), self._orch.step_count, self._orch.done)
        obs = self._observation()
        reason = ""
        if tool is not None and tool != STOP_TOOL:
            answers = self._tool_answers()
            bad = [a for a in answers if a.error]
            if bad:
                reason = f"tool error: {bad[0].content}"[:500]
        if self._orch.done:
            reward = self._evaluate()
            info = self._info(obs, not reason, self.state_key() != before, reason, reward)
            return obs, reward, True, info
        return obs, 0.0, False, self._info(obs, not reason, self.state_key() != before, reason, None)

    def _keeps_databases(self, tool: str | None) -> bool:
        """Whether the agent message about to be sent cannot change either database: the conversation has started
        (the cached hashes are the live ones), the user has no tools (so their turn writes nothing) and the message
        is text or a call of a tool upstream declares a read (``ToolType.READ``)."""
        env = self.environment
        if not self._started or env.user_tools is not None or self.solo_mode:
            return False
        if tool is None:
            return True
        tools = env.tools
        if tools is None or not tools.has_tool(tool):
            return True  # an unknown tool: upstream answers with an error and runs nothing
        return tools.tool_type(tool) == tau2().toolkit.ToolType.READ

    def _tool_answers(self) -> list[Any]:
        """The tool messages answering the agent's last call (upstream's ToolMessage, with its ``error`` flag)."""
        m = tau2().message
        traj = self._orch.trajectory
        for k in range(len(traj) - 1, -1, -1):
            x = traj[k]
            if isinstance(x, m.AssistantMessage) and x.is_tool_call():
                ids = {c.id for c in x.tool_calls}
                return [y for y in traj[k + 1 :] if isinstance(y, m.ToolMessage) and y.id in ids]
        return []

    # -- the reward: upstream's evaluator -------------------------------------------------------------------
    def simulation(self) -> Any:
        """The episode as upstream's ``SimulationRun`` (what its evaluator and its viewer read)."""
        t = tau2()
        o = self._orch
        reason = o.termination_reason or t.simulation.TerminationReason.MAX_STEPS
        return t.simulation.SimulationRun(
            id=f"stepgym-{self._task.id}",
            task_id=self._task.id,
            start_time="",
            end_time="",
            duration=0.0,
            termination_reason=reason.value if hasattr(reason, "value") else str(reason),
            reward_info=None,
            user_cost=None,
            agent_cost=None,
            messages=o.get_trajectory(),
            seed=None,
        )

    def _evaluate(self) -> float:
        sim = self.simulation()
        key = _episode_key(sim, self._task.id, self.solo_mode, self._constructor_name())
        if key in _SCORED:
            got, error = _SCORED[key]
        else:
            got, error = evaluate(sim, self._task, self.solo_mode, self._constructor_name())
            while _SCORED and len(_SCORED) >= _SCORED_MAX:
                _SCORED.pop(next(iter(_SCORED)))
            if _SCORED_MAX > 0:
                _SCORED[key] = (got, error)
        self._reward_info = reward_breakdown(got, sim.termination_reason, self._task, self._user_label)
        if error:
            self._reward_info["evaluator_error"] = error
        return float(got.reward)

    # -- step truth -----------------------------------------------------------------------------------------
    def _depth(self) -> int | None:
        return self.gold().depth(self._hashes())

    def phase(self) -> str:
        """The conversation's phase: whose turn, the gold reads made, the info said, and whether it ended."""
        gold = self.gold()
        called = self._calls()
        reads = "".join(
            "1" if any(a.compare_with_tool_call(c) for c in called) else "0"
            for a, s in zip(gold.actions, gold.steps, strict=True)
            if not s.writes
        )
        info = (
            list(self._task.evaluation_criteria.communicate_info or [])
            if self._task.evaluation_criteria
            else []
        )
        said = "".join("1" if f else "0" for f in self._said_flags(info))
        end = (
            self._orch.termination_reason.value
            if self._orch.done and self._orch.termination_reason
            else "open"
        )
        return f"reads={reads};said={said};end={end}"

    def state_key(self) -> str:
        """Both databases' hashes (upstream's) and the conversation's phase, hashed."""
        if self._orch is None:
            return ""
        agent, user = self._hashes()
        raw = f"{agent}|{user}|{self.phase()}"
        return "tau2:" + hashlib.sha1(raw.encode("utf-8")).hexdigest()[:16]

    def expert_action(self) -> str | None:
        """The next gold call not yet realised given the databases so far (see docs/tau2.md); once every gold
        call is realised, the closing message (with the info the task requires) or, in solo mode, ``done``. None
        when the databases left the gold path, and when the episode is over."""
        if self._orch is None or self._orch.done:
            return None
        gold = self.gold()
        depth = self._depth()
        if depth is None:
            return None
        pending = gold.pending(depth, self._calls())
        if pending:
            k = pending[0]
            step = gold.steps[k]
            if step.requestor == "user" and not self.solo_mode:
                return f"Please do this on your phone and tell me what it shows: {_func_text(step.name, step.arguments)}"
            return call_text(step.name, step.arguments)
        if self.solo_mode:
            return call_text(STOP_TOOL, {})
        info = (
            list(self._task.evaluation_criteria.communicate_info or [])
            if self._task.evaluation_criteria
            else []
        )
        said = self._said_flags(info)
        missing = [i for i, f in zip(info, said, strict=True) if not f]
        if missing:
            return "Here is the information you asked for: " + ", ".join(str(i) for i in missing) + "."
        return "Your request has been handled. Is there anything else I can help you with?"

    def steps_to_go_bound(self) -> int | None:
        """Agent messages the expert still needs from here against the stand-in user (an upper bound of the fewest;
        a real user may need more turns): pending gold calls (a user-side call costs one request message) plus
        the closing message or ``done``. None off the gold path; 0 once the episode ended."""
        if self._orch is None:
            return None
        if self._orch.done:
            return 0
        depth = self._depth()
        if depth is None:
            return None
        gold = self.gold()
        pending = gold.pending(depth, self._calls())
        return len(pending) + 1  # the closing message (the required info in it), or done

    def candidates(self, step: int) -> tuple[list[str], list[str]]:
        """(the candidate messages of step ``step``, the candidate calls whose arguments all appeared in the
        conversation): :mod:`stepgym.envs.tau2.candidates`; none once the episode is over."""
        if self._orch is None or self._orch.done:
            return [], []
        task = self._task
        if task.id not in self._pools:  # first asked at reset: the live database is the task's initial one
            db = getattr(getattr(self.environment, "tools", None), "db", None)
            actions = list(task.evaluation_criteria.actions or []) if task.evaluation_criteria else []
            self._pools[task.id] = value_pool(actions, db)
        got = candidate_calls(
            self.expert_action(),
            self.tool_schemas(),
            self._pools[task.id],
            f"{self.domain}/{task.id}",
            step,
            talk=not self.solo_mode,
        )
        m = tau2().message
        said = "\n".join(
            str(x.content)
            for x in self._orch.trajectory
            if isinstance(x, (m.UserMessage, m.ToolMessage)) and x.content
        )
        return got, seen_calls(got, said)

    def _info(
        self,
        feedback: str,
        admissible: bool,
        effective: bool,
        reason: str,
        reward: float | None,
        at_reset: bool = False,
    ) -> dict[str, Any]:
        depth = self._depth() if self._orch is not None else 0
        gold = self.gold()
        won = reward is not None and reward >= 1.0
        realised = gold.writes_realised(depth)
        info: dict[str, Any] = {
            schema.TASK_ID: f"{self.domain}/{self._task.id}",
            schema.TASK_TYPE: self.domain,
            schema.GOAL: self.system_prompt() + "\n\n" + render_tools(self.tool_schemas()),
            schema.FEEDBACK: feedback,
            schema.ADMISSIBLE: bool(admissible),
            schema.EFFECTIVE: bool(effective),
            schema.WON: bool(won),
            schema.STATE_KEY: self.state_key(),
            schema.SUBGOAL_KEY: f"gold_writes:{realised}/{gold.n_writes}"
            if depth is not None
            else "off_gold_path",
            schema.EXPERT_ACTION: self.expert_action(),
            schema.INVALID_REASON: reason,
            "tau2/user": self._user_label,
            "tau2/steps_to_go_bound": self.steps_to_go_bound(),
            "tau2/gold_writes_realised": realised,
        }
        if reward is not None:
            info[schema.REWARD_INFO] = dict(self._reward_info)
        if self.config.candidate_calls:
            # the step the list is for: 0 after reset, else the one after this (TextEnv counts it after _info)
            listed, seen = self.candidates(0 if at_reset else self._steps + 1)
            info[schema.ADMISSIBLE_ACTIONS] = listed
            info["tau2/candidates_seen"] = seen
        return info


#: upstream's verdicts on finished conversations, by :func:`_episode_key`: its evaluator is a pure function of the
#: task and the messages (it replays the calls on fresh databases), and a learner replays the same conversation
#: often (a group on one task, a converged policy), so a repeat is scored once per process (oldest dropped first)
_SCORED: dict[str, tuple[Any, str]] = {}
_SCORED_MAX = 4096


def _episode_key(simulation: Any, task_id: str, solo_mode: bool, domain: str) -> str:
    """What upstream's evaluator reads of a finished conversation (the messages without their wall-clock fields,
    the termination), with the task and mode, hashed."""
    import json

    skip = {"timestamp", "cost", "usage", "raw_data"}
    msgs = [x.model_dump(mode="json", exclude=skip) for x in simulation.messages]
    raw = json.dumps(
        [domain, task_id, solo_mode, simulation.termination_reason, msgs], sort_keys=True, default=str
    )
    return hashlib.sha256(raw.encode("utf-8")).hexdigest()


def t_role() -> Any:
    return tau2().orchestrator.Role


def _solo_ok(task: Any) -> bool:
    if not task.ticket or task.evaluation_criteria is None:
        return False
    m = tau2().message
    history = (task.initial_state.message_history or []) if task.initial_state is not None else []
    return not any(
        isinstance(x, m.UserMessage) or (isinstance(x, m.AssistantMessage) and not x.is_tool_call())
        for x in history
    )


def _func_text(name: str, arguments: dict[str, Any]) -> str:
    import json

    return f"{name}({json.dumps(arguments, sort_keys=True)})" if arguments else f"{name}()"


def evaluate(simulation: Any, task: Any, solo_mode: bool, domain: str) -> tuple[Any, str]:
    """(upstream's RewardInfo, '') of a finished simulation; when upstream's evaluator raises (an env assertion on
    a record the conversation never created), reward 0 and the error, as upstream's runner scores a failed sample
    (``skip_failed_samples``)."""
    t = tau2()
    try:
        got = t.evaluator.evaluate_simulation(
            simulation=simulation,
            task=task,
            evaluation_type=t.evaluator.EvaluationType.ALL,
            solo_mode=solo_mode,
            domain=domain,
        )
    except Exception as exc:  # upstream's evaluator raising is upstream's failed sample, scored 0
        return t.simulation.RewardInfo(
            reward=0.0, info={"note": "evaluator raised"}
        ), f"{type(exc).__name__}: {exc}"[:300]
    return got, ""


def reward_breakdown(got: Any, termination: str, task: Any, user_label: str) -> dict[str, Any]:
    """The info's ``REWARD_INFO``: upstream's RewardInfo as plain values, and what was and was not scored."""
    basis = [str(getattr(b, "value", b)) for b in (got.reward_basis or [])]
    out: dict[str, Any] = {
        "reward": float(got.reward),
        "termination": str(getattr(termination, "value", termination)),
        "evaluator": "tau2 evaluate_simulation (evaluation_type=all)",
        "reward_basis": basis,
        "scored": basis,
        "not_scored": ["NL_ASSERTION (an LLM judge; in no task's reward basis in tau2 26.3)"]
        if task.evaluation_criteria is not None and task.evaluation_criteria.nl_assertions
        else [],
        "user": user_label,
    }
    if got.db_check is not None:
        out["db_match"] = bool(got.db_check.db_match)
    if got.action_checks:
        out["actions_matched"] = [bool(c.action_match) for c in got.action_checks]
    if got.communicate_checks:
        out["info_communicated"] = [bool(c.met) for c in got.communicate_checks]
    if got.env_assertions:
        out["env_assertions_met"] = [bool(c.met) for c in got.env_assertions]
    if got.info and "note" in got.info:
        out["note"] = str(got.info["note"])
    return out
