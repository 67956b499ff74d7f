"""stepgym's verl trainer (``stepgym.integrations.verl.train``): the overridden advantage step of verl's v1 trainer.

Runs in the verl virtualenv (``scripts/test_verl.sh``). The batch is built the way verl builds it: real
``StepGymAgentLoop`` episodes (CreditToy with ARG labels) turned into rows by verl's ``AgentLoopOutput.as_dict``
and ``list_of_dict_to_tensordict`` (what ``AgentLoopWorkerTQ`` puts into TransferQueue), then the trainer's step.
The slow test passes the rows through a real TransferQueue on a local Ray cluster and scores AHEAD's teacher
contexts through a stand-in for verl's actor worker group (verl's FSDP workers need a GPU): it reads the rows from
TransferQueue, scores them with a tiny model and writes ``log_probs`` back, as the real worker's
``compute_log_prob`` does.
"""

from __future__ import annotations

import functools

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip(
    "verl",
    reason="verl is not installed: verl 0.9 trains on a GPU and pins versions that conflict with the main "
    "environment; scripts/test_verl.sh runs this file in a virtualenv of its own",
)
pytest.importorskip("transfer_queue", reason="verl's v1 trainer needs TransferQueue (scripts/test_verl.sh)")
torch = pytest.importorskip("torch")

from _oracles import oracle_step_batch  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from test_integrations_verl import CHATML, TOY, TOY_KW, ScriptedServerManager, _play  # noqa: E402
from verl.utils.tensordict_utils import list_of_dict_to_tensordict  # noqa: E402

from stepgym.errors import StepRecordError  # noqa: E402
from stepgym.graph_seeding import seed_graph_from_expert  # noqa: E402
from stepgym.integrations.verl import train as vtrain  # noqa: E402
from stepgym.integrations.verl import verl_rows  # noqa: E402
from stepgym.reference_graph import AgenticReferenceGraph  # noqa: E402
from stepgym.shapers import ShapeConfig, shape_advantages  # noqa: E402
from stepgym.steps import teacher_context as vt  # noqa: E402
from stepgym.steps.teacher_context import TeacherStats  # noqa: E402
from stepgym.trainers.teacher import Scorer  # noqa: E402
from stepgym.wrappers.arg import ARGWrapper  # noqa: E402

G = 4


@pytest.fixture(scope="module")
def tok():
    """The tiny tokenizer of tests/test_integrations_verl.py, with its ChatML template."""
    from stepgym.trainers.models import train_tokenizer

    corpus = ["go to the kitchen and open the door", "<think>next</think><action>look</action>"] * 20
    t = train_tokenizer(corpus, vocab_size=300)
    t.chat_template = CHATML
    return t


@pytest.fixture(scope="module")
def outs(tok):
    """Two tasks × G episodes of a noisy scripted policy, with ARG labels."""
    rows = verl_rows(TOY, TOY_KW, limit=2)
    graph = AgenticReferenceGraph()
    base = gym.make(TOY, **TOY_KW)
    seed_graph_from_expert(graph, base, [r["extra_info"]["task_id"] for r in rows])
    base.close()
    rng = np.random.default_rng(5)
    result = []
    for row in rows:
        for _ in range(G):
            server = ScriptedServerManager(tok, rng, noise=0.5, malformed=(int(rng.integers(0, 3)),))
            out = _play(tok, row, server, wrappers=[functools.partial(ARGWrapper, graph=graph)])
            result.append((row["extra_info"]["task_id"], out))
    assert len({o.reward_score for _, o in result}) > 1
    return result


def _fields(uid, out, session):
    """One TransferQueue row as AgentLoopWorkerTQ._agent_loop_postprocess writes it."""
    field = out.as_dict()
    field.update(uid=uid, session_id=session, global_steps=1)
    ids = torch.cat([field["prompts"], field["responses"]])
    field.update(loss_mask=field["response_mask"], input_ids=ids, position_ids=torch.arange(len(ids)))
    return field


def _trainer(preset="gigpo-alfworld", **stepgym):
    cfg = OmegaConf.create(
        {
            "stepgym": {
                "preset": preset,
                "reward_scale": 10.0,
                "invalid_rule": "format_or_inadmissible",
                **stepgym,
            },
            "actor_rollout_ref": {"rollout": {"n": G, "temperature": 1.0}},
            "algorithm": {"use_kl_in_reward": False},
            "data": {"max_prompt_length": 4096, "max_response_length": 4096},
        }
    )
    trainer = object.__new__(vtrain.StepGymPPOTrainerSync)  # the step only, without verl's GPU workers
    trainer.config, trainer.global_steps = cfg, 1
    return trainer


def _expected(outs, width, preset, **extra):
    """shape_advantages on the same episodes, built here from the agent loop's raw records."""
    sb = oracle_step_batch(
        [o.extra_fields["stepgym_steps"] for _, o in outs], [uid for uid, _ in outs], width, **extra
    )
    return shape_advantages(sb, ShapeConfig.from_preset(preset), update_index=0)


def _data(outs):
    td = list_of_dict_to_tensordict([_fields(u, o, k % G) for k, (u, o) in enumerate(outs)])
    return vtrain._to_dataproto(td)


@pytest.mark.parametrize("preset", ["grpo-alfworld", "gigpo-alfworld", "proas-gigpo", "drgrpo"])
def test_the_overridden_step_equals_shape_advantages(outs, preset) -> None:
    data = _data(outs)
    metrics: dict = {}
    adv = _trainer(preset).stepgym_advantages(data, [False] * len(data), metrics)
    want = _expected(outs, data.batch["response_mask"].shape[1], preset)
    assert np.allclose(adv.numpy(), want.token_advantages, atol=1e-5)
    assert np.abs(want.token_advantages).max() > 0 and "stepgym/adv_mean" in metrics
    assert (adv[data.batch["response_mask"] == 0] == 0).all()


def test_padding_rows_get_zero_and_join_no_group(outs) -> None:
    pad_uid, pad = "pad0", outs[0][1].model_copy(deep=True)
    data = _data([*outs, (pad_uid, pad)])
    adv = _trainer().stepgym_advantages(data, [False] * len(outs) + [True], {})
    want = _expected(outs, data.batch["response_mask"].shape[1], "gigpo-alfworld")
    assert np.allclose(adv[:-1].numpy(), want.token_advantages, atol=1e-5) and (adv[-1] == 0).all()


def test_missing_records_and_split_groups_are_refused(outs) -> None:
    broken = [(u, o.model_copy(deep=True)) for u, o in outs]
    del broken[2][1].extra_fields["stepgym_steps"]
    with pytest.raises(StepRecordError, match=r"rows \[2\].*no stepgym_steps.*StepGymAgentLoop"):
        _trainer().stepgym_advantages(_data(broken), [False] * len(broken), {})
    lost = outs[:-1]  # one rollout of the second group is gone
    with pytest.raises(StepRecordError, match=r"rollout.n=4.*'credit-train-\d+': 3.*split or lost rows"):
        _trainer().stepgym_advantages(_data(lost), [False] * len(lost), {})
    trainer = _trainer()
    trainer.config.algorithm.use_kl_in_reward = True
    with pytest.raises(StepRecordError, match="use_kl_in_reward"):
        trainer._compute_advantage(None, {})


def test_configs_carry_the_papers_presets() -> None:
    from hydra import compose, initialize_config_module

    from stepgym.trainers.presets import get_preset

    with initialize_config_module("stepgym.integrations.verl.config", version_base=None):
        for name, preset in (
            ("alfworld", "alfworld-gigpo"),
            ("webshop", "webshop-gigpo"),
            ("searchqa", "searchqa-stepopsd"),
        ):
            c, p = compose(config_name=name), get_preset(preset)
            assert ShapeConfig.from_preset(c.stepgym.preset) == p.shaper
            assert c.stepgym.env_id == p.env.id and c.stepgym.reward_scale == p.env.reward_scale
            assert c.stepgym.invalid_rule == p.env.invalid_rule
            assert c.stepgym.env_kwargs.get("max_steps", p.env.max_steps) == p.env.max_steps
            assert (
                c.data.train_batch_size == p.rollout.n_tasks
                and c.actor_rollout_ref.rollout.n == p.rollout.group_size
            )
            assert c.data.max_prompt_length == p.rollout.max_prompt_tokens
            assert c.stepgym.max_turn_tokens == p.rollout.max_response_tokens
            assert c.actor_rollout_ref.actor.optim.lr == p.optim.lr
            assert (
                c.actor_rollout_ref.actor.kl_loss_coef == p.loss.kl_coef
                and c.actor_rollout_ref.actor.use_kl_loss
            )
            assert (
                c.data.train_batch_size // c.actor_rollout_ref.actor.ppo_mini_batch_size
                == p.optim.mini_batches
            )
            assert (
                c.trainer.total_training_steps == p.run.iterations and c.trainer.save_freq == p.run.save_every
            )
            assert c.trainer.v1.trainer_mode == "stepgym_sync"


# ---------------------------------------------------------------------------------------------------------------
# Through a real TransferQueue, AHEAD's teacher through the worker group's compute_log_prob
# ---------------------------------------------------------------------------------------------------------------
class StandInActorGroup:
    """Stands in for verl's actor worker group (FSDP on a GPU): ``compute_log_prob(meta)`` reads the rows from
    TransferQueue, scores ``responses`` after ``prompts`` with a tiny model and writes ``log_probs`` back as the real
    worker does: nested, over the whole sequence, position k holding log p(token k+1). ``calls`` counts rows."""

    def __init__(self, model, pad_id) -> None:
        self.model, self.scorer, self.calls = model, Scorer(pad_id), []

    def compute_log_prob(self, meta):
        import transfer_queue as tq

        td = tq.kv_batch_get(
            keys=meta.keys, partition_id=meta.partition_id, select_fields=["prompts", "responses"]
        )
        ctx = [x.tolist() for x in td["prompts"].unbind()]
        tgt = [x.tolist() for x in td["responses"].unbind()]
        lp = self.scorer.score(self.model, ctx, tgt)
        self.calls.append(len(ctx))
        full = []
        for c, x in zip(ctx, lp, strict=True):
            row = torch.zeros(len(c) + len(x), dtype=torch.float32)
            row[len(c) - 1 : len(c) - 1 + len(x)] = torch.tensor(x, dtype=torch.float32)
            full.append(row)
        nested = torch.nested.as_nested_tensor(full, layout=torch.jagged)
        from tensordict import TensorDict

        tq.kv_batch_put(
            keys=meta.keys,
            partition_id=meta.partition_id,
            fields=TensorDict({"log_probs": nested}, batch_size=len(ctx)),
        )
        return meta


@pytest.mark.slow
def test_the_step_through_transferqueue_with_aheads_teacher(outs, tok) -> None:
    import ray
    import transfer_queue as tq

    from stepgym.trainers.models import build_tiny_model

    model = build_tiny_model(tok, seed=0)
    ray.init(num_cpus=6, include_dashboard=False, log_to_driver=False)
    try:
        tq.init()
        rows = [_fields(u, o, k % G) for k, (u, o) in enumerate(outs)]
        width = max(len(r["responses"]) for r in rows)
        old = [
            Scorer(tok.pad_token_id).score(model, [r["prompts"].tolist()], [r["responses"].tolist()])[0]
            for r in rows
        ]
        for r, lp in zip(rows, old, strict=True):
            r["old_log_probs"] = torch.tensor(lp, dtype=torch.float32)
        keys = [f"{r['uid']}_{r['session_id']}_0" for r in rows]
        meta = tq.kv_batch_put(
            keys=keys,
            partition_id="train",
            fields=list_of_dict_to_tensordict(rows),
            tags=[{"status": "success"} for _ in rows],
        )
        trainer = _trainer("ahead")
        trainer.tokenizer, trainer.ref_in_actor = tok, True
        trainer.actor_rollout_wg = StandInActorGroup(model, tok.pad_token_id)
        metrics: dict = {}
        trainer._compute_advantage(meta, metrics)
        got = tq.kv_batch_get(keys=keys, partition_id="train", select_fields=["advantages", "response_mask"])
        adv = got["advantages"].to_padded_tensor(0.0).numpy()
        # the same gaps without TransferQueue or the worker group: the teacher contexts scored directly
        data = _data(outs)
        old_pad = np.zeros((len(rows), width))
        for i, lp in enumerate(old):
            old_pad[i, : len(lp)] = lp
        ctx = vt.TeacherContexts(
            prompts=[r["prompts"].tolist() for r in rows],
            responses=[r["responses"].tolist() for r in rows],
            steps=[o.extra_fields["stepgym_steps"] for _, o in outs],
            trajectories=[o.extra_fields["stepgym_trajectory"] for _, o in outs],
            groups=[u for u, _ in outs],
            old_log_probs=old_pad,
            budget=vt.ContextBudget(8192),
        )
        delta = vt.ahead_gaps(
            ctx, tok, lambda c, t: Scorer(tok.pad_token_id).score(model, c, t), TeacherStats()
        )
        want = _expected(outs, width, "ahead", delta=delta).token_advantages
        assert np.abs(delta).max() > 0 and sum(trainer.actor_rollout_wg.calls) == metrics["teacher/items"]
        assert np.allclose(adv[:, :width], want, atol=1e-4)
        assert data.batch["response_mask"].shape[1] == width
        assert not tq.kv_list(vtrain.TEACHER_PARTITION).get(
            vtrain.TEACHER_PARTITION
        )  # the teacher rows are gone
    finally:
        tq.close()
        ray.shutdown()


@pytest.mark.slow
def test_verls_fit_runs_on_a_cpu_up_to_its_gpu_resource_pools(tmp_path) -> None:
    """As much of verl's v1 training as a CPU allows: the entry point's data and agent-loop files, TransferQueue,
    the registered trainer class, and ``trainer.init()`` reading the parquet files with verl's own RLHFDataset,
    until verl's resource-pool check asks for a GPU (its workers are GPU actors; its rollout servers are vLLM /
    SGLang / TensorRT-LLM)."""
    import ray
    import transfer_queue as tq
    from hydra import compose, initialize_config_module
    from omegaconf import open_dict
    from verl.trainer.ppo.v1 import get_trainer_cls

    from stepgym.trainers.models import load_model

    if torch.cuda.is_available():
        pytest.skip("a GPU is present: this test checks where verl stops on a CPU")
    loaded = load_model("tiny")
    loaded.model.save_pretrained(tmp_path / "tiny")
    loaded.tokenizer.save_pretrained(tmp_path / "tiny")
    with initialize_config_module("stepgym.integrations.verl.config", version_base=None):
        cfg = compose(
            config_name="alfworld",
            overrides=[
                f"stepgym.env_id={TOY}",
                "stepgym.env_kwargs={}",
                "stepgym.val_split=valid",
                "stepgym.fmt=alfworld",
                f"stepgym.data_dir={tmp_path / 'data'}",
                f"actor_rollout_ref.model.path={tmp_path / 'tiny'}",
                "trainer.n_gpus_per_node=1",
                "data.train_batch_size=2",
                "actor_rollout_ref.rollout.n=2",
                "actor_rollout_ref.actor.ppo_mini_batch_size=2",
                "trainer.total_training_steps=1",
                "transfer_queue.backend.SimpleStorage.num_data_storage_units=2",
            ],
        )
    vtrain.prepare(cfg)
    loop_yaml = OmegaConf.load(cfg.actor_rollout_ref.rollout.agent.agent_loop_config_path)
    assert (
        loop_yaml[0]["_target_"] == "stepgym.integrations.verl.StepGymAgentLoop"
        and loop_yaml[0]["env_id"] == TOY
    )
    with open_dict(cfg):
        cfg.transfer_queue.enable = True
    OmegaConf.resolve(cfg)
    ray.init(num_cpus=6, include_dashboard=False, log_to_driver=False)
    try:
        tq.init(cfg.transfer_queue)
        trainer = get_trainer_cls("stepgym_sync")(config=cfg)
        assert isinstance(trainer, vtrain.StepGymTrainerMixin)
        with pytest.raises(ValueError, match="Total available GPUs 0"):
            trainer.init()
        assert len(trainer.train_dataloader.dataset) == len(verl_rows(TOY, {"split": "train"}))
        assert len(trainer.val_dataloader.dataset) == len(verl_rows(TOY, {"split": "valid"}))
    finally:
        tq.close()
        ray.shutdown()


def test_the_entry_point_refuses_verls_own_advantage_step_and_unknown_presets() -> None:
    from hydra import compose, initialize_config_module

    with initialize_config_module("stepgym.integrations.verl.config", version_base=None):
        own = compose(config_name="alfworld", overrides=["trainer.v1.trainer_mode=sync"])
        unknown = compose(config_name="alfworld", overrides=["stepgym.preset=gigpo-typo"])
    with pytest.raises(StepRecordError, match=r"trainer_mode='sync'.*stepgym_sync"):
        vtrain.run(own)
    with pytest.raises(KeyError, match="gigpo-typo"):
        vtrain.run(unknown)


def test_stepopsd_scores_the_action_spans_after_the_peers_hindsight(outs, tok) -> None:
    """StepOPSD through the trainer's step (the teacher's scoring function in place of verl's ref worker group):
    targets are the <action> tags, contexts end with the first successful peer's hindsight block, and the result
    equals shape_advantages with the same gaps and targets."""
    from stepgym.trainers.models import build_tiny_model

    model = build_tiny_model(tok, seed=1)
    scorer = Scorer(tok.pad_token_id)
    fields = [_fields(u, o, k % G) for k, (u, o) in enumerate(outs)]
    for f in fields:
        f["old_log_probs"] = torch.tensor(
            scorer.score(model, [f["prompts"].tolist()], [f["responses"].tolist()])[0], dtype=torch.float32
        )
    data = vtrain._to_dataproto(list_of_dict_to_tensordict(fields))
    trainer = _trainer("stepopsd-alfworld")
    trainer.tokenizer = tok
    seen: list = []

    def score(contexts, targets, role):
        seen.append((role, contexts, targets))
        return scorer.score(model, contexts, targets)

    trainer.stepgym_score = score
    metrics: dict = {}
    adv = trainer.stepgym_advantages(data, [False] * len(data), metrics)
    ((role, contexts, targets),) = seen
    assert role == "ref" and metrics["teacher/items"] == len(targets) > 0
    assert all(tok.decode(t).startswith("<action>") and tok.decode(t).endswith("</action>") for t in targets)
    assert (
        sum("hindsight" in tok.decode(c).lower() for c in contexts) > 0
    )  # failed members see a winning peer
    width = data.batch["response_mask"].shape[1]
    old = data.batch["old_log_probs"].double().numpy()
    ctx = vt.TeacherContexts(
        prompts=[f["prompts"].tolist() for f in fields],
        responses=[f["responses"].tolist() for f in fields],
        steps=[o.extra_fields["stepgym_steps"] for _, o in outs],
        trajectories=[o.extra_fields["stepgym_trajectory"] for _, o in outs],
        groups=[u for u, _ in outs],
        old_log_probs=old,
        budget=vt.ContextBudget(8192),
    )
    delta, dmask, target = vt.opsd_gaps(ctx, tok, lambda c, t: scorer.score(model, c, t), TeacherStats())
    want = _expected(outs, width, "stepopsd-alfworld", delta=delta, delta_mask=dmask, target=target)
    assert np.allclose(adv.numpy(), want.token_advantages, atol=1e-5)
    zero = _expected(outs, width, "stepopsd-alfworld", delta=0 * delta, delta_mask=dmask, target=target)
    assert not np.allclose(want.token_advantages, zero.token_advantages)  # the teacher's gaps took part
