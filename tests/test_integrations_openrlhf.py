"""stepgym envs through OpenRLHF 0.11.2's own agent executor (env level: OpenRLHF's training needs deepspeed, vLLM
and a GPU). Episodes run through the real ``MultiTurnAgentExecutor.execute`` loop; only the generation engine is a
stand-in (``StandInEngine``, in place of OpenRLHF's vLLM engine), replying with the env's expert action or with a
scripted bad reply."""

from __future__ import annotations

import asyncio
import contextvars
import importlib
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import gymnasium as gym
import pytest

pytest.importorskip("openrlhf")
pytest.importorskip("trl")  # the tiny ChatML tokenizer of tests/_trl_tiny.py

from _trl_tiny import tiny_chat_model
from openrlhf.utils.agent import AgentExecutorBase, MultiTurnAgentExecutor

from stepgym import schema
from stepgym.errors import DependencyNotInstalled
from stepgym.integrations import task_rows
from stepgym.integrations.openrlhf import UNKNOWN, agent_classes, state_key_id
from stepgym.reference_graph import AgenticReferenceGraph
from stepgym.wrappers.arg import ARGWrapper

TOY = "StepGym/CreditToy-v0"
KW = {"n_tasks": 3, "n_rooms": 3, "n_distractors": 1, "max_steps": 6}
SYSTEM = "Find the key and open the door."
_CURRENT: contextvars.ContextVar[Any] = contextvars.ContextVar("current_agent")


@pytest.fixture(scope="module")
def tok() -> Any:
    text = "<think>next</think><action>go to room 1</action> Admissible actions: take key, open door"
    tokenizer, _ = tiny_chat_model([{"messages": [{"role": "user", "content": text}]}], vocab=400)
    return tokenizer


class StandInEngine:
    """Stands in for OpenRLHF's vLLM engine: ``generate(token_ids, sampling_params)`` returns a vLLM-like
    output. The reply is ``script[i]`` for the episode's i-th turn while there is one, else the env's expert
    action; a reply in ``truncate`` ends without EOS (``finish_reason="length"``), as a cut-off reply does."""

    def __init__(
        self, tokenizer: Any, script: list[str] = (), truncate: frozenset[int] = frozenset()
    ) -> None:
        self.tok, self.script, self.truncate = tokenizer, list(script), truncate
        self.replies: dict[int, list[str]] = {}

    async def generate(self, prompt_token_ids: list[int], sampling_params: Any, multi_modal_data: Any = None):
        agent = _CURRENT.get()
        done = self.replies.setdefault(id(agent), [])
        i = len(done)
        text = self.script[i] if i < len(self.script) else _reply(agent.info[schema.EXPERT_ACTION])
        done.append(text)
        ids = self.tok(text, add_special_tokens=False)["input_ids"]
        cut = i in self.truncate
        if not cut:
            ids = [*ids, self.tok.eos_token_id]
        out = SimpleNamespace(
            token_ids=ids, text=text, finish_reason="length" if cut else "stop", logprobs=None
        )
        return SimpleNamespace(outputs=[out])


def _reply(action: str) -> str:
    return f"<think>next</think><action>{action}</action>"


def _executor(**kw: Any) -> tuple[Any, list[Any]]:
    """The adapter's executor, its instance class subclassed only to expose each episode to the stand-in engine."""
    Instance, Executor = agent_classes(TOY, KW, fmt="alfworld", system_prompt=SYSTEM, **kw)
    made: list[Any] = []

    class Recorded(Instance):
        async def reset(self, states, **kwargs):
            made.append(self)
            _CURRENT.set(self)
            self.prompts = []
            return await super().reset(states, **kwargs)

        async def step(self, states, **kwargs):
            self.prompts.append(self.env.prompt)
            return await super().step(states, **kwargs)

    class Exec(Executor):
        instance_cls = Recorded

    assert issubclass(Executor, MultiTurnAgentExecutor) and issubclass(Executor, AgentExecutorBase)
    return Exec(), made


def _run(executor: Any, tok: Any, engine: Any, prompt: str, label: Any, max_length: int = 4096) -> dict:
    params = SimpleNamespace(max_tokens=64, logprobs=None)
    return asyncio.run(executor.execute(prompt, label, params, max_length, tok, engine))


def test_full_episodes_through_openrlhfs_executor_carry_rewards_and_annotations(tok: Any) -> None:
    rows = task_rows(TOY, KW)
    executor, made = _executor()
    engine = StandInEngine(tok, script=["I will just wander", _reply("dance")], truncate=frozenset({1}))
    out = _run(executor, tok, engine, "ignored prompt", rows[1]["task_id"])
    (agent,) = made
    ep = agent.annotations
    assert ep["task_id"] == rows[1]["task_id"] and ep["won"] and out["reward"] == 1.0
    bad, dance, *rest = ep["steps"]
    assert bad["format_valid"] is False and dance["format_valid"] and dance["admissible"] is False
    assert all(s["admissible"] and s["state_key"] is not None for s in rest)
    # the token row is exactly the chat the template renders: the adapter wrote the template's tokens itself,
    # closing the cut-off reply's turn (no EOS) and not doubling the EOS of a finished one
    replies = engine.replies[id(agent)]
    messages = [{"role": "system", "content": SYSTEM}]
    for prompt, reply, (a, b) in zip(agent.prompts, replies, out["action_ranges"], strict=True):
        messages += [{"role": "user", "content": prompt}, {"role": "assistant", "content": reply}]
        assert tok.decode(out["observation_tokens"][a:b], skip_special_tokens=True) == reply
    text = tok.decode(out["observation_tokens"], skip_special_tokens=False)
    assert text + "\n" == tok.apply_chat_template(messages, tokenize=False)
    assert len(replies) == len(ep["steps"]) and "find the key" in agent.prompts[0]
    # extra_logs: numbers only (OpenRLHF makes tensors of them), the last step's and the episode's annotations
    logs = out["extra_logs"]
    assert all(isinstance(v, float) for v in logs.values())
    assert (
        logs["stepgym/won"] == 1.0
        and logs["stepgym/admissible"] == 1.0
        and logs["stepgym/format_valid"] == 1.0
    )
    assert logs["stepgym/steps"] == len(ep["steps"]) and logs["stepgym/return"] == out["scores"] == 1.0
    assert logs["stepgym/format_valid_rate"] == (len(ep["steps"]) - 1) / len(ep["steps"])
    assert logs["stepgym/task_index"] == 1.0
    assert logs["stepgym/state_key_id"] == state_key_id(ep["steps"][-1]["state_key"]) != UNKNOWN
    assert logs["stepgym/arg_reasonable"] == UNKNOWN  # no ARGWrapper: not annotated, never guessed


def test_concurrent_episodes_task_from_prompt_and_arg_labels(tok: Any) -> None:
    rows = task_rows(TOY, KW)
    graph = AgenticReferenceGraph()
    base = gym.make(TOY, **KW)
    graph.seed_from_expert(base, [r["task_id"] for r in rows])
    executor, made = _executor(wrappers=[lambda e: ARGWrapper(e, graph=graph)])
    engine = StandInEngine(tok)

    async def all_rows():
        params = SimpleNamespace(max_tokens=64, logprobs=None)
        # the label is no task id: the adapter finds the task id in the prompt text
        calls = [executor.execute(f"solve {r['task_id']} now", None, params, 4096, tok, engine) for r in rows]
        return await asyncio.gather(*calls)

    outs = asyncio.run(all_rows())
    assert sorted(a.annotations["task_id"] for a in made) == sorted(r["task_id"] for r in rows)
    for out in outs:
        assert out["reward"] == 1.0 and out["extra_logs"]["stepgym/won"] == 1.0
        assert out["extra_logs"]["stepgym/arg_reasonable"] == 1.0 == out["extra_logs"]["stepgym/arg_progress"]
    executor, _ = _executor()
    with pytest.raises(ValueError, match="label_key"):
        _run(executor, tok, engine, "no task here", "not-a-task")


def test_the_docs_agent_file_loads_the_way_openrlhf_loads_it(tmp_path: Path) -> None:
    """OpenRLHF's loader (vllm_engine._load_agent_executor, which needs vLLM to import) execs the file, takes
    ``AgentExecutor`` and builds it with no arguments; the same steps here."""
    path = tmp_path / "agent.py"
    path.write_text(
        "from stepgym.integrations.openrlhf import agent_classes\n"
        f"AgentInstance, AgentExecutor = agent_classes({TOY!r}, {KW!r}, fmt='alfworld')\n"
    )
    spec = importlib.util.spec_from_file_location("agent_module", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert issubclass(module.AgentExecutor, AgentExecutorBase)
    executor = module.AgentExecutor()
    assert executor.agent_instance_cls is module.AgentInstance


def test_a_missing_openrlhf_names_the_pip_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "openrlhf", None)
    monkeypatch.delitem(sys.modules, "stepgym.integrations.openrlhf", raising=False)
    with pytest.raises(DependencyNotInstalled, match=r"pip install 'stepgym\[openrlhf\]'"):
        importlib.import_module("stepgym.integrations.openrlhf")
