"""What a new user met in the guides, messages and formats (issue 42, items 4 and 5): each check failed before its
fix. The guides name what the code offers (graph bases, the oracle, StepBatch's fields, presets, each adapter's
methods, how to pick a prompt format); messages name the right key, the odd array out and what a zero setting means;
every shipped format's scripted reply passes its own parser; StepOPSD's spans fit replies without an <action> tag."""

from __future__ import annotations

import dataclasses
import inspect
import re
from pathlib import Path
from typing import Any, ClassVar

import gymnasium as gym
import pytest

from stepgym import schema

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"


# ---------------------------------------------------------------------------------------------------------------
# Messages
# ---------------------------------------------------------------------------------------------------------------
def test_graphgpo_names_the_schema_state_key() -> None:
    from stepgym.shapers import ShapeConfig, StepBatch, shape_advantages

    batch = StepBatch(group_ids=[0, 0], traj_ids=[0, 1], rewards=[1.0, 0.0], anchor_obs=["a", "a"])
    with pytest.raises(ValueError) as err:
        shape_advantages(batch, ShapeConfig(base="graphgpo"))
    assert f"info[{schema.STATE_KEY!r}]" in str(err.value) and "info['state_key']" not in str(err.value)


@pytest.mark.parametrize(
    ("lengths", "odd"),
    [
        ({"rewards": 3, "group_ids": 4, "traj_ids": 4, "valid": 4}, "rewards"),
        ({"rewards": 4, "group_ids": 4, "traj_ids": 4, "valid": 5}, "valid"),
        ({"rewards": 4, "group_ids": 4, "traj_ids": 2, "valid": 4}, "traj_ids"),
    ],
)
def test_a_step_batch_length_error_names_the_odd_one_out(lengths: dict[str, int], odd: str) -> None:
    from stepgym.shapers import ShapeConfig, StepBatch, shape_advantages

    arrays = {
        "rewards": [0.0] * lengths["rewards"],
        "group_ids": [0] * lengths["group_ids"],
        "traj_ids": list(range(lengths["traj_ids"])),
        "valid": [True] * lengths["valid"],
    }
    with pytest.raises(ValueError) as err:
        shape_advantages(StepBatch(**arrays), ShapeConfig(base="grpo"))
    message = str(err.value)
    named = [k for k in arrays if re.search(rf"\b{k}\b", message)]
    assert named == [odd], message
    assert f"{odd} has {lengths[odd]}" in message, message


def test_ctrl_c_without_periodic_checkpoints_says_so(tmp_path: Path) -> None:
    from stepgym.cli.train import _train_interrupt_note
    from stepgym.trainers.config import RunConfig, TrainConfig

    note = _train_interrupt_note(TrainConfig(run=RunConfig(output_dir=str(tmp_path), save_every=0)))
    assert "every 0 iterations" not in note and "only at the end" in note, note
    note = _train_interrupt_note(TrainConfig(run=RunConfig(output_dir=str(tmp_path), save_every=5)))
    assert "every 5 iterations" in note, note


def test_train_help_names_the_graph_bases() -> None:
    from stepgym.cli.train import _short_help
    from stepgym.shapers import GRAPH_BASES

    text = _short_help([], "stepgym train")
    line = next(x for x in text.splitlines() if x.strip().startswith("--shaper.base"))
    for base in ("grpo", "gigpo", *GRAPH_BASES, "oracle"):
        assert re.search(rf"\b{base}\b", line), (base, line)


# ---------------------------------------------------------------------------------------------------------------
# A goal-less env's prompt; EnvFeedbackWrapper's state_key
# ---------------------------------------------------------------------------------------------------------------
class _Corridor(gym.Env):
    """A text env with no goal in its info and its position in ``info["pos"]`` (not ``schema.STATE_KEY``)."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": []}

    def __init__(self) -> None:
        from stepgym.spaces import UnicodeText

        self.observation_space = UnicodeText()
        self.action_space = UnicodeText()
        self.pos = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[str, dict]:
        super().reset(seed=seed)
        self.pos = 0
        return "You stand at the west end of a corridor.", {"pos": self.pos}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        if action == "east":
            self.pos += 1
        return f"You are at position {self.pos}.", 0.0, self.pos >= 3, False, {"pos": self.pos}


@pytest.mark.parametrize("fmt", ["plain", "credit", "alfworld"])
def test_a_goal_less_env_gets_no_task_line(fmt: str) -> None:
    from stepgym.wrappers import TextInterfaceWrapper

    env = TextInterfaceWrapper(_Corridor(), fmt=fmt)
    env.reset(seed=0)
    prompt = env.prompt
    assert "Task:" not in prompt and "task:" not in prompt and "task is to" not in prompt, prompt
    assert "west end of a corridor." in prompt and ".." not in prompt, prompt


def test_env_feedback_wrapper_takes_a_state_key() -> None:
    from stepgym.wrappers import ARGWrapper, EnvFeedbackWrapper

    assert "state_key" in inspect.signature(ARGWrapper).parameters
    for key in ("pos", lambda info: info["pos"]):
        env = EnvFeedbackWrapper(_Corridor(), state_key=key)
        env.reset(seed=0)
        assert env.step("east")[4][schema.EFFECTIVE] is True
        assert env.step("wait")[4][schema.EFFECTIVE] is False
    env = EnvFeedbackWrapper(_Corridor())  # no key given, none in info: unknown, as before
    env.reset(seed=0)
    assert env.step("east")[4][schema.EFFECTIVE] is None
    wrapped = EnvFeedbackWrapper(_Corridor(), state_key="pos")
    assert wrapped._saved_kwargs["state_key"] == "pos"  # recorded, as every wrapper records its arguments


# ---------------------------------------------------------------------------------------------------------------
# Item 5: scripted replies parse in their own format; StepOPSD spans for replies without <action>
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["alfworld", "webshop", "qa", "qa-lenient", "qa-stepgym", "credit", "plain"])
def test_every_formats_scripted_reply_parses(name: str) -> None:
    from stepgym.wrappers.text import FORMATS

    assert set(FORMATS) == {"alfworld", "webshop", "qa", "qa-lenient", "qa-stepgym", "credit", "plain"}
    fmt = FORMATS[name]
    full_turns = (
        ("<search> capital of france </search>",) if name.startswith("qa") else ()
    )  # Search-QA's expert
    for action in ("go east", "paris", *full_turns):
        reply = fmt.reply(action)
        parsed = fmt.parse(reply)
        assert parsed.format_valid, (name, reply, parsed.error)
        if "<" not in action:
            assert action in parsed.action, (name, reply, parsed.action)


def test_stepopsd_spans_cover_the_whole_reply_when_the_format_has_no_action_tag() -> None:
    from stepgym.shapers.stepopsd_text import structural_target_span
    from stepgym.steps.teacher_context import span_rule
    from stepgym.wrappers.text import FORMATS

    count = len  # one token per character
    for name, fmt in FORMATS.items():
        mode, tag = span_rule(name)
        assert span_rule(fmt) == (mode, tag)
        reply = fmt.reply("paris")
        span = structural_target_span(reply, count, len(reply), mode=mode, tag=tag)
        assert span is not None, (name, mode, reply)
        if "<action>" in reply:
            assert mode == "action_only" and reply[span[0] : span[1]] == "<action>paris</action>", name
        else:
            assert mode == "clean_step_no_observation" and span == (0, len(reply)), name


# ---------------------------------------------------------------------------------------------------------------
# The guides
# ---------------------------------------------------------------------------------------------------------------
def test_the_shapers_guide_names_the_graph_bases_oracle_fields_and_presets() -> None:
    from stepgym.shapers import GRAPH_BASES, StepBatch
    from stepgym.trainers.presets import TRAINER_PRESETS

    text = (DOCS / "shapers_guide.md").read_text(encoding="utf-8")
    for name in (*GRAPH_BASES, "oracle"):
        assert f"`{name}`" in text, name
    for field in ("next_obs", "success", "dones", "step_index", "true_gain", "actions"):
        assert field in {f.name for f in dataclasses.fields(StepBatch)}
        assert f"`{field}`" in text, field
    graph_presets = [p for p in TRAINER_PRESETS if any(b in p for b in GRAPH_BASES)]
    assert graph_presets and all(f"`{p}`" in text for p in graph_presets), graph_presets
    assert "`credit-oracle`" in text


def test_the_integrations_tables_list_the_graph_bases_per_adapter() -> None:
    """Every adapter that runs ``shape_advantages`` (TRL, verl, OpenRLHF, SkyRL) has the graph bases wired in
    (tests/test_integrations_*.py check each equal to ``shape_advantages``): both tables say so."""
    from stepgym.shapers import GRAPH_BASES

    names = {"graphgpo": "GraphGPO", "hgpo": "HGPO", "rewardflow": "RewardFlow", "g2po": "G2PO"}
    assert set(names) == set(GRAPH_BASES)
    text = (DOCS / "integrations.md").read_text(encoding="utf-8")
    methods = text.split("## At scale: methods and processes", 1)[1].split("\n\n")[1]
    rows = [line for line in methods.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert len(rows) == 4, rows
    overview = [
        line for line in text.splitlines() if "**one per token**" in line or "one per token (" in line
    ]
    assert len(overview) == 4, overview
    for row in rows + overview:
        for shown in names.values():
            assert shown in row, (shown, row[:120])


def test_the_text_interface_page_says_how_to_choose_a_format() -> None:
    text = (DOCS / "text_interface.md").read_text(encoding="utf-8")
    assert "text_format=" in text and "register(" in text
    assert "module:ATTR" in text and '"plain"' in text and "metadata" in text


def test_the_search_qa_docs_state_the_envs_own_default() -> None:
    """The env's default is Search-R1's rule (``strict_format=False``, upstream's default); no page calls the
    strict rule the env's default."""
    from stepgym.envs.searchqa.env import SearchQAConfig

    assert inspect.signature(SearchQAConfig).parameters["strict_format"].default is False
    for page in DOCS.glob("*.md"):
        text = " ".join(page.read_text(encoding="utf-8").split())
        assert "strict by default (one action tag per turn, the Search-QA env's rule)" not in text, page.name
        for m in re.finditer(r"strict_format=(True|False)`?,? (?:is )?(?:the )?default", text):
            assert m.group(1) == "False", (page.name, m.group(0))
