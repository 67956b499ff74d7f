"""stepgym envs through OpenRLHF 0.11.2's own agent executor (env level: OpenRLHF's training needs deepspeed, vLLM
and a GPU). Episodes run through the real ``MultiTurnAgentExecutor.execute`` loop; only the generation engine is a
stand-in (``StandInEngine``, in place of OpenRLHF's vLLM engine), replying with the env's expert action or with a
scripted bad reply."""

from __future__ import annotations

import asyncio
import contextvars
import importlib
import importlib.abc
import importlib.machinery
import json
import os
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("openrlhf")
pytest.importorskip("trl")  # the tiny ChatML tokenizer of tests/_trl_tiny.py

from _oracles import oracle_step_batch
from _trl_tiny import tiny_chat_model
from openrlhf.utils.agent import AgentExecutorBase, MultiTurnAgentExecutor

from stepgym import schema
from stepgym.errors import DependencyNotInstalled
from stepgym.graph_seeding import seed_graph_from_expert
from stepgym.integrations.openrlhf import UNKNOWN, agent_classes, state_key_id
from stepgym.reference_graph import AgenticReferenceGraph
from stepgym.steps.tasks import task_rows
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
            self.prompts.append(self.env.get_wrapper_attr("prompt"))
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
    seed_graph_from_expert(graph, base, [r["task_id"] for r in rows])
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


class _Probe(gym.Wrapper):
    """Notes what it wraps and the actions it is given."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.actions: list[Any] = []

    def step(self, action: Any):
        self.actions.append(action)
        return super().step(action)


def test_wrappers_go_outside_the_text_interface_as_everywhere_else(tok: Any) -> None:
    """``agent_classes(wrappers=...)`` means what ``Episode.make``'s, TRL's and verl's ``wrappers=`` mean: wrappers
    of the text env, first = innermost, that see the model's reply text as the action."""
    from stepgym.steps.episode import Episode
    from stepgym.wrappers.text import TextInterfaceWrapper

    row = task_rows(TOY, KW)[0]
    executor, made = _executor(wrappers=[_Probe, gym.wrappers.RecordEpisodeStatistics])
    engine = StandInEngine(tok, script=["I will just wander"])
    _run(executor, tok, engine, "p", row["task_id"])
    (agent,) = made
    outer = agent.env
    assert isinstance(outer, gym.wrappers.RecordEpisodeStatistics) and isinstance(outer.env, _Probe)
    assert isinstance(outer.env.env, TextInterfaceWrapper)
    assert outer.env.actions == engine.replies[id(agent)]  # the reply texts, as the model wrote them
    # the same stack as Episode.make's
    same = Episode.make(TOY, KW, fmt="alfworld", wrappers=[_Probe, gym.wrappers.RecordEpisodeStatistics])
    try:
        layers = lambda e: [type(w).__name__ for w in _chain(e)]  # noqa: E731
        assert layers(outer) == layers(same.env)
    finally:
        same.close()


def _chain(env: gym.Env) -> list[gym.Env]:
    out = [env]
    while isinstance(out[-1], gym.Wrapper):
        out.append(out[-1].env)
    return out


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


# ---------------------------------------------------------------------------------------------------------------
# stepgym's advantages inside OpenRLHF's trainer (stepgym.integrations.openrlhf_train)
# ---------------------------------------------------------------------------------------------------------------
CUDA_ONLY = ("flash_attn", "vllm")


class _CudaOnlyStandIns(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Stand-ins for the CUDA-only packages OpenRLHF's trainer modules import at the top (flash-attn's kernels,
    vLLM's engine): importable empty modules whose every name is a class that refuses to be built. Nothing the
    advantage step or the policy loss runs touches them."""

    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in CUDA_ONLY:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        import types

        class Stub(types.ModuleType):
            def __getattr__(self, attr):
                if attr.startswith("__"):
                    raise AttributeError(attr)

                class CudaOnly:
                    def __init__(self, *a, **k):
                        raise RuntimeError(f"{spec.name}.{attr} is CUDA-only (a test stand-in)")

                setattr(self, attr, CudaOnly)
                return CudaOnly

        return Stub(spec.name)

    def exec_module(self, module):
        module.__path__ = []


@pytest.fixture(scope="module")
def orl_train():
    """stepgym.integrations.openrlhf_train imported with the CUDA-only stand-ins, which are removed afterwards so
    no other test sees them (DeepSpeed itself is real: scripts/setup.sh installs it)."""
    import transformers  # noqa: F401  (imported first: its availability checks must not see the stand-ins)

    finder = _CudaOnlyStandIns()
    sys.meta_path.insert(0, finder)
    try:
        module = importlib.import_module("stepgym.integrations.openrlhf_train")
    finally:
        sys.meta_path.remove(finder)
        for name in [m for m in sys.modules if m.split(".")[0] in CUDA_ONLY]:
            del sys.modules[name]
    return module


G = 4


@pytest.fixture(scope="module")
def orl_episodes(tok: Any):
    """Two tasks × G episodes through OpenRLHF's executor: some won by the expert, some lost to bad replies."""
    rows = task_rows(TOY, KW)[:2]
    graph = AgenticReferenceGraph()
    base = gym.make(TOY, **KW)
    seed_graph_from_expert(graph, base, [r["task_id"] for r in rows])
    executor, made = _executor(wrappers=[lambda e: ARGWrapper(e, graph=graph)])
    scripts = [[], ["I will wander"], [_reply("dance")] * 6, [_reply("take key"), "no tags"]]
    out = []
    for row in rows:
        for script in scripts:
            resp = _run(executor, tok, StandInEngine(tok, script=script), "p", row["task_id"])
            out.append((row["task_id"], resp, made[-1]))
    assert len({r["reward"] for _, r, _ in out}) > 1
    return out


def _experiences(orl_episodes, tok):
    from openrlhf.trainer.ppo_utils.experience import Experience
    from openrlhf.trainer.ppo_utils.samples_generator import SamplesGenerator

    samples = []
    for i, (_, resp, _) in enumerate(orl_episodes):
        s = SamplesGenerator._process_response_into_experience(
            None, resp, max_len=4096
        )  # OpenRLHF's own step
        s.index = [i]
        samples.append(s)
    half = len(samples) // 2  # two micro-batches, as split_rollout_samples makes them
    return [
        Experience.concat_experiences(samples[:half], tok.pad_token_id),
        Experience.concat_experiences(samples[half:], tok.pad_token_id),
    ]


def _maker(orl_train, use_kl_loss=True):
    from openrlhf.trainer.ppo_utils.kl_controller import FixedKLController

    maker = object.__new__(orl_train.StepExperienceMaker)  # the advantage step, without the GPU model actors
    algo = SimpleNamespace(kl=SimpleNamespace(use_loss=use_kl_loss))
    maker.strategy = SimpleNamespace(
        args=SimpleNamespace(algo=algo, rollout=SimpleNamespace(n_samples_per_prompt=G))
    )
    maker.kl_ctl = FixedKLController(0.01)
    return maker


def _orl_expected(orl_episodes, width, preset):
    from stepgym.shapers import ShapeConfig, shape_advantages

    sb = oracle_step_batch(
        [agent.annotations["steps"] for _, _, agent in orl_episodes],
        [task for task, _, _ in orl_episodes],
        width,
        spans=[[(a - 1, b - 1) for a, b in resp["action_ranges"]] for _, resp, _ in orl_episodes],
    )  # action_mask drops the first token
    return shape_advantages(sb, ShapeConfig.from_preset(preset)).token_advantages


@pytest.mark.parametrize(
    "preset",
    [
        "gigpo-alfworld",
        "proas-gigpo",
        "grpo-alfworld",
        "graphgpo-alfworld",
        "hgpo-alfworld",
        "rewardflow-alfworld",
        "g2po-alfworld",
    ],
)
def test_openrlhfs_loss_receives_stepgyms_advantages(
    orl_train, orl_episodes, tok, monkeypatch, preset
) -> None:
    import torch
    from openrlhf.models import PolicyLoss

    monkeypatch.setenv("STEPGYM_PRESET", preset)
    exps = _maker(orl_train).compute_advantages_and_returns(_experiences(orl_episodes, tok))
    width = max(e.action_mask.shape[1] for e in exps)
    want = _orl_expected(orl_episodes, width, preset)
    half = len(orl_episodes) // 2
    for k, e in enumerate(exps):
        w = e.action_mask.shape[1]
        assert np.allclose(e.advantages.numpy(), want[k * half : (k + 1) * half, :w], atol=1e-5)
        # OpenRLHF's policy loss on them: at ratio 1 its gradient is −advantage on every action token, 0 elsewhere
        lp = torch.zeros(e.advantages.shape, requires_grad=True)
        loss = PolicyLoss()(lp, torch.zeros(e.advantages.shape), e.advantages, action_mask=e.action_mask)[0]
        loss.backward()
        grad, adv = lp.grad.numpy(), e.advantages.numpy()
        nz = np.abs(adv) > 1e-6
        ratio = -grad[nz] / adv[nz]
        assert nz.any() and np.allclose(ratio, ratio[0]) and ratio[0] > 0
        assert (grad[e.action_mask.numpy() == 0] == 0).all()
    assert np.abs(want).max() > 0


def test_openrlhf_bad_input_is_refused(orl_train, orl_episodes, tok, monkeypatch) -> None:
    from stepgym.errors import StepRecordError

    monkeypatch.setenv("STEPGYM_PRESET", "gigpo-alfworld")
    exps = _experiences(orl_episodes, tok)
    exps[0].labels[1] = "credit-train-00000"  # a sample no stepgym agent played: no step records
    with pytest.raises(StepRecordError, match=r"no stepgym_steps.*agent_classes"):
        _maker(orl_train).compute_advantages_and_returns(exps)
    exps = _experiences(orl_episodes, tok)
    with pytest.raises(StepRecordError, match=r"groups \[1\].*n_samples_per_prompt=4.*split"):
        _maker(orl_train).compute_advantages_and_returns([exps[0], _drop_last(exps[1])])
    with pytest.raises(StepRecordError, match="use_loss"):
        _maker(orl_train, use_kl_loss=False).compute_advantages_and_returns(_experiences(orl_episodes, tok))
    monkeypatch.setenv("STEPGYM_PRESET", "ahead")
    with pytest.raises(StepRecordError, match="teacher"):
        _maker(orl_train).compute_advantages_and_returns(_experiences(orl_episodes, tok))


def _drop_last(exp):
    """The experience without its last sample (a lost rollout)."""
    from openrlhf.trainer.ppo_utils.experience import Experience

    keep = len(exp.index) - 1
    return Experience(
        sequences=exp.sequences[:keep],
        attention_mask=exp.attention_mask[:keep],
        action_mask=exp.action_mask[:keep],
        index=exp.index[:keep],
        labels=exp.labels[:keep],
        info={},
    )


def test_openrlhf_entry_point_takes_its_flags_and_keeps_openrlhfs(orl_train, monkeypatch) -> None:
    for var in orl_train.ENV.values():
        # setenv first, so monkeypatch restores the variable the flags write below (delenv of an unset variable
        # records nothing, and the flags' values leaked into later tests)
        monkeypatch.setenv(var, "")
        monkeypatch.delenv(var)
    rest = orl_train._take_stepgym_flags(
        ["--stepgym.preset", "proas-gigpo", "--rollout.n_samples_per_prompt", "8", "--stepgym.reward_scale=5"]
    )
    assert rest == ["--rollout.n_samples_per_prompt", "8"]
    assert os.environ["STEPGYM_PRESET"] == "proas-gigpo" and os.environ["STEPGYM_REWARD_SCALE"] == "5"
    with pytest.raises(SystemExit, match=r"unknown flag --stepgym\.gamma"):
        orl_train._take_stepgym_flags(["--stepgym.gamma", "0.9"])
    # the Ray actor class OpenRLHF's train() builds is OpenRLHF's trainer, subclassed
    from openrlhf.trainer.ppo_trainer import PPOTrainer

    assert issubclass(orl_train._StepPPOTrainer, PPOTrainer.__ray_actor_class__)


# ---------------------------------------------------------------------------------------------------------------
# Failure semantics (docs/failures.md)
# ---------------------------------------------------------------------------------------------------------------
def test_an_env_failure_ends_the_openrlhf_episode_aborted(tok: Any) -> None:
    import functools

    from stepgym.wrappers.faults import FaultInjectionWrapper

    executor, made = _executor(wrappers=[functools.partial(FaultInjectionWrapper, exception=1.0)])
    row = task_rows(TOY, KW)[0]
    resp = _run(executor, tok, StandInEngine(tok, script=[]), "p", row["task_id"])
    label = json.loads(resp["label"])
    assert label["stepgym_abort_cause"] == "env_exception" and label["stepgym_steps"] == []
    assert made[-1].abort_cause == "env_exception"


def test_an_aborted_openrlhf_episode_changes_nothing_for_the_others(
    orl_train, orl_episodes, tok, monkeypatch
) -> None:
    import copy

    from stepgym.shapers import ShapeConfig, shape_advantages

    monkeypatch.setenv("STEPGYM_PRESET", "gigpo-alfworld")
    episodes = copy.deepcopy(orl_episodes)
    cut = 2  # group 0's third episode
    _, resp, _ = episodes[cut]
    label = json.loads(resp["label"])
    resp["label"] = json.dumps({**label, "stepgym_abort_cause": "retriever_unavailable"})
    exps = _maker(orl_train).compute_advantages_and_returns(_experiences(episodes, tok))
    half = len(episodes) // 2
    width = max(e.action_mask.shape[1] for e in exps)
    adv = np.zeros((len(episodes), width))
    mask = np.zeros((len(episodes), width))
    for k, e in enumerate(exps):
        w = e.action_mask.shape[1]
        adv[k * half : (k + 1) * half, :w] = e.advantages.numpy()
        mask[k * half : (k + 1) * half, :w] = e.action_mask.numpy()
    keep = [b for b in range(len(episodes)) if b != cut]
    sb = oracle_step_batch(
        [orl_episodes[b][2].annotations["steps"] for b in keep],
        [orl_episodes[b][0] for b in keep],
        width,
        spans=[[(a - 1, c - 1) for a, c in orl_episodes[b][1]["action_ranges"]] for b in keep],
    )
    want = shape_advantages(sb, ShapeConfig.from_preset("gigpo-alfworld")).token_advantages
    assert np.allclose(adv[keep], want, atol=1e-5) and np.abs(want).max() > 0
    assert not adv[cut].any() and not mask[cut].any() and mask[keep].any()
