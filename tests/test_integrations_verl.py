"""stepgym inside verl 0.9.1: the agent loop and the advantage estimators, on verl's own classes.

verl pins transformers < 5.11 and tensordict <= 0.10 (the main environment has newer ones for TRL), so this file
runs in a virtualenv of its own (``scripts/test_verl.sh``) and is skipped where verl is absent; the skip reason
names the GPU verl needs for training, which ``STEPGYM_NO_SKIPS=1`` accepts, as for the vLLM-on-CPU tests.

verl's generation servers (vLLM / SGLang) need a GPU, so the agent loop talks to a stand-in for verl's server
manager (:class:`ScriptedServerManager`): a deterministic scripted generator that answers ``generate(...)`` with
verl's ``TokenOutput``, its replies chosen from the env's own expert (sometimes a random or malformed reply).
Everything else is real: verl's ``AgentLoopBase`` and Continuous Token builder, ``AgentLoopOutput``,
``DataProto``, the estimator registry and ``compute_advantage``; stepgym's CreditToy and ALFWorld envs.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import sys
from typing import ClassVar

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip(
    "verl",
    reason="verl is not installed: verl 0.9 trains on a GPU and pins versions that conflict with the main "
    "environment; scripts/test_verl.sh runs this file in a virtualenv of its own",
)
torch = pytest.importorskip("torch")

from _oracles import oracle_step_batch  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from verl.experimental.agent_loop.agent_loop import AgentLoopOutput, DictConfigWrap  # noqa: E402
from verl.protocol import DataProto  # noqa: E402
from verl.trainer.ppo.core_algos import get_adv_estimator_fn  # noqa: E402
from verl.trainer.ppo.ray_trainer import compute_advantage  # noqa: E402
from verl.workers.rollout.replica import TokenOutput  # noqa: E402

from stepgym import schema  # noqa: E402
from stepgym.errors import DependencyNotInstalled  # noqa: E402
from stepgym.graph_seeding import seed_graph_from_expert  # noqa: E402
from stepgym.integrations.verl import (  # noqa: E402
    ESTIMATORS,
    StepGymAgentLoop,
    compute_step_advantage,
    step_batch_from_verl,
    verl_rows,
)
from stepgym.reference_graph import AgenticReferenceGraph  # noqa: E402
from stepgym.shapers import GRAPH_BASES, ShapeConfig, shape_advantages  # noqa: E402
from stepgym.trainers.models import train_tokenizer  # noqa: E402
from stepgym.wrappers.arg import ARGWrapper  # noqa: E402

TOY = "StepGym/CreditToy-v0"
TOY_KW = {"n_tasks": 3, "n_rooms": 3, "n_distractors": 1, "max_steps": 6}
ALF = "StepGym/ALFWorld-v0"
# The native engine (same games as TextWorld's) without the expert, which needs the alfworld package: the stand-in
# replays the game's stored walkthrough instead.
ALF_KW = {"split": "valid_seen", "engine": "native", "expert": False, "max_steps": 60}
CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}</s>{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@pytest.fixture(scope="module")
def tok():
    corpus = ["go to the kitchen and open the door", "<think>next</think><action>look</action>"] * 20
    t = train_tokenizer(corpus, vocab_size=300)
    t.chat_template = CHATML
    return t


def _reply(action: str) -> str:
    return f"<think>next</think><action>{action}</action>"


class ScriptedServerManager:
    """A stand-in for verl's LLM server manager (no GPU here): ``generate`` returns a ``TokenOutput`` whose reply is
    the env's expert action (or, with ``walkthrough``, the game's stored walkthrough), a random admissible one
    (probability ``noise``) or, at the listed turns, a reply without tags. Log-probs are a fixed -0.5 per token, so their alignment can be checked."""

    def __init__(
        self,
        tokenizer,
        rng: np.random.Generator,
        noise: float = 0.0,
        malformed=(0,),
        walkthrough: bool = False,
    ) -> None:
        self.tok, self.rng, self.noise, self.malformed = tokenizer, rng, noise, set(malformed)
        self.walkthrough = walkthrough
        self.agent: StepGymAgentLoop | None = None
        self.replies: list[str] = []
        self.calls = 0

    async def generate(self, request_id, *, prompt_ids, sampling_params, **_):
        info = self.agent.info
        if self.calls in self.malformed:
            text = "I will just wander around"
        elif self.walkthrough:
            text = _reply(self.agent.env.unwrapped.walkthrough[self.calls])
        elif self.rng.random() < self.noise:
            text = _reply(str(self.rng.choice(list(info[schema.ADMISSIBLE_ACTIONS]))))
        else:
            text = _reply(info[schema.EXPERT_ACTION])
        self.calls += 1
        self.replies.append(text)
        ids = [*self.tok(text, add_special_tokens=False)["input_ids"], self.tok.eos_token_id]
        return TokenOutput(token_ids=ids, log_probs=[-0.5] * len(ids))


def _loop(tok, server, response_length=4096, **kwargs) -> StepGymAgentLoop:
    cfg = OmegaConf.create(
        {"actor_rollout_ref": {"rollout": {"prompt_length": 8192, "response_length": response_length}}}
    )
    loop = StepGymAgentLoop(
        trainer_config=DictConfigWrap(cfg),
        server_manager=server,
        tokenizer=tok,
        processor=None,
        dataset_cls=None,
        data_config=DictConfigWrap(OmegaConf.create({})),
        **kwargs,
    )
    server.agent = loop
    return loop


def _play(tok, row, server, **kwargs) -> AgentLoopOutput:
    if row.get("data_source") == TOY:
        kwargs.setdefault("fmt", "alfworld")  # the credit toy speaks ALFWorld's text format

    async def main():  # verl's agent loops live on the running event loop
        loop = _loop(tok, server, **kwargs)
        return await loop.run({"temperature": 1.0}, raw_prompt=row["prompt"], **row)

    return asyncio.run(main())


def _check_tokens(tok, out: AgentLoopOutput, server: ScriptedServerManager) -> None:
    steps = out.extra_fields["stepgym_steps"]
    mask = np.asarray(out.response_mask)
    assert len(out.response_ids) == len(mask) == len(out.response_logprobs)
    covered = np.zeros(len(mask), dtype=bool)
    for rec, text in zip(steps, server.replies, strict=True):
        s, e = rec["start"], rec["stop"]
        assert mask[s:e].all() and e > s
        assert tok.decode(out.response_ids[s:e], skip_special_tokens=True) == text
        covered[s:e] = True
    assert not mask[~covered].any()  # every other token (the env's turns) is masked out
    assert (~covered).sum() > 0
    lp = np.asarray(out.response_logprobs)
    assert (lp[covered] == -0.5).all() and (lp[~covered] == 0.0).all()


def test_agent_loop_plays_a_full_episode_with_env_tokens_masked(tok) -> None:
    row = verl_rows(TOY, TOY_KW, system_prompt="Be brief.")[1]
    assert row["agent_name"] == "stepgym" and row["extra_info"]["env_id"] == TOY
    server = ScriptedServerManager(tok, np.random.default_rng(0), malformed=(0,))
    out = _play(tok, row, server)
    assert isinstance(out, AgentLoopOutput)
    steps = out.extra_fields["stepgym_steps"]
    episode = out.extra_fields["stepgym_episode"]
    assert len(steps) == server.calls >= 2
    assert (
        steps[0]["format_valid"] is False and steps[0]["action"] is None
    )  # the malformed reply: an invalid step
    assert all(s["format_valid"] and s["admissible"] for s in steps[1:])
    assert all(s["state_key"] for s in steps) and steps[1]["state_key"] == steps[0]["next_state_key"]
    assert episode["won"] and steps[-1]["won"] and episode["task_id"] == row["extra_info"]["task_id"]
    assert out.reward_score == episode["return"] == 1.0
    assert out.extra_fields["turn_scores"] == [s["reward"] for s in steps]
    assert out.num_turns == 2 * len(steps) + 1
    prompt = tok.decode(out.prompt_ids)
    assert prompt.startswith("<|im_start|>system\nBe brief.") and prompt.endswith("<|im_start|>assistant\n")
    _check_tokens(tok, out, server)
    # verl's own conversion of the output: the response mask and the episode reward at the last response token
    d = out.as_dict()
    assert d["response_mask"].tolist() == out.response_mask and d["rm_scores"][-1] == 1.0


def test_agent_loop_from_a_yaml_config_as_verls_worker_builds_it(tok, tmp_path) -> None:
    import hydra
    from verl.experimental.agent_loop.agent_loop import ToolListWrap, _agent_loop_registry

    yaml = tmp_path / "agents.yaml"
    yaml.write_text(
        "- name: stepgym_toy\n"
        "  _target_: stepgym.integrations.verl.StepGymAgentLoop\n"
        f"  env_id: {TOY}\n"
        "  env_kwargs: {n_tasks: 3, n_rooms: 3, n_distractors: 1, max_steps: 6}\n"
        "  fmt: alfworld\n"
        "  max_turn_tokens: 64\n"
    )
    for entry in OmegaConf.load(yaml):  # what AgentLoopWorker does with agent_loop_config_path
        _agent_loop_registry[entry.name] = entry
    registered = {"_target_": "stepgym.integrations.verl.agent_loop.StepGymAgentLoop"}  # the class's module
    assert _agent_loop_registry["stepgym"] == registered
    full = verl_rows(TOY, TOY_KW)[2]
    row = {**full, "extra_info": {"task_id": full["extra_info"]["task_id"]}}  # the env comes from the YAML
    server = ScriptedServerManager(tok, np.random.default_rng(0), malformed=())
    seen = []

    async def main():
        cfg = OmegaConf.create(
            {"actor_rollout_ref": {"rollout": {"prompt_length": 8192, "response_length": 4096}}}
        )
        loop = hydra.utils.instantiate(  # the call in AgentLoopWorker._run_agent_loop
            config=_agent_loop_registry["stepgym_toy"],
            trainer_config=DictConfigWrap(config=cfg),
            server_manager=server,
            tokenizer=tok,
            processor=None,
            hf_model_type=None,
            dataset_cls=None,
            data_config=DictConfigWrap(OmegaConf.create({})),
            tools=ToolListWrap([]),
        )
        server.agent = loop
        original = server.generate

        async def spy(request_id, **kw):
            seen.append(kw["sampling_params"])
            return await original(request_id, **kw)

        server.generate = spy
        return await loop.run({"temperature": 0.7}, raw_prompt=row["prompt"], **row)

    out = asyncio.run(main())
    assert out.extra_fields["stepgym_episode"]["won"]
    assert seen and all(p == {"temperature": 0.7, "max_tokens": 64} for p in seen)


def test_agent_loop_cuts_at_response_length(tok) -> None:
    row = verl_rows(TOY, TOY_KW)[0]
    server = ScriptedServerManager(tok, np.random.default_rng(0), malformed=(0, 1, 2))
    out = _play(tok, row, server, response_length=140)
    assert len(out.response_ids) <= 140 and not out.extra_fields["stepgym_episode"]["won"]
    assert all(s["stop"] <= 140 for s in out.extra_fields["stepgym_steps"])


def test_agent_loop_plays_alfworld(tok) -> None:
    row = verl_rows(ALF, ALF_KW, limit=1)[0]
    server = ScriptedServerManager(tok, np.random.default_rng(0), malformed=(), walkthrough=True)
    out = _play(tok, row, server, response_length=200_000)
    episode = out.extra_fields["stepgym_episode"]
    assert episode["won"] and episode["task_id"] == row["extra_info"]["task_id"]
    assert all(s["admissible"] for s in out.extra_fields["stepgym_steps"])
    _check_tokens(tok, out, server)


def test_missing_task_id_and_env_id_are_refused(tok) -> None:
    server = ScriptedServerManager(tok, np.random.default_rng(0))
    with pytest.raises(ValueError, match="no task_id"):
        _play(tok, {"prompt": []}, server)
    with pytest.raises(ValueError, match="no stepgym env id"):
        _play(tok, {"prompt": [], "extra_info": {"task_id": "x"}}, server)


class ToolToy(gym.Env):
    """A tool-use env shaped like StepGym/Tau2-v0 (whose package is not in verl's virtualenv): the user asks to
    close a record; the gold path is ``lookup``, ``close_record``, then a message saying it is closed. Actions are
    tau2's canonical calls or messages, ``tool_schemas()`` lists the tools, ``system_prompt()`` the instructions."""

    metadata: ClassVar[dict] = {"render_modes": []}
    task_ids = ("t0", "t1")

    def __init__(self) -> None:
        from stepgym.spaces import UnicodeText

        self.observation_space, self.action_space = UnicodeText(), UnicodeText()
        self.record, self.done_calls = "", []

    def tool_schemas(self) -> list[dict]:
        arg = {
            "type": "object",
            "properties": {"record_id": {"type": "string", "description": "The record."}},
        }
        return [
            {"type": "function", "function": {"name": n, "description": d, "parameters": {**arg, "required": ["record_id"]}}}
            for n, d in (("lookup", "Read a record."), ("close_record", "Close a record."))
        ]  # fmt: skip

    def system_prompt(self) -> str:
        return "You are a support agent. Close the record the user names."

    def _expert(self) -> str:
        from stepgym.envs.tau2.calls import call_text

        gold = [
            call_text("lookup", {"record_id": self.record}),
            call_text("close_record", {"record_id": self.record}),
        ]
        return gold[len(self.done_calls)] if len(self.done_calls) < 2 else f"Record {self.record} is closed."

    def _info(self, ok: bool = True) -> dict:
        return {
            schema.TASK_ID: self.task, schema.GOAL: self.system_prompt(), schema.ADMISSIBLE: ok,
            schema.STATE_KEY: f"{self.task}:{len(self.done_calls)}", schema.EXPERT_ACTION: self._expert(),
        }  # fmt: skip

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.task = (options or {}).get("task_id", "t0")
        self.record, self.done_calls = "r" + self.task[1:], []
        return f"User: please close record {self.record}.", self._info()

    def step(self, action):
        from stepgym.envs.tau2.calls import read_call

        if action.startswith("{"):
            name, args = read_call(action)
            good = len(self.done_calls) < 2 and action == self._expert()
            if good:
                self.done_calls.append(name)
            return (
                f"Tool result: {name}({args}) {'ok' if good else 'error'}",
                0.0,
                False,
                False,
                self._info(good),
            )
        if len(self.done_calls) == 2 and self.record in action:
            return "User: thanks, bye.", 1.0, True, False, self._info()
        return "User: please go on.", 0.0, False, False, self._info()


TOOL_TOY = "StepGymTest/ToolToy-v0"
TOOL_TEMPLATE = (
    "{% if tools %}<|im_start|>system\n<tools>{% for t in tools %}{{ t | tojson }}{% endfor %}</tools></s>{% endif %}"
    + CHATML
)


class ToolCallServer(ScriptedServerManager):
    """The stand-in server for the tool toy: the expert's action in tau2's reply shape (a call in ``<tool_call>``,
    a message as plain text)."""

    async def generate(self, request_id, *, prompt_ids, sampling_params, **_):
        from stepgym.envs.tau2.prompt import FORMAT

        text = FORMAT.reply(self.agent.info[schema.EXPERT_ACTION])
        self.calls += 1
        self.replies.append(text)
        ids = [*self.tok(text, add_special_tokens=False)["input_ids"], self.tok.eos_token_id]
        return TokenOutput(token_ids=ids, log_probs=[-0.5] * len(ids))


def test_agent_loop_gives_a_tool_use_env_its_tools_and_tool_messages(tok) -> None:
    """A tool-use env through verl's agent loop: its tool schemas are rendered by the chat template (not the text
    format's tool list), each call's answer comes back as a ``tool`` message and each message's as a ``user`` one,
    and every step's span is exactly its reply (the call, tags included)."""
    if TOOL_TOY not in gym.registry:
        gym.register(TOOL_TOY, entry_point=ToolToy)
    tok.chat_template = TOOL_TEMPLATE
    try:
        row = {
            "prompt": [{"role": "user", "content": ""}],
            "data_source": TOOL_TOY,
            "extra_info": {"task_id": "t1", "env_id": TOOL_TOY, "env_kwargs": "{}"},
        }
        server = ToolCallServer(tok, np.random.default_rng(0), malformed=())
        out = _play(tok, row, server, fmt="stepgym.envs.tau2.prompt:FORMAT")
    finally:
        tok.chat_template = CHATML
    steps = out.extra_fields["stepgym_steps"]
    assert out.reward_score == 1.0 and [s["admissible"] for s in steps] == [True] * 3
    assert server.replies[0].startswith("<tool_call>") and not server.replies[2].startswith("<tool_call>")
    prompt = tok.decode(out.prompt_ids)
    assert '"name": "close_record"' in prompt and "Close the record the user names." in prompt
    assert "# Tools" not in prompt  # the format's own tool list is left out: the template renders the tools
    response = tok.decode(out.response_ids)
    assert response.count("<|im_start|>tool\nTool result: lookup") == 1
    assert (
        response.count("<|im_start|>tool\n") == 2 and "<|im_start|>user" not in response
    )  # the last is done
    _check_tokens(tok, out, server)


# ---------------------------------------------------------------------------------------------------------------
# Estimators on verl's DataProto
# ---------------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def batch(tok):
    """Two tasks × four rollouts of a noisy scripted policy, as verl's DataProto (right-padded responses, the
    episode return at each row's last response token as verl's rm_scores, the group uid, the extra fields).
    The env carries ARG labels (ProAS) against a graph seeded from the env's expert."""
    rows = verl_rows(TOY, TOY_KW, limit=2)
    graph = AgenticReferenceGraph()
    base = gym.make(TOY, **TOY_KW)
    seed_graph_from_expert(graph, base, [r["extra_info"]["task_id"] for r in rows])
    base.close()
    rng = np.random.default_rng(3)
    outs, uids = [], []
    for row in rows:
        for _ in range(4):
            server = ScriptedServerManager(tok, rng, noise=0.5, malformed=(int(rng.integers(0, 3)),))
            outs.append(_play(tok, row, server, wrappers=[functools.partial(ARGWrapper, graph=graph)]))
            uids.append(row["extra_info"]["task_id"])
    width = max(len(o.response_ids) for o in outs) + 3
    responses = torch.zeros(len(outs), width, dtype=torch.long)
    mask = torch.zeros(len(outs), width, dtype=torch.long)
    scores = torch.zeros(len(outs), width)
    for i, o in enumerate(outs):
        n = len(o.response_ids)
        responses[i, :n] = torch.tensor(o.response_ids)
        mask[i, :n] = torch.tensor(o.response_mask)
        scores[i, n - 1] = o.reward_score
    steps = np.empty(len(outs), dtype=object)
    steps[:] = [o.extra_fields["stepgym_steps"] for o in outs]
    data = DataProto.from_dict(
        tensors={"responses": responses, "response_mask": mask, "token_level_rewards": scores},
        non_tensors={"uid": np.asarray(uids, dtype=object), "stepgym_steps": steps},
    )
    returns = [o.reward_score for o in outs]
    assert len(set(returns)) > 1  # outcomes vary inside the groups, so advantages are not all 0
    return data, outs


def _expected(outs, uids, width, preset) -> np.ndarray:
    """shape_advantages on the same batch, built here from the agent loop's raw step records."""
    records = [o.extra_fields["stepgym_steps"] for o in outs]
    rewards = [
        [o.reward_score if t == len(r) - 1 else 0.0 for t in range(len(r))]
        for o, r in zip(outs, records, strict=True)
    ]
    sb = oracle_step_batch(records, uids, width, rewards=rewards)
    return shape_advantages(sb, ShapeConfig.from_preset(preset))


def test_estimators_through_verls_compute_advantage_equal_shape_advantages(batch) -> None:
    data, outs = batch
    uids = list(data.non_tensor_batch["uid"])
    width = data.batch["response_mask"].shape[1]
    # stepgym_grpo through verl's own compute_advantage: it passes only the tensors and the uid
    out = compute_advantage(data, adv_estimator="stepgym_grpo")
    want = _expected(outs, uids, width, "grpo").token_advantages
    assert np.allclose(out.batch["advantages"].numpy(), want, atol=1e-6)
    assert (out.batch["advantages"][data.batch["response_mask"] == 0] == 0).all()
    assert np.abs(want).max() > 0
    # GiGPO needs the state keys, which verl's compute_advantage does not pass to a custom estimator: refused
    with pytest.raises(ValueError, match="state keys"):
        compute_advantage(data, adv_estimator="stepgym_gigpo")
    # ... and equal to shape_advantages given them: the registered estimator, and compute_step_advantage
    fn = get_adv_estimator_fn("stepgym_gigpo")
    adv, ret = fn(
        token_level_rewards=data.batch["token_level_rewards"],
        response_mask=data.batch["response_mask"],
        index=data.non_tensor_batch["uid"],
        config=None,
        non_tensor_batch=data.non_tensor_batch,
    )
    want = _expected(outs, uids, width, "gigpo-alfworld").token_advantages
    assert np.allclose(adv.numpy(), want, atol=1e-6) and torch.equal(adv, ret)
    full = compute_step_advantage(data, "gigpo-alfworld")
    assert np.allclose(full.batch["advantages"].numpy(), want, atol=1e-6)
    assert all(get_adv_estimator_fn(n).__name__.startswith("stepgym_") for n in ESTIMATORS)


def test_proas_estimator_uses_the_arg_labels_and_keeps_each_steps_sign(batch) -> None:
    data, outs = batch
    uids = list(data.non_tensor_batch["uid"])
    mask = data.batch["response_mask"]
    steps = [s for o in outs for s in o.extra_fields["stepgym_steps"]]
    assert all(s["arg_reasonable"] is not None for s in steps)
    assert any(not s["arg_progress"] for s in steps) and any(s["arg_progress"] for s in steps)
    with pytest.raises(ValueError, match="ARG labels"):
        compute_advantage(data, adv_estimator="stepgym_proas")
    adv, _ = get_adv_estimator_fn("stepgym_proas")(
        data.batch["token_level_rewards"], mask, data.non_tensor_batch["uid"], None, data.non_tensor_batch
    )
    want = _expected(outs, uids, mask.shape[1], "proas-gigpo")
    assert np.allclose(adv.numpy(), want.token_advantages, atol=1e-6)
    # ProAS rescales each step's advantage and never flips its sign
    nz = want.base_advantages != 0
    assert np.array_equal(np.sign(want.step_advantages[nz]), np.sign(want.base_advantages[nz]))
    assert not np.allclose(want.step_advantages, want.base_advantages)


def test_without_verl_the_import_names_the_pip_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "verl", None)  # makes `import verl` fail
    monkeypatch.delitem(sys.modules, "stepgym.integrations.verl")
    with pytest.raises(DependencyNotInstalled, match=r"pip install 'stepgym\[verl\]'"):
        importlib.import_module("stepgym.integrations.verl")


def test_steps_from_mask_runs_equal_the_agent_loops_spans_and_advantages_keep_the_sign(batch) -> None:
    data, outs = batch
    mask = data.batch["response_mask"]
    from_mask = step_batch_from_verl(
        data.batch["token_level_rewards"], mask, list(data.non_tensor_batch["uid"])
    )
    from_recs = step_batch_from_verl(
        data.batch["token_level_rewards"],
        mask,
        list(data.non_tensor_batch["uid"]),
        list(data.non_tensor_batch["stepgym_steps"]),
    )
    assert np.array_equal(from_mask.layout.token_step, from_recs.layout.token_step)
    assert np.allclose(from_mask.rewards, from_recs.rewards)
    # GRPO: every trained token of a row carries the sign of its return minus the group's mean
    adv = get_adv_estimator_fn("stepgym_grpo")(
        data.batch["token_level_rewards"], mask, data.non_tensor_batch["uid"]
    )[0]
    returns = np.asarray([o.reward_score for o in outs])
    uids = np.asarray(data.non_tensor_batch["uid"])
    for i in range(len(outs)):
        centred = returns[i] - returns[uids == uids[i]].mean()
        row = adv[i][mask[i] > 0].numpy()
        assert (np.sign(row) == np.sign(centred)).all()


def test_teacher_presets_are_refused_without_gaps(batch) -> None:
    data, _ = batch
    with pytest.raises(ValueError, match="teacher log-prob gaps"):
        compute_step_advantage(data, "ahead")


@pytest.mark.parametrize(
    ("estimator", "preset"),
    [(name, preset) for name, preset in ESTIMATORS.items() if name.removeprefix("stepgym_") in GRAPH_BASES],
)
def test_graph_estimators_equal_shape_advantages(batch, estimator: str, preset: str) -> None:
    """GraphGPO, HGPO, RewardFlow and G2PO read each step's state before and after it from the agent loop's
    records: the registered estimator (given them) and compute_step_advantage equal shape_advantages."""
    data, outs = batch
    uids = list(data.non_tensor_batch["uid"])
    width = data.batch["response_mask"].shape[1]
    with pytest.raises(ValueError, match="state keys"):
        compute_advantage(data, adv_estimator=estimator)
    adv, _ = get_adv_estimator_fn(estimator)(
        token_level_rewards=data.batch["token_level_rewards"],
        response_mask=data.batch["response_mask"],
        index=data.non_tensor_batch["uid"],
        config=None,
        non_tensor_batch=data.non_tensor_batch,
    )
    want = _expected(outs, uids, width, preset).token_advantages
    assert np.allclose(adv.numpy(), want, atol=1e-6) and np.abs(want).max() > 0
    full = compute_step_advantage(data, preset)
    assert np.allclose(full.batch["advantages"].numpy(), want, atol=1e-6)


def test_estimators_are_derived_from_the_shaper_registry() -> None:
    """Every registered base (and ProAS) is a verl estimator running its preset; a base registered later joins."""
    from stepgym.integrations.verl import estimator_presets
    from stepgym.shapers import BaseAdvantage, grpo_advantage, register
    from stepgym.shapers.registry import available

    assert {f"stepgym_{b}" for b in available("base")} | {"stepgym_proas"} == set(ESTIMATORS)
    assert ESTIMATORS["stepgym_grpo"] == "grpo" and ESTIMATORS["stepgym_gigpo"] == "gigpo-alfworld"
    assert (
        ESTIMATORS["stepgym_proas"] == "proas-gigpo" and ESTIMATORS["stepgym_graphgpo"] == "graphgpo-alfworld"
    )

    @register("verl_test_base", stage="base", overwrite=True)
    def _mine(batch, config, scores):
        return BaseAdvantage(grpo_advantage(scores, batch.group_ids))

    assert estimator_presets()["stepgym_verl_test_base"] == "verl_test_base"


# ---------------------------------------------------------------------------------------------------------------
# Failure semantics (docs/failures.md)
# ---------------------------------------------------------------------------------------------------------------
def test_an_env_failure_ends_the_verl_episode_aborted(tok) -> None:
    from stepgym.wrappers.faults import FaultInjectionWrapper

    row = verl_rows(TOY, TOY_KW)[0]
    server = ScriptedServerManager(tok, np.random.default_rng(0))
    out = _play(tok, row, server, wrappers=[functools.partial(FaultInjectionWrapper, exception=1.0)])
    steps = out.extra_fields["stepgym_steps"]
    assert len(steps) == 1 and steps[0]["aborted"] and steps[0]["stop"] > steps[0]["start"]
    assert out.extra_fields["stepgym_episode"]["abort_cause"] == "env_exception"


def test_an_aborted_verl_episode_changes_nothing_for_the_others(batch) -> None:
    import copy

    data, outs = batch
    data = copy.deepcopy(data)
    cut = 2
    recs = [dict(r, aborted=True) for r in data.non_tensor_batch["stepgym_steps"][cut]]
    data.non_tensor_batch["stepgym_steps"][cut] = recs
    out = compute_step_advantage(data, "gigpo-alfworld")
    uids = list(data.non_tensor_batch["uid"])
    keep = [b for b in range(len(outs)) if b != cut]
    width = data.batch["response_mask"].shape[1]
    want = _expected(
        [outs[b] for b in keep], [uids[b] for b in keep], width, "gigpo-alfworld"
    ).token_advantages
    adv = out.batch["advantages"].numpy()
    assert np.allclose(adv[keep], want, atol=1e-6) and np.abs(want).max() > 0
    assert not adv[cut].any() and not out.batch["response_mask"][cut].any()
    assert out.batch["response_mask"][keep].any()
