"""stepgym inside TRL 1.16's GRPOTrainer, for real, on the CPU: environment_factory, rollout_func over GroupEnv and
per-token step credit, each through real GRPO steps of a tiny in-process model (tests/_trl_tiny.py)."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
trl = pytest.importorskip("trl")

from _oracles import oracle_step_batch  # noqa: E402
from _trl_tiny import (  # noqa: E402
    ENV_ID,
    ENV_KWARGS,
    SYSTEM,
    clone,
    cpu_grpo_config,
    react_conversations,
    tiny_chat_model,
    tool_conversations,
)
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from stepgym import schema  # noqa: E402
from stepgym.errors import StepRecordError  # noqa: E402
from stepgym.integrations.trl import (  # noqa: E402
    GroupRollout,
    StepGRPOTrainer,
    TeacherGaps,
    environment_factory,
    episode_return,
    use_tool_chat_template,
)
from stepgym.shapers import ShapeConfig, StepBatch, shape_advantages  # noqa: E402
from stepgym.steps.tasks import task_dataset, task_ids  # noqa: E402
from stepgym.wrappers.text import parse_action  # noqa: E402

TOOL = {"tool_description": "Act in the room.", "action_description": "One admissible action."}


def _config(out: Path, **over: Any) -> GRPOConfig:
    over = {"temperature": 1.0, "output_dir": str(out), **over}
    return cpu_grpo_config(**over)


def _params(model) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def _changed(before: dict[str, torch.Tensor], model) -> int:
    return sum(not torch.equal(before[n], p.detach()) for n, p in model.named_parameters())


def _losses(trainer) -> list[float]:
    return [h["loss"] for h in trainer.state.log_history if "loss" in h]


# ---------------------------------------------------------------------------------------------------------------
# environment_factory
# ---------------------------------------------------------------------------------------------------------------
def test_factory_class_exposes_exactly_one_typed_documented_tool() -> None:
    Env = environment_factory(ENV_ID, ENV_KWARGS, tool_name="act", **TOOL)
    public = {n for n, _ in inspect.getmembers(Env, predicate=inspect.isfunction) if not n.startswith("_")}
    assert public == {"reset", "get_reward", "act"}  # TRL turns every other public method into a tool
    from transformers.utils import get_json_schema

    env = Env()
    fn = get_json_schema(env.act)["function"]
    assert fn["name"] == "act" and fn["parameters"]["required"] == ["action"]
    assert fn["parameters"]["properties"]["action"] == {
        "type": "string",
        "description": "One admissible action.",
    }
    tid = task_ids(ENV_ID, ENV_KWARGS)[2]
    first = env.reset(task_id=tid, prompt=[{"role": "user", "content": ""}])  # TRL passes the whole row
    assert "Admissible actions:" in first and env.trajectory.task_id == tid
    expert = env.trajectory.initial_info[schema.EXPERT_ACTION]
    while not env.trajectory.done:
        env.act(env.trajectory.infos()[-1][schema.EXPERT_ACTION])
    assert env.get_reward() == 1.0 and env.annotations["won"] and expert
    n = len(env.trajectory.steps)
    # a finished env never steps
    assert "episode is over" in env.act("wait") and len(env.trajectory.steps) == n


@pytest.mark.parametrize("bad", ["reset", "_act", "get_reward", "not an id"])
def test_factory_refuses_tool_names_trl_would_mishandle(bad: str) -> None:
    with pytest.raises(ValueError, match="tool_name"):
        environment_factory(ENV_ID, ENV_KWARGS, tool_name=bad)


def test_tool_template_is_installed_only_when_needed() -> None:
    tok, _ = tiny_chat_model([{"messages": [{"role": "user", "content": "hi"}]}], vocab=300)
    qwen = tok.chat_template
    tok.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"  # renders no tool calls
    assert use_tool_chat_template(tok).chat_template == qwen
    assert use_tool_chat_template(tok).chat_template == qwen  # idempotent


@pytest.fixture(scope="module")
def factory_agent() -> tuple[Any, Any, type]:
    Env = environment_factory(ENV_ID, ENV_KWARGS, **TOOL)
    convs = tool_conversations(Env, 48, seed=0)
    tok, model = tiny_chat_model(convs)
    losses = clone(tok, model, convs, steps=100)
    assert losses[-1] < losses[0] / 4  # it learnt the tool-call format
    return tok, model, Env


def _admissible_steps(ep: dict[str, Any]) -> float:
    """A reward read from stepgym's step annotations: actions that reached the env, admissible ones again, and
    10 for a win (a barely trained model mostly earns the first)."""
    return ep["n_steps"] + float(sum(bool(s["admissible"]) for s in ep["steps"])) + 10.0 * ep["return"]


def test_environment_factory_trains_with_real_env_steps(factory_agent, tmp_path: Path) -> None:
    tok, model, Env = factory_agent
    seen: list[Any] = []

    # TRL passes the rollouts' env instances to reward functions
    def annotated(completions, environments, **_):
        eps = [e.annotations for e in environments]
        seen.extend(eps)
        return [_admissible_steps(ep) for ep in eps]

    before = _params(model)
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[annotated],
        args=_config(tmp_path, max_completion_length=160, max_tool_calling_iterations=3),
        train_dataset=task_dataset(ENV_ID, ENV_KWARGS, system_prompt=SYSTEM),
        processing_class=tok,
        environment_factory=Env,
    )
    trainer.train()
    assert len(seen) == 16
    assert sum(ep["n_steps"] for ep in seen) > 0  # the model's tool calls stepped the env
    assert {ep["task_id"] for ep in seen} <= set(task_ids(ENV_ID, ENV_KWARGS))
    assert len({_admissible_steps(ep) for ep in seen}) > 1  # rewards vary
    assert any(r != 0 for r in _losses(trainer))
    assert _changed(before, model) > 0


# ---------------------------------------------------------------------------------------------------------------
# rollout_func over GroupEnv, and per-token credit
# ---------------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def react_agent() -> tuple[Any, Any]:
    convs = react_conversations(48, seed=1)
    tok, model = tiny_chat_model(convs)
    clone(tok, model, convs, steps=40)
    return tok, model


def _rollout(wrappers=()) -> GroupRollout:
    return GroupRollout(ENV_ID, ENV_KWARGS, fmt="alfworld", max_turn_tokens=24, seed=0, wrappers=wrappers)


def _seeded_arg() -> list[Any]:
    """ProAS labels: ARGWrapper over a graph seeded from the env's expert on every task (fixed, not grown)."""
    import gymnasium as gym

    from stepgym.graph_seeding import seed_graph_from_expert
    from stepgym.reference_graph import AgenticReferenceGraph
    from stepgym.wrappers.arg import ARGWrapper

    graph = AgenticReferenceGraph()
    seed_graph_from_expert(graph, gym.make(ENV_ID, **ENV_KWARGS), task_ids(ENV_ID, ENV_KWARGS))
    return [lambda env: ARGWrapper(env, graph=graph)]


def _format_steps(completions, stepgym_steps, **_):
    return [float(sum(bool(s["format_valid"]) for s in steps)) for steps in stepgym_steps]


def test_group_rollout_trains_groups_with_env_tokens_masked(react_agent, tmp_path: Path) -> None:
    tok, model = react_agent
    rollout = _rollout()
    outputs: list[dict[str, Any]] = []

    def record(prompts, trainer):
        out = rollout(prompts, trainer)
        outputs.append(out)
        return out

    before = _params(model)
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[episode_return, _format_steps],
        args=_config(tmp_path, max_completion_length=320),
        train_dataset=task_dataset(ENV_ID, ENV_KWARGS, system_prompt=SYSTEM),
        processing_class=tok,
        rollout_func=record,
    )
    trainer.train()
    assert len(outputs) == 2
    for out in outputs:
        eps, steps = out["stepgym_episode"], out["stepgym_steps"]
        assert len(eps) == 8 and all(ep["n_steps"] >= 1 for ep in eps)  # env steps ran
        # one task per block of G = 4 (TRL repeats each prompt G times in a row)
        assert [len({ep["task_id"] for ep in eps[i : i + 4]}) for i in (0, 4)] == [1, 1]
        for ids, mask, recs in zip(out["completion_ids"], out["env_mask"], steps, strict=True):
            assert len(ids) == len(mask)
            trained = {i for s in recs for i in range(s["start"], s["stop"])}
            assert trained == {i for i, m in enumerate(mask) if m}  # exactly the replies are trained
            for s in recs:  # each span decodes to the reply the env parsed
                text = tok.decode(ids[s["start"] : s["stop"]], skip_special_tokens=True)
                assert parse_action(text, "alfworld").action == s["action"] or not s["format_valid"]
    rewards = [_format_steps(None, o["stepgym_steps"]) for o in outputs]
    assert len({r for rr in rewards for r in rr}) > 1  # rewards vary
    assert any(r != 0 for r in _losses(trainer))
    assert _changed(before, model) > 0


def _independent_advantages(
    out: dict[str, Any], length: int, cfg: ShapeConfig, update: int = 0, gaps: StepBatch | None = None
) -> np.ndarray:
    """shape_advantages on a StepBatch built here from the rollout's raw records (not the adapter's builder)."""
    steps = out["stepgym_steps"]
    batch = oracle_step_batch(steps, [b // 4 for b in range(len(steps))], length, labels=cfg.proas)
    if gaps is not None:  # the teacher's gaps are an input of the shapers, taken from the trainer's batch
        batch.delta, batch.delta_mask, batch.target = gaps.delta, gaps.delta_mask, gaps.target
    return shape_advantages(batch, cfg, update_index=update).token_advantages


@pytest.mark.parametrize(
    "preset",
    [
        "gigpo-alfworld",
        "proas-gigpo",
        "ahead",
        "stepopsd-alfworld",
        "graphgpo-alfworld",
        "hgpo-alfworld",
        "rewardflow-alfworld",
        "g2po-alfworld",
    ],
)
def test_step_trainer_optimises_exactly_the_shaped_token_advantages(
    react_agent, tmp_path: Path, preset: str
) -> None:
    tok, model = react_agent
    rollout = _rollout(_seeded_arg() if preset.startswith("proas") else ())
    outputs: list[dict[str, Any]] = []
    optimised: list[dict[str, torch.Tensor]] = []
    batches: list[StepBatch] = []

    class Recording(StepGRPOTrainer):
        def _compute_loss(self, model, inputs):
            optimised.append(
                {k: inputs[k].detach().clone() for k in ("completion_ids", "advantages", "completion_mask")}
            )
            batches.append(self.last_batch)
            return super()._compute_loss(model, inputs)

    def record(prompts, trainer):
        out = rollout(prompts, trainer)
        outputs.append(out)
        return out

    cfg = ShapeConfig.from_preset(preset)
    before = _params(model)
    trainer = Recording(
        model=model,
        reward_funcs=[episode_return],
        args=_config(tmp_path, max_completion_length=320),
        train_dataset=task_dataset(ENV_ID, ENV_KWARGS, system_prompt=SYSTEM),
        processing_class=tok,
        rollout_func=rollout,
        shape_config=cfg,
    )
    trainer.rollout_func = record
    trainer.train()
    assert len(outputs) == len(optimised) == 2  # one generation and one loss per step
    credit = moved = 0.0
    for update, (out, got, gaps) in enumerate(zip(outputs, optimised, batches, strict=True)):
        length = got["completion_ids"].shape[1]
        want = _independent_advantages(out, length, cfg, update, gaps)
        # TRL shuffles the rows before the loss: match each optimised row to its completion by its tokens
        rows = {tuple(ids): b for b, ids in enumerate(out["completion_ids"])}
        adv = got["advantages"].numpy()
        assert adv.shape == want.shape  # (B, L): one advantage per token, not per sequence
        for r, ids in enumerate(got["completion_ids"].tolist()):
            n = int(got["completion_mask"][r].sum())
            b = rows[tuple(ids[:n])]
            np.testing.assert_allclose(adv[r], want[b].astype(np.float32), rtol=0, atol=1e-6)
        env_tokens = np.asarray([m + [1] * (length - len(m)) for m in out["env_mask"]]) == 0
        assert (want[env_tokens] == 0).all()  # env tokens carry no advantage
        assert max(len(recs) for recs in out["stepgym_steps"]) > 1  # multi-step rows
        if cfg.proas:  # every step labelled by the seeded graph
            assert all(s["arg_reasonable"] is not None for r in out["stepgym_steps"] for s in r)
        if cfg.token_reweight:
            _check_teacher_gaps(tok, out, gaps, env_tokens, cfg.token_reweight)
        plain = _independent_advantages(out, length, GIGPO if cfg.base == "gigpo" else GRPO, update)
        moved += float(np.abs(want - plain).sum())  # what ProAS / the teacher changed
        credit += float(np.abs(want).sum())
    assert credit > 0  # some group's steps differed
    assert (moved > 0) == (preset not in ("gigpo-alfworld",))
    assert any(r != 0 for r in _losses(trainer))
    assert _changed(before, model) > 0


GIGPO = ShapeConfig.from_preset("gigpo-alfworld")
GRPO = ShapeConfig.from_preset("grpo-alfworld")


def _check_teacher_gaps(tok, out: dict[str, Any], gaps: StepBatch, env_tokens: np.ndarray, kind: str) -> None:
    """The default teacher (TeacherGaps) scored the replies: gaps only on reply tokens (AHEAD: all of them can
    have one), and StepOPSD's target spans are the replies' <action>...</action> tags."""
    delta = np.asarray(gaps.delta)
    assert delta.shape == env_tokens.shape and (delta[env_tokens] == 0).all() and np.abs(delta).sum() > 0
    if kind == "stepopsd":
        mask = np.asarray(gaps.delta_mask)
        assert not (mask & env_tokens).any()
        checked = 0
        for b, (ids, recs) in enumerate(zip(out["completion_ids"], out["stepgym_steps"], strict=True)):
            for rec in recs:  # a well-formed reply's target is its action tag
                cols = np.flatnonzero(mask[b, rec["start"] : rec["stop"]]) + rec["start"]
                if rec["format_valid"]:
                    text = tok.decode([ids[c] for c in cols], skip_special_tokens=True)
                    assert text.startswith("<action>") and text.endswith("</action>")
                    inner = text[len("<action>") : -len("</action>")]
                    assert " ".join(inner.split()).lower() == rec["action"]  # the parser's normalisation
                    checked += 1
        assert checked > 0


def test_step_trainer_refuses_batches_it_cannot_shape(react_agent, tmp_path: Path) -> None:
    tok, model = react_agent
    kw = dict(
        model=model,
        reward_funcs=[episode_return],
        args=_config(tmp_path, max_completion_length=320),
        train_dataset=task_dataset(ENV_ID, ENV_KWARGS, system_prompt=SYSTEM),
        processing_class=tok,
    )
    with pytest.raises(ValueError, match="GroupRollout"):
        StepGRPOTrainer(**kw, rollout_func=lambda prompts, trainer: {})
    trainer = StepGRPOTrainer(**kw, rollout_func=_rollout(), shape_config="ahead")
    assert isinstance(
        trainer.token_gaps, TeacherGaps
    )  # AHEAD / StepOPSD get the teacher rescoring by default


@pytest.mark.slow
def test_smollm2_through_both_hooks(tmp_path: Path) -> None:
    """The real instruct model. Its own template cannot render tool calls: the adapter installs one and TRL accepts
    the tool env. Then a real GRPO step over GroupEnv groups: every reply is an env step (an invalid one when it
    has no well-formed action), and the weights move whenever the rewards differ."""
    from trl.chat_template_utils import supports_tool_calling

    from stepgym.trainers.models import load_model

    loaded = load_model("smollm2-135m-instruct")
    tok, model = loaded.tokenizer, loaded.model
    tok.padding_side = "left"
    own = tok.chat_template
    assert not supports_tool_calling(tok)
    use_tool_chat_template(tok)
    data = task_dataset(ENV_ID, ENV_KWARGS, system_prompt=SYSTEM)
    common = dict(model=model, reward_funcs=[episode_return], train_dataset=data, processing_class=tok)
    GRPOTrainer(**common, args=_config(tmp_path), environment_factory=environment_factory(ENV_ID, ENV_KWARGS))
    tok.chat_template = own  # the rollout below uses SmolLM2's own ChatML template, and no tool-call parser
    tok.response_template = tok.response_schema = None
    outputs: list[dict[str, Any]] = []
    rollout = GroupRollout(ENV_ID, ENV_KWARGS, fmt="alfworld", max_turn_tokens=48)

    def record(prompts, trainer):
        outputs.append(rollout(prompts, trainer))
        return outputs[-1]

    before = _params(model)
    args = _config(
        tmp_path, per_device_train_batch_size=2, num_generations=2, max_steps=1, learning_rate=1e-5
    )
    args.max_completion_length = 400
    trainer = GRPOTrainer(**{**common, "reward_funcs": [_format_steps]}, args=args, rollout_func=record)
    trainer.train()
    (out,) = outputs
    assert all(ep["n_steps"] >= 1 for ep in out["stepgym_episode"])  # SmolLM2's replies stepped the env
    rewards = _format_steps(None, out["stepgym_steps"])
    assert (_changed(before, model) > 0) == (len(set(rewards)) > 1)


def test_factory_plays_a_real_alfworld_task(data_dir: Path) -> None:
    """The docs example's env: the tool env on StepGym/ALFWorld-v0 follows the task id of the dataset row."""
    pytest.importorskip("alfworld")
    row = task_dataset("StepGym/ALFWorld-v0", {"split": "train"}, limit=2)[1]
    ALFWorld = environment_factory("StepGym/ALFWorld-v0", {"split": "train"})
    env = ALFWorld()
    first = env.reset(**row)
    assert env.trajectory.task_id == row["task_id"] and "Your task is to:" in first
    expert = env.trajectory.initial_info[schema.EXPERT_ACTION]
    answer = env.act(expert)
    rec = env.annotations["steps"][0]
    assert rec["action"] == expert and rec["admissible"] is True and rec["state_key"] is not None
    assert "Admissible actions:" in answer
    env.env.close()


def test_factory_gives_a_tool_use_env_its_own_tools_with_upstreams_schemas() -> None:
    """StepGym/Tau2-v0 through environment_factory: one method per domain tool (plus send_message), whose
    signature and docstring give TRL the tool's schema (names, required arguments, types, enums; nested shapes in
    the descriptions), rendered by a real tool-calling chat template; the expert played through those methods wins,
    and each call is one recorded step whose action is the call."""
    pytest.importorskip("tau2")
    import json

    from transformers.utils import get_json_schema

    from stepgym.integrations.tool_use import MESSAGE_TOOL

    Airline = environment_factory("StepGym/Tau2-v0", {"domain": "airline", "split": "test"})
    probe = Airline()
    probe.reset(task_id="airline/2")
    upstream = probe.env.unwrapped.tool_schemas()
    public = {
        n for n, _ in inspect.getmembers(Airline, predicate=inspect.isfunction) if not n.startswith("_")
    }
    assert public == {"reset", "get_reward", MESSAGE_TOOL} | {s["function"]["name"] for s in upstream}
    for up in upstream:
        got = get_json_schema(getattr(probe, up["function"]["name"]))["function"]
        params, want = got["parameters"], up["function"]["parameters"]
        assert sorted(params.get("required", [])) == sorted(want.get("required", []))
        assert set(params["properties"]) == set(want["properties"])
        for key, prop in want["properties"].items():
            if prop.get("type") in ("string", "integer", "number", "boolean", "array", "object"):
                assert prop["type"] in json.dumps(params["properties"][key]["type"]), (up, key)
            if "enum" in prop:
                assert params["properties"][key]["enum"] == prop["enum"]
    book = get_json_schema(probe.book_reservation)["function"]["parameters"]["properties"]
    assert '"first_name": string' in book["passengers"]["description"]  # the nested shape, in words
    tok, _ = tiny_chat_model([{"messages": [{"role": "user", "content": "hi"}]}], vocab=300)
    rendered = tok.apply_chat_template(
        [{"role": "user", "content": "hi"}], tools=[getattr(probe, n) for n in sorted(public - {"reset", "get_reward"})],
        tokenize=False,
    )  # fmt: skip
    assert '"name": "book_reservation"' in rendered and f'"name": "{MESSAGE_TOOL}"' in rendered

    Mock = environment_factory("StepGym/Tau2-v0", {"domain": "mock", "split": "base"})
    env = Mock()
    first = env.reset(task_id="mock/create_task_1", prompt=[{"role": "user", "content": ""}])
    assert "<policy>" in first and "<tools>" not in first  # the chat template renders the tools
    sent = []
    while not env.trajectory.done:
        expert = env.trajectory.infos()[-1][schema.EXPERT_ACTION]
        if expert.startswith("{"):
            call = json.loads(expert)
            answer = getattr(env, call["name"])(**call["arguments"])
        else:
            answer = env.send_message(content=expert)
        sent.append(expert)
        assert isinstance(answer, str) and answer
    steps = env.annotations["steps"]
    assert env.get_reward() == 1.0 and [s["action"] for s in steps] == sent
    assert all(s["admissible"] for s in steps) and any(a.startswith("{") for a in sent)
    env.reset(task_id="mock/create_task_1")
    answer = env.create_task(user_id="no_such_user", title="x")  # a tool error: an invalid call, said so
    assert env.annotations["steps"][-1]["admissible"] is False and "Tool result" in answer
    solo = environment_factory("StepGym/Tau2-v0", {"domain": "telecom", "split": "small", "solo_mode": True})
    assert not hasattr(solo, MESSAGE_TOOL) and hasattr(solo, "done")  # solo mode: no user to message


def test_group_rollout_gives_a_tool_use_env_its_tools_and_tool_messages() -> None:
    """GroupRollout on StepGym/Tau2-v0: the chat template renders the domain's tools (the first turn is the
    instructions and the first observation, without the text format's tool list), each call's answer comes back as
    a tool message and each message's as a user message, and each step's span is exactly its reply (the call)."""
    pytest.importorskip("tau2")
    from stepgym.envs.tau2.prompt import FORMAT

    env_kwargs = {"domain": "mock", "split": "base"}
    tok, _ = tiny_chat_model([{"messages": [{"role": "user", "content": "hi"}]}], vocab=400)

    class ExpertRollout(GroupRollout):
        """Replies with the env's expert action in tau2's reply shape (a call in <tool_call>, a message as text)."""

        def _groups(self, sizes):
            self.live_groups = super()._groups(sizes)
            return self.live_groups

        def _replies(self, trainer, live):
            out = []
            for r in live:
                group = self.live_groups[r.block]
                info = group.trajectories[group.possible_agents.index(r.agent)].infos()[-1]
                text = FORMAT.reply(info[schema.EXPERT_ACTION])
                out.append(([*tok(text, add_special_tokens=False)["input_ids"], tok.eos_token_id], None))
            return out

    rows = task_dataset("StepGym/Tau2-v0", env_kwargs)
    prompt = next(r["prompt"] for r in rows if r["task_id"] == "mock/create_task_1")
    trainer = _fake_trainer(tok, g=2)
    trainer.max_completion_length = 100_000
    out = ExpertRollout("StepGym/Tau2-v0", env_kwargs, max_turn_tokens=2000, seed=0)(
        [prompt, prompt], trainer
    )
    for prompt_ids, completion, mask, steps, episode in zip(
        out["prompt_ids"], out["completion_ids"], out["env_mask"], out["stepgym_steps"], out["stepgym_episode"],
        strict=True,
    ):  # fmt: skip
        opening = tok.decode(prompt_ids)
        assert '"name": "create_task"' in opening and "You may call these tools" not in opening
        assert "<policy>" in opening
        assert episode["won"] and [s["admissible"] for s in steps] == [True] * len(steps)
        calls = [s for s in steps if str(s["action"]).startswith("{")]
        text = tok.decode(completion)
        assert calls and text.count("<tool_response>") == len(calls)  # the last step is the closing message
        trained = np.zeros(len(completion), dtype=bool)
        for s in steps:
            span = tok.decode(completion[s["start"] : s["stop"]], skip_special_tokens=True)
            assert span == FORMAT.reply(s["action"])
            trained[s["start"] : s["stop"]] = True
        assert (np.asarray(mask, dtype=bool) == trained).all()


def _docs_block(marker: str) -> str:
    text = (Path(__file__).resolve().parents[1] / "docs" / "trl.md").read_text()
    after = text[text.index(marker) :]
    return after.split("```python\n", 1)[1].split("```", 1)[0]


@pytest.mark.slow
def test_docs_alfworld_proas_example_runs(data_dir: Path, tmp_path: Path, monkeypatch) -> None:
    """The docs' ALFWorld + ProAS example, as written, with three things made small: a tiny model (its tokenizer
    trained on ALFWorld's own text) instead of SmolLM2, one training step of one group of two, two games. It runs
    a real StepGRPOTrainer step on real ALFWorld games with ProAS labels from the expert-seeded graph."""
    pytest.importorskip("alfworld")
    import gymnasium as gym

    import stepgym.steps.tasks
    import stepgym.trainers.models
    from stepgym.wrappers.feedback import EnvFeedbackWrapper
    from stepgym.wrappers.text import TextInterfaceWrapper

    env = TextInterfaceWrapper(
        EnvFeedbackWrapper(gym.make("StepGym/ALFWorld-v0", split="train")), fmt="alfworld", history_length=0
    )
    _, info = env.reset(options={"task_id": task_ids("StepGym/ALFWorld-v0", {"split": "train"})[0]})
    reply = f"<think>go</think><action>{info[schema.EXPERT_ACTION]}</action>"
    convs = [{"messages": [{"role": "user", "content": env.prompt}, {"role": "assistant", "content": reply}]}]
    env.close()
    tok, model = tiny_chat_model(convs)
    real_config, real_dataset = trl.GRPOConfig, stepgym.steps.tasks.task_dataset
    small = dict(per_device_train_batch_size=2, num_generations=2, max_steps=1, max_completion_length=1024)

    def config(**kw):
        return _config(tmp_path, **{**kw, **small, "output_dir": str(tmp_path)})

    monkeypatch.setattr(trl, "GRPOConfig", config)
    monkeypatch.setattr(
        stepgym.steps.tasks, "task_dataset", lambda *a, **kw: real_dataset(*a, **{**kw, "limit": 2})
    )
    monkeypatch.setattr(
        stepgym.trainers.models,
        "load_model",
        lambda name: type("Loaded", (), {"model": model, "tokenizer": tok}),
    )
    assert real_config is GRPOConfig
    scope: dict[str, Any] = {}
    exec(_docs_block("tests/test_integrations_trl.py runs this block"), scope)
    trainer, graph = scope["trainer"], scope["graph"]
    assert isinstance(trainer, StepGRPOTrainer) and trainer.state.global_step == 1
    batch = trainer.last_batch
    assert (
        len(set(batch.traj_ids)) == 2 and len(batch.rewards) >= 2
    )  # one group of two real games, env steps ran
    assert batch.reasonable is not None and batch.progress is not None  # ProAS labels on every step
    assert graph.task_ids  # the expert seeded the games it wins
    assert trainer.last_shaped.token_advantages.shape == tuple(batch.layout.shape)
    assert trainer.state.log_history and "loss" in trainer.state.log_history[0]


# ---------------------------------------------------------------------------------------------------------------
# Many processes
# ---------------------------------------------------------------------------------------------------------------
SCALE_PRESETS = [
    "gigpo-alfworld",
    "proas-gigpo",
    "ahead",
    "stepopsd-alfworld",
    "graphgpo-alfworld",
    "g2po-alfworld",
]


def _launch(out: Path, processes: int, script: str = "_trl_multiproc.py", *args: str) -> None:
    """tests/<script> on ``processes`` CPU processes: torch's launcher (torchrun) sets RANK/WORLD_SIZE and
    accelerate, under TRL, joins them with gloo."""
    import os
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[1]
    script = [str(repo / "tests" / script), str(out), *(args or [",".join(SCALE_PRESETS)])]
    if processes == 1:
        cmd = [sys.executable, *script]
    else:
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={processes}"]
        cmd += [f"--master_port={port}", "--master_addr=127.0.0.1", *script]
    env = {**os.environ, "PYTHONPATH": str(repo), "OMP_NUM_THREADS": "1", "TRL_EXPERIMENTAL_SILENCE": "1"}
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]


def _stacked(parts: list[torch.Tensor], width: int) -> torch.Tensor:
    return torch.cat([torch.nn.functional.pad(p, (0, width - p.shape[1])) for p in parts])


@pytest.mark.slow
def test_two_processes_optimise_what_one_process_does(tmp_path: Path) -> None:
    """2 gloo processes on a global batch of 12 rows (3 groups of 4; the middle one straddles the processes)
    against 1 process on the same batch: the advantages TRL's loss receives and the weights after 2 optimizer
    steps are the same, for GiGPO, ProAS, AHEAD and StepOPSD (their teacher rescoring included)."""
    _launch(tmp_path / "one", 1)
    _launch(tmp_path / "two", 2)
    for preset in SCALE_PRESETS:
        one = torch.load(tmp_path / "one" / f"{preset}.rank0.pt")
        two = [torch.load(tmp_path / "two" / f"{preset}.rank{r}.pt") for r in (0, 1)]
        for step in range(2):
            want = one["steps"][step]
            width = want["advantages"].shape[1]
            parts = [t["steps"][step] for t in two]
            assert [p["advantages"].shape[0] for p in parts] == [6, 6]
            assert len({p["completion_ids"].shape[1] for p in parts}) == 2  # padded widths differ per process
            assert torch.equal(_stacked([p["completion_ids"] for p in parts], width), want["completion_ids"])
            got = _stacked([p["advantages"] for p in parts], width)
            assert want["advantages"].abs().sum() > 0
            # AHEAD / StepOPSD: the teacher scores each process's rows in its own batch (float rounding only)
            torch.testing.assert_close(got, want["advantages"], rtol=0, atol=1e-5)
        moved = max((one["weights"][n] - one["initial"][n]).abs().max() for n in one["weights"])
        for n, w in one["weights"].items():
            assert torch.equal(two[0]["weights"][n], two[1]["weights"][n])  # DDP keeps the replicas equal
            # equal up to the float rounding of a gradient summed in another order, amplified by Adam
            torch.testing.assert_close(two[0]["weights"][n], w, rtol=0, atol=0.02 * float(moved))
        assert moved > 1e-3


def _fake_trainer(tok, *, processes: int = 1, rank: int = 0, g: int = 4) -> Any:
    """What GroupRollout and StepGRPOTrainer's gathering read from a trainer, for one process of ``processes``."""
    from types import SimpleNamespace

    return SimpleNamespace(
        processing_class=tok,
        max_completion_length=320,
        num_generations=g,
        num_generations_eval=g,
        model=SimpleNamespace(training=True),
        accelerator=SimpleNamespace(num_processes=processes, process_index=rank),
        reward_scale=10.0,
        invalid_rule="format_or_inadmissible",
    )


@pytest.fixture(scope="module")
def scripted() -> tuple[Any, list[Any]]:
    """The tiny tokenizer and a global batch of 12 prompts (3 tasks x G=4) for the scripted rollout."""
    tok, _ = tiny_chat_model(react_conversations(24, seed=1), vocab=600)
    rows = task_dataset(ENV_ID, ENV_KWARGS, system_prompt=SYSTEM)
    return tok, [rows[i]["prompt"] for i in range(3) for _ in range(4)]


def test_group_rollout_plays_a_straddling_group_as_one(scripted) -> None:
    from _trl_multiproc import ScriptedRollout

    tok, prompts = scripted

    def play(processes: int, rank: int) -> dict[str, Any]:
        n = len(prompts) // processes
        rollout = ScriptedRollout(ENV_ID, ENV_KWARGS, fmt="alfworld", max_turn_tokens=24, seed=0)
        return rollout(prompts[rank * n : (rank + 1) * n], _fake_trainer(tok, processes=processes, rank=rank))

    whole = play(1, 0)
    halves = [play(2, 0), play(2, 1)]
    assert [s[0]["group"] for h in halves for s in h["stepgym_steps"]] == [b // 4 for b in range(12)]
    for key in ("completion_ids", "env_mask", "stepgym_steps"):  # group 1 straddles: same task, same seed
        assert [x for h in halves for x in h[key]] == whole[key]
    rollout = ScriptedRollout(ENV_ID, ENV_KWARGS, fmt="alfworld", max_turn_tokens=24)
    with pytest.raises(StepRecordError, match=r"groups of 4.*lose rows"):  # 2 x 3 rows: no whole groups
        rollout(prompts[:3], _fake_trainer(tok, processes=2))
    mixed = prompts[2:6] + prompts[6:10]  # groups of 4 rows whose rows are not one task each
    with pytest.raises(StepRecordError, match=r"group 0 mixes tasks"):
        rollout(mixed, _fake_trainer(tok, processes=1))


def test_step_trainer_refuses_rows_it_cannot_credit(scripted, monkeypatch) -> None:
    from _trl_multiproc import ScriptedRollout

    import stepgym.integrations.trl.trainer as adapter

    tok, prompts = scripted
    out = ScriptedRollout(ENV_ID, ENV_KWARGS, fmt="alfworld", max_turn_tokens=24)(prompts, _fake_trainer(tok))
    inputs = [{"stepgym_steps": s} for s in out["stepgym_steps"]]
    width = max(len(c) for c in out["completion_ids"])
    rows, offset, batch = StepGRPOTrainer._global_batch(_fake_trainer(tok), inputs, width)
    assert rows == [12] and offset == 0 and batch.layout.shape == (12, width)
    missing = [dict(x) for x in inputs]
    del missing[3]["stepgym_steps"]
    with pytest.raises(StepRecordError, match=r"row 3 .*no stepgym_steps"):
        StepGRPOTrainer._global_batch(_fake_trainer(tok), missing, width)
    with pytest.raises(StepRecordError, match="num_generations=2"):  # TRL's G is not the group size played
        StepGRPOTrainer._global_batch(_fake_trainer(tok, g=2), inputs, width)
    # two processes: one lost a row, or both sent the same rows (group 0 twice, group 2 incomplete)
    parts = {"lost": [inputs[:6], inputs[6:11]], "twice": [inputs[:6], inputs[:6]]}
    for case, match in (("lost", "rows were lost"), ("twice", "group")):
        local = [{"steps": [x["stepgym_steps"] for x in p], "width": width} for p in parts[case]]
        monkeypatch.setattr(adapter, "gather_all", lambda trainer, obj, local=local: local)
        with pytest.raises(StepRecordError, match=match):
            StepGRPOTrainer._global_batch(_fake_trainer(tok, processes=2), parts[case][0], width)


@pytest.mark.slow
def test_vllm_server_turns_are_collective_across_processes(tmp_path: Path) -> None:
    """GroupRollout's server turn on 2 gloo processes (only the main one holds the client, as in TRL): the same
    rollouts and sampling log-probs as 1 process, although the processes' episodes end after different turns; a
    server failing mid-generation is the same error on both processes (none hangs)."""
    _launch(tmp_path / "one", 1, "_trl_vllm_multiproc.py", "ok")
    _launch(tmp_path / "two", 2, "_trl_vllm_multiproc.py", "ok")
    one = torch.load(tmp_path / "one" / "rank0.pt")
    two = [torch.load(tmp_path / "two" / f"rank{r}.pt") for r in (0, 1)]
    for key in ("completion_ids", "env_mask", "logprobs"):
        assert two[0][key] + two[1][key] == one[key]
    assert len({len(m) for m in one["env_mask"]}) > 1  # rows of different lengths: turns differ per row
    for ids, mask, logps in zip(one["completion_ids"], one["env_mask"], one["logprobs"], strict=True):
        assert logps == [(-0.001 * t if m else None) for t, m in zip(ids, mask, strict=True)]
    _launch(tmp_path / "die", 2, "_trl_vllm_multiproc.py", "die")
    for r in (0, 1):
        err = torch.load(tmp_path / "die" / f"rank{r}.pt")["error"]
        assert err.startswith("ServiceUnavailableError") and "http://127.0.0.1:9" in err


def test_an_aborted_trl_episode_changes_nothing_for_the_others(scripted) -> None:
    """docs/failures.md: GroupRollout ends a rollout whose env raised as aborted (its records say so, its last
    reply keeps a stand-in record); the step trainer's batch carries it, and shaping gives the other rows exactly
    the advantages of the batch without it, and the aborted row 0."""
    import functools

    from _trl_multiproc import ScriptedRollout

    from stepgym.integrations.trl import step_batch_from_rollouts
    from stepgym.shapers import ShapeConfig, shape_advantages
    from stepgym.wrappers.faults import FaultInjectionWrapper

    tok, prompts = scripted
    faulty = [functools.partial(FaultInjectionWrapper, exception=0.15, seed=4)]
    out = ScriptedRollout(ENV_ID, ENV_KWARGS, fmt="alfworld", max_turn_tokens=24, wrappers=faulty)(
        prompts, _fake_trainer(tok)
    )
    aborted = [bool(ep["aborted"]) for ep in out["stepgym_episode"]]
    assert 0 < sum(aborted) < len(aborted) - 4, (
        aborted
    )  # some rows aborted, every group keeps two finished rows
    assert all(r["aborted"] for s, a in zip(out["stepgym_steps"], aborted, strict=True) if a for r in s)
    inputs = [{"stepgym_steps": s} for s in out["stepgym_steps"]]
    width = max(len(c) for c in out["completion_ids"])
    _, _, batch = StepGRPOTrainer._global_batch(_fake_trainer(tok), inputs, width)
    cfg = ShapeConfig.from_preset("gigpo-alfworld")
    shaped = shape_advantages(batch, cfg)
    keep = [b for b, a in enumerate(aborted) if not a]
    ref = shape_advantages(
        step_batch_from_rollouts([out["stepgym_steps"][b] for b in keep], length=width), cfg
    )
    finished_per_group = {g: sum(1 for b in keep if b // 4 == g) for g in range(3)}
    live = [i for i, b in enumerate(keep) if finished_per_group[b // 4] >= 2]
    assert np.array_equal(shaped.token_advantages[[keep[i] for i in live]], ref.token_advantages[live])
    assert not shaped.token_advantages[np.array(aborted)].any()
    assert not shaped.token_loss_mask[np.array(aborted)].any()
