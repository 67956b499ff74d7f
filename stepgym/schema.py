# Over 400 lines: every info key stepgym writes, each documented where it is defined.
"""The step-annotation schema: every key stepgym puts in an env's ``info`` dict, defined once.

Envs write the ground truth they know (task id, admissible commands, the expert's next command, a symbolic
state); wrappers *add* derived annotations (format validity, ARG labels, hints, peer hindsight); shapers and
trainers read them. Nobody types these strings twice: import the constants from here.

Each key is an :class:`InfoKey`, a ``str`` subclass (so ``info[schema.TASK_ID]`` works and the dict stays plain
and picklable) that also carries its Python type, its meaning and *when* it appears:

* ``"step"``   – in the info of every ``reset``/``step`` where the producer knows it;
* ``"episode"`` – only in the info of the step that ends the episode (terminated or truncated), because it needs
  the whole episode (Future-Drift, corrective hints);
* ``"group"``  – attached by :class:`stepgym.GroupEnv` once every rollout of the group has finished.

Value conventions (Gymnasium's vector envs take an info value's dtype from the first env): numbers are Python
``float``, flags Python ``bool``, ids ``str``; lists hold plain Python values; everything is deterministic given
the seed and the actions (no timestamps, no object ids).

The :class:`Step` and :class:`Trajectory` records are what offline labelers (``stepgym.reference_graph.label_trajectory``,
the hint analyzers, peer hindsight) and the trainer consume; :func:`stepgym.rollout.play_episode` turns a played
episode into one.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ABORT_CAUSES",
    "KEYS",
    "UNTYPED",
    "InfoKey",
    "Step",
    "Trajectory",
    "abort_info",
    "check_abort_cause",
    "describe",
    "is_success",
    "success_by_type",
]


class InfoKey(str):
    """An info-dict key with its documentation attached. Behaves exactly like its string value."""

    type: Any
    doc: str
    when: str
    producer: str

    def __new__(
        cls, name: str, type_: Any, doc: str, *, when: str = "step", producer: str = "env"
    ) -> InfoKey:
        if when not in ("step", "episode", "group"):
            raise ValueError(f"InfoKey.when must be step, episode or group, not {when!r}")
        obj = super().__new__(cls, name)
        obj.type = type_
        obj.doc = doc
        obj.when = when
        obj.producer = producer
        return obj

    def __reduce__(self) -> tuple[Any, ...]:  # pickle as the plain string: infos stay portable
        return (str, (str(self),))


KEYS: dict[str, InfoKey] = {}


def _key(name: str, type_: Any, doc: str, *, when: str = "step", producer: str = "env") -> InfoKey:
    full = f"stepgym/{name}"
    if full in KEYS:
        raise ValueError(f"duplicate info key {full}")
    k = InfoKey(full, type_, doc, when=when, producer=producer)
    KEYS[full] = k
    return k


# ---------------------------------------------------------------------------------------------------------------
# What every stepgym env knows (producer "env")
# ---------------------------------------------------------------------------------------------------------------
TASK_ID = _key(
    "task_id", str, "Stable id of the task (game, goal or question); equal across runs, workers and machines."
)
TASK_TYPE = _key(
    "task_type", str, "The task family used for per-type success (ALFWorld: pick_and_place_simple, ...)."
)
GOAL = _key("goal", str, "The task's goal/instruction in natural language.")
STEP_INDEX = _key("step_index", int, "0 after reset, then the number of actions taken so far.")
FEEDBACK = _key(
    "feedback", str, "The env's textual feedback for the last action (the next observation); '' after reset."
)
ADMISSIBLE_ACTIONS = _key(
    "admissible_actions",
    list,
    "The actions the env accepts in the current state (list[str]); absent if the env cannot enumerate them.",
)
ADMISSIBLE = _key("admissible", bool, "The last action was one the env accepts in the state it was taken in.")
EFFECTIVE = _key(
    "effective",
    (bool, type(None)),
    "The last action changed the world state (state_key before != after); None when that is unknown (an env "
    "without a state key, annotated by EnvFeedbackWrapper).",
)
WON = _key("won", bool, "The task is solved.")
STATE_KEY = _key(
    "state_key",
    str,
    "A comparable key of the true world state (from the engine's facts, never from observation text): equal iff "
    "the world states are equal. Used by GiGPO's exact step groups and by the ARG.",
)
SUBGOAL_KEY = _key(
    "subgoal_key",
    str,
    "A coarser, human-readable key of task progress (the goal-relevant part of the state). States with the same "
    "subgoal_key form one ARG equivalence class (order-insensitive steps inside a sub-goal are merged).",
)
EXPERT_ACTION = _key(
    "expert_action",
    (str, type(None)),
    "The env's oracle/expert next action in the current state, or None when no expert can say (documented per env).",
)
INVALID_REASON = _key("invalid_reason", str, "Why the last action was rejected ('' if it was accepted).")
REWARD_INFO = _key(
    "reward_info",
    dict,
    "Breakdown of the episode reward (env specific), at the end of the episode.",
    when="episode",
)

# ---------------------------------------------------------------------------------------------------------------
# The LLM text interface and env-feedback wrapper (producer "wrapper")
# ---------------------------------------------------------------------------------------------------------------
FORMAT_VALID = _key(
    "format_valid",
    bool,
    "The model's raw output parsed into an action (tags present and well formed).",
    producer="wrapper",
)
RAW_OUTPUT = _key(
    "raw_output", str, "The model's raw output for this step, before parsing.", producer="wrapper"
)
PARSED_ACTION = _key(
    "parsed_action",
    (str, type(None)),
    "The action parsed from the model output (None if invalid). Written by TextInterfaceWrapper, or by an env whose "
    "action is the whole model turn (Search-QA: 'search: <query>' / 'answer: <text>').",
    producer="wrapper",
)

# ---------------------------------------------------------------------------------------------------------------
# ProAS's Agentic Reference Graph (producer "ARGWrapper")
# ---------------------------------------------------------------------------------------------------------------
ARG_STATE = _key("arg_state", str, "The state key the ARG used for this state.", producer="ARGWrapper")
ARG_REASONABLE = _key(
    "arg_reasonable", bool, "Rea_t: (s_t, a_t, s_{t+1}) is an ARG edge (or PA_t).", producer="ARGWrapper"
)
ARG_PROGRESS = _key(
    "arg_progress",
    bool,
    "PA_t: s_{t+1}'s class is an ARG vertex not visited before in this episode.",
    producer="ARGWrapper",
)
ARG_LABELS = _key(
    "arg_labels",
    dict,
    "At episode end: {'reasonable': list[bool], 'progress': list[bool], 'future_drift': list[float]} for every step.",
    when="episode",
    producer="ARGWrapper",
)

# ---------------------------------------------------------------------------------------------------------------
# Corrective hints (AHEAD) and peer hindsight (StepOPSD)
# ---------------------------------------------------------------------------------------------------------------
ERROR_STEPS = _key(
    "error_steps",
    list,
    "At episode end (failed episodes): indices of the critical error steps.",
    when="episode",
    producer="HintWrapper",
)
HINTS = _key(
    "hints",
    dict,
    "At episode end (failed episodes): {step index (str): corrective hint}.",
    when="episode",
    producer="HintWrapper",
)
PEER_HINDSIGHT = _key(
    "peer_hindsight",
    (str, type(None)),
    "For a failed rollout in a group with a success: the first successful peer's trajectory as teacher text; None otherwise.",
    when="group",
    producer="GroupEnv",
)

# ---------------------------------------------------------------------------------------------------------------
# Search-QA specifics
# ---------------------------------------------------------------------------------------------------------------
RETRIEVED_IDS = _key("retrieved_ids", list, "Ids of the passages retrieved for the last search (list[str]).")
SEARCH_PRODUCTIVE = _key(
    "search_productive", bool, "The last search retrieved a passage containing a gold answer."
)
EXACT_MATCH = _key(
    "exact_match",
    float,
    "Exact match of the final answer (1.0 / 0.0), at the end of the episode.",
    when="episode",
)
F1 = _key("f1", float, "Token F1 of the final answer, at the end of the episode.", when="episode")

# ---------------------------------------------------------------------------------------------------------------
# WebShop specifics
# ---------------------------------------------------------------------------------------------------------------
WEBSHOP_AVAILABLE = _key(
    "webshop_available_actions",
    dict,
    "WebShop's get_available_actions() of the current page: {'has_search_bar': bool, 'clickables': list[str]}.",
)


# ---------------------------------------------------------------------------------------------------------------
# Ground-truth step values (producer "ValueWrapper"; see stepgym.values and docs/values.md)
# ---------------------------------------------------------------------------------------------------------------
VALUE_BEFORE = _key(
    "value_before",
    float,
    "The oracle's cost-to-go (fewest actions to success) from the state the action was taken in: a finite count, "
    "or 0.0 when success is not reachable there (see value_reachable). Search-QA: the stage (2 no gold answer "
    "gathered, 1 gold answer available, 0 answered correctly).",
    producer="ValueWrapper",
)
VALUE_AFTER = _key(
    "value_after",
    float,
    "The same from the state after the action (0.0 when won, or when success is unreachable). In reset's info: the "
    "value of the initial state.",
    producer="ValueWrapper",
)
VALUE_GAIN = _key(
    "value_gain",
    float,
    "value_before - value_after while success stays reachable (an optimal step +1.0, a wasted step 0.0, a harmful "
    "one < 0); -1.0 on a step that makes success unreachable (or drops the best reachable reward); 0.0 once it "
    "was already unreachable. Search-QA: the sign of the stage change (+1 first gold answer gathered or a correct "
    "answer, -1 a wrong answer).",
    producer="ValueWrapper",
)
VALUE_EXACT = _key(
    "value_exact",
    bool,
    "Both values are exact. False: at least one is an upper bound (the expert's completion, when the search ran "
    "out of its budget) or unknown (neither search nor expert reached success: then value_reachable is False).",
    producer="ValueWrapper",
)
VALUE_REACHABLE = _key(
    "value_reachable",
    bool,
    "Success is still reachable from the state after the action (proved by a found path; False with value_exact "
    "True is proved unreachable, with value_exact False unknown).",
    producer="ValueWrapper",
)
VALUE_BEST_REWARD = _key(
    "value_best_reward",
    float,
    "The best episode reward reachable from the state after the action (WebShop: the best product reward still "
    "reachable, or the reward earned once bought; the other envs: 1.0 if success is reachable else 0.0).",
    producer="ValueWrapper",
)

# ---------------------------------------------------------------------------------------------------------------
# Failure semantics (producer "GroupEnv" / the executors / the service clients; docs/failures.md)
# ---------------------------------------------------------------------------------------------------------------
#: Why an episode was aborted: an infrastructure failure, never the agent's. An aborted episode is neither
#: terminated nor truncated: it has no outcome, and every shaper and loss leaves its rows out.
ABORT_CAUSES: tuple[str, ...] = (
    "env_exception",  # the env's reset/step raised
    "worker_death",  # the process (or Ray actor) holding the env died
    "step_timeout",  # a step did not return within the executor's step timeout
    "retriever_unavailable",  # Search-QA's retrieval service did not answer
    "site_unavailable",  # WebShop's web site did not answer
    "hint_llm_unavailable",  # the hint / analyzer LLM endpoint did not answer
    "session_lost",  # a `stepgym serve` session (or a NeMo Gym resource server's) was lost
    "user_unavailable",  # a tool-use env's simulated user (an LLM endpoint) did not answer
)
ABORTED = _key(
    "aborted",
    bool,
    "The episode was cut off by an infrastructure failure (see abort_cause); it has no outcome, and its rows are "
    "kept out of every baseline, advantage and loss. Present (True) only in the info of the step that aborted it.",
    when="episode",
    producer="GroupEnv",
)
ABORT_CAUSE = _key(
    "abort_cause",
    str,
    "Why the episode was aborted: one of schema.ABORT_CAUSES (env_exception, worker_death, step_timeout, "
    "retriever_unavailable, site_unavailable, hint_llm_unavailable, session_lost, user_unavailable).",
    when="episode",
    producer="GroupEnv",
)
ABORT_DETAIL = _key(
    "abort_detail",
    str,
    "One line on the failure (the exception's type and message); for logs, never read by a shaper.",
    when="episode",
    producer="GroupEnv",
)


def check_abort_cause(cause: str) -> str:
    """``cause`` if it is one of :data:`ABORT_CAUSES`, else a ``ValueError`` naming them."""
    if cause not in ABORT_CAUSES:
        raise ValueError(f"unknown abort cause {cause!r}; expected one of {ABORT_CAUSES}")
    return cause


def abort_info(cause: str, detail: str = "") -> dict[str, Any]:
    """The info of the step that aborts an episode: ``{ABORTED: True, ABORT_CAUSE: cause, ABORT_DETAIL: ...}``."""
    return {
        ABORTED: True,
        ABORT_CAUSE: check_abort_cause(cause),
        ABORT_DETAIL: str(detail).splitlines()[0][:300] if detail else "",
    }


def describe() -> str:
    """A Markdown table of every key (the README's schema section is generated from this)."""
    lines = ["| key | type | when | producer | meaning |", "|---|---|---|---|---|"]
    for k in KEYS.values():
        t = k.type
        tname = " or ".join(x.__name__ for x in t) if isinstance(t, tuple) else t.__name__
        lines.append(f"| `{k}` | {tname} | {k.when} | {k.producer} | {k.doc} |")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------------------
# Records
# ---------------------------------------------------------------------------------------------------------------
@dataclass
class Step:
    """One transition: the observation the action was taken in, the action, and what came back."""

    observation: str
    action: str
    reward: float
    next_observation: str
    terminated: bool
    truncated: bool
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class Trajectory:
    """A whole episode. ``initial_info`` is reset's info; ``steps[t].info`` is the info after action t."""

    task_id: str
    initial_observation: str
    initial_info: dict[str, Any]
    steps: list[Step] = field(default_factory=list)
    aborted: bool = False
    """The episode was cut off by an infrastructure failure (neither terminated nor truncated; docs/failures.md)."""
    abort_cause: str | None = None
    """One of :data:`ABORT_CAUSES` when ``aborted``, else None."""

    def __post_init__(self) -> None:
        if self.abort_cause is not None:
            check_abort_cause(self.abort_cause)
        if self.aborted and self.abort_cause is None:
            raise ValueError("an aborted Trajectory needs an abort_cause (one of schema.ABORT_CAUSES)")

    def abort(self, cause: str) -> None:
        """Mark the episode aborted with ``cause`` (one of :data:`ABORT_CAUSES`)."""
        self.abort_cause = check_abort_cause(cause)
        self.aborted = True

    @property
    def actions(self) -> list[str]:
        return [s.action for s in self.steps]

    @property
    def total_reward(self) -> float:
        return float(sum(s.reward for s in self.steps))

    @property
    def success(self) -> bool:
        """Whether the episode succeeded: stepgym's one rule (StepOPSD's "correct", AHEAD's "successful").

        The last info's ``WON`` when the env reports it (ALFWorld, WebShop, the credit envs), else its
        ``EXACT_MATCH == 1.0`` (Search-QA's score), else a total reward of at least 1.0 (an env that reports
        neither). Rollout and endpoint evaluation, the failure-only hints, the peer hindsight, the group env, the
        trainer's evaluation and the recordings all read this property (a recording's ``won`` field holds it).
        """
        last = self.steps[-1].info if self.steps else self.initial_info
        if WON in last:
            return bool(last[WON])
        if EXACT_MATCH in last:
            return float(last[EXACT_MATCH]) == 1.0
        return self.total_reward >= 1.0

    @property
    def task_type(self) -> str:
        """reset's ``TASK_TYPE``, or :data:`UNTYPED` when the env reports none."""
        return str(self.initial_info.get(TASK_TYPE) or UNTYPED)

    @property
    def done(self) -> bool:
        return self.aborted or (bool(self.steps) and (self.steps[-1].terminated or self.steps[-1].truncated))

    @property
    def ending(self) -> str:
        """How the episode ended: "terminated", "truncated", "aborted", or "running" while it goes on."""
        if self.aborted:
            return "aborted"
        if self.steps and self.steps[-1].terminated:
            return "terminated"
        if self.steps and self.steps[-1].truncated:
            return "truncated"
        return "running"

    def infos(self) -> list[dict[str, Any]]:
        """reset's info followed by every step's info (length T + 1)."""
        return [self.initial_info, *(s.info for s in self.steps)]

    def state_keys(self, key: str = STATE_KEY) -> list[Any]:
        """s_0 .. s_T as recorded under ``key`` (length T + 1)."""
        return [i.get(key) for i in self.infos()]


def is_success(trajectory: Trajectory) -> bool:
    """:attr:`Trajectory.success` as a function (the default of the ``success_fn`` parameters)."""
    return trajectory.success


#: The task type of an episode whose env reports no ``TASK_TYPE`` (in every per-type table).
UNTYPED = "untyped"


def success_by_type(outcomes: Iterable[tuple[str, bool]]) -> dict[str, tuple[int, int]]:
    """task type -> (successes, episodes) of ``(task type, success)`` pairs, sorted by type; a missing type
    (``None`` or ``""``) counts as :data:`UNTYPED`. ``stepgym rollout``'s table and the evaluation summary use it."""
    counts: dict[str, list[int]] = {}
    for task_type, ok in outcomes:
        row = counts.setdefault(str(task_type or UNTYPED), [0, 0])
        row[0] += int(bool(ok))
        row[1] += 1
    return {k: (v[0], v[1]) for k, v in sorted(counts.items())}
