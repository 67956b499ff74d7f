"""What the AHEAD / StepOPSD teachers read (stepgym.steps.teacher_context): the three rules where the two adapters' copies
used to differ, that the bundled trainer's step rows and the adapters' episode rows build the same privileged text
and the same target span for the same step, and that the trainer and both adapters call this one module."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from stepgym import schema
from stepgym.errors import StepRecordError
from stepgym.steps import teacher_context as tc
from stepgym.steps.teacher_context import TeacherStats

ROOT = Path(__file__).resolve().parents[1]


class CharChat:
    """A character-level tokenizer (token = code point) with a ChatML-like template, or none when ``bare``."""

    eos_token_id = 0

    def __init__(self, bare: bool = False) -> None:
        self.bare = bare

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict[str, list[int]]:
        return {"input_ids": [ord(c) for c in text]}

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return "".join(chr(i) for i in ids)

    def apply_chat_template(self, messages, add_generation_prompt: bool = False, tokenize: bool = True):
        text = "".join(
            m["content"] if self.bare else f"<u>{m['content']}</u><a>"
            for m in messages
            if m["role"] == "user"
        )
        return [ord(c) for c in text]


def _episode() -> schema.Trajectory:
    info = {schema.FORMAT_VALID: True}
    steps = [
        schema.Step("room", "go left", 0.0, "a wall", False, False, dict(info)),
        schema.Step("a wall", "go right", 0.0, "a door", False, True, dict(info)),
    ]
    return schema.Trajectory("t0", "room", {}, steps)


def _ctx(tok: CharChat, stop: int = 40, max_context: int = 500) -> tc.TeacherContexts:
    """One row: the prompt, reply 1 (``<action>go left</action>``), an env turn, reply 2 whose recorded span
    ends at ``stop`` (past the response when ``stop`` is large); a third step the response cut off entirely."""
    prompt = tok("<u>start</u><a>")["input_ids"]
    r1 = "<action>go left</action>"
    env = "<u>a wall</u><a>"
    r2 = "<action>go right</action>"
    resp = tok(r1 + env + r2)["input_ids"]
    s2 = len(r1) + len(env)
    steps = [
        {"start": 0, "stop": len(r1), "group": 0},
        {"start": s2, "stop": stop, "group": 0},
        {"start": len(resp), "stop": len(resp) + 5, "group": 0},
    ]
    width = len(resp) + 8
    return tc.TeacherContexts(
        prompts=[prompt],
        responses=[resp],
        steps=[steps],
        trajectories=[_episode()],
        groups=[0],
        old_log_probs=np.full((1, width), -1.0),
        budget=tc.ContextBudget(max_context, 4),
    )


def _score_ok(contexts, targets):
    return [np.full(len(t), -0.5) for t in targets]


def test_a_span_past_the_response_is_clamped_and_an_empty_one_skipped() -> None:
    tok = CharChat()
    ctx = _ctx(tok, stop=10_000)
    n = len(ctx.responses[0])
    seen: list[list[int]] = []

    def score(contexts, targets):
        seen.extend(targets)
        return _score_ok(contexts, targets)

    delta = tc.ahead_gaps(ctx, tok, score, TeacherStats())
    assert len(seen) == 2  # the cut-off third step is skipped, not scored as an empty target
    assert seen[1] == ctx.responses[0][ctx.steps[0][1]["start"] : n]  # clamped to the response
    s2 = ctx.steps[0][1]["start"]
    assert np.allclose(delta[0, s2:n], 0.5)  # teacher − student on the clamped span
    assert not np.any(delta[0, n:] == 0.5)  # no gap beyond the response
    _, _, target = tc.opsd_gaps(ctx, tok, None, TeacherStats(), span=tc.ACTION_SPAN)
    assert target.n_steps == 2
    assert (target.token_step[0, n:] == -1).all()


@pytest.mark.parametrize("method", ["ahead", "opsd"])
def test_a_wrong_number_of_teacher_log_probs_is_a_clear_error(method: str) -> None:
    tok = CharChat()
    ctx = _ctx(tok)

    def short(contexts, targets):
        return [np.zeros(max(len(t) - 1, 0)) for t in targets]

    with pytest.raises(StepRecordError, match=r"the teacher scored \d+ tokens for a \d+-token target"):
        if method == "ahead":
            tc.ahead_gaps(ctx, tok, short, TeacherStats())
        else:
            tc.opsd_gaps(ctx, tok, short, TeacherStats(), span=tc.ACTION_SPAN)


def test_a_chat_template_without_a_user_turn_tail_is_refused() -> None:
    assert tc.user_turn_tail(CharChat()) == [ord(c) for c in "</u><a>"]
    with pytest.raises(ValueError, match="puts nothing after a user message's content"):
        tc.user_turn_tail(CharChat(bare=True))
    with pytest.raises(ValueError, match="puts nothing after a user message's content"):
        tc.ahead_gaps(_ctx(CharChat(bare=True)), CharChat(bare=True), _score_ok, TeacherStats())


def test_ahead_inserts_the_privileged_text_before_the_turn_tail() -> None:
    tok = CharChat()
    ctx = _ctx(tok)
    contexts: list[list[int]] = []
    tc.ahead_gaps(ctx, tok, lambda c, t: (contexts.extend(c), _score_ok(c, t))[1], TeacherStats())
    first = tok.decode(contexts[0])
    assert first.startswith("<u>start\n\n") and first.endswith("</u><a>")
    assert "a wall" in first  # the env's feedback to reply 1 is its privileged text


def _imported_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {
        f"{node.module}.{a.name}"
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module
        for a in node.names
    }


def test_trl_verl_and_the_trainer_build_teacher_contexts_with_this_one_module() -> None:
    """The adapters' teacher paths and the bundled trainer's go through stepgym.steps.teacher_context (verl's tests run
    in its own venv; TRL's trainer tests exercise TeacherGaps end to end), and none keeps a copy of its rules."""
    trl_names = set().union(*(_imported_names(p) for p in (ROOT / "stepgym/integrations/trl").glob("*.py")))
    assert {
        "stepgym.steps.teacher_context.ahead_gaps",
        "stepgym.steps.teacher_context.opsd_gaps",
    } <= trl_names
    verl_names = _imported_names(ROOT / "stepgym/integrations/verl/train.py")
    assert {
        "stepgym.steps.teacher_context.ahead_gaps",
        "stepgym.steps.teacher_context.opsd_gaps",
    } <= verl_names
    assert "stepgym.steps.teacher_context" in _imported_names(ROOT / "stepgym/trainers/teacher.py")
    assert not (ROOT / "stepgym/integrations/teacher.py").exists()
    for path in [
        *(ROOT / "stepgym/integrations/trl").glob("*.py"),
        *(ROOT / "stepgym/integrations/verl").glob("*.py"),
        ROOT / "stepgym/trainers/teacher.py",
    ]:
        src = path.read_text()
        assert "def user_turn_tail" not in src and "def _user_turn_tail" not in src, path
        for rule in (
            "fit_privileged(",
            "structural_target_span(",
            "prefix_token_counter(",
            "ahead_privileged_text(",
        ):
            assert rule not in src, (path, rule)
        assert "peer_hindsight(" not in src, path


class CharEncoder:
    """The bundled trainer's PromptEncoder on :class:`CharChat`: the prompt (plus AHEAD's privileged text) inside
    one user turn, the assistant header after it."""

    def __init__(self, tok: CharChat) -> None:
        self.tokenizer = tok

    def encode(self, prompt: str, extra: str = "", *, limit: int | None = None) -> tuple[list[int], bool]:
        return self.tokenizer(f"<u>{prompt}{extra}</u><a>")["input_ids"], False


def _step_rows(tok: CharChat, ctx: tc.TeacherContexts):
    """The same episode as the bundled trainer's step rows: step t's prompt is the env's text it answers."""
    from stepgym.steps.row import StepRow

    traj = ctx.trajectories[0]
    rows = []
    for t, rec in enumerate(ctx.steps[0][:2]):
        prompt = "start" if t == 0 else traj.steps[t - 1].next_observation
        reply = ctx.responses[0][rec["start"] : rec["stop"]]
        pids = tok(f"<u>{prompt}</u><a>")["input_ids"]
        rows.append(StepRow(0, 0, 0, t, "t0", prompt, pids, reply, tok.decode(reply)))
    return rows


def test_step_rows_and_episode_rows_build_the_same_privileged_text_and_target_span() -> None:
    """One rule for both layouts: for the same step, the trainer's step row and the adapters' episode row get the
    same privileged tokens (AHEAD: inside the user turn, before its tail; StepOPSD: the peer's hindsight block right
    before the span) and the same target span of the reply."""
    tok = CharChat()
    ctx = _ctx(tok, stop=len(tok.decode(_ctx(tok).responses[0])))
    rows = _step_rows(tok, ctx)
    tail = tc.user_turn_tail(tok)
    texts = tc.AheadTexts(ctx.trajectories)
    budget = ctx.budget

    episode_ctx: list[list[int]] = []
    tc.ahead_gaps(ctx, tok, lambda c, t: (episode_ctx.extend(c), _score_ok(c, t))[1], TeacherStats())
    step_items = tc.ahead_items(
        rows, [texts.text(0, r.t) for r in rows], CharEncoder(tok), budget, TeacherStats()
    )
    assert len(episode_ctx) == len(step_items) == 2
    for t, (row, item) in enumerate(zip(rows, step_items, strict=True)):
        pi = tc.ahead_pi_ids(tok, texts.text(0, t))
        assert pi and ("a wall" in tok.decode(pi) or t == 1)  # step 0's feedback: the wall it led to
        # step row: prompt ⊕ privileged inside the user turn; episode row: the same tokens before the turn's tail
        assert item.context == row.prompt_ids[: -len(tail)] + pi + tail
        assert episode_ctx[t][-len(tail) - len(pi) :] == pi + tail
        assert item.target == ctx.responses[0][ctx.steps[0][t]["start"] : ctx.steps[0][t]["stop"]]

    block = "\n<hindsight>the winning peer went right</hindsight>\n"
    block_ids = tok(block)["input_ids"]
    ep_contexts: list[list[int]] = []
    ep_targets: list[list[int]] = []

    def score(contexts, targets):
        ep_contexts.extend(contexts)
        ep_targets.extend(targets)
        return _score_ok(contexts, targets)

    _, _, layout = tc.opsd_gaps(ctx, tok, score, TeacherStats(), span=tc.ACTION_SPAN, blocks=[block])
    items, spans = tc.opsd_items(rows, [block, block], tok, budget, TeacherStats(), span=tc.ACTION_SPAN)
    assert len(items) == len(ep_targets) == 2
    for t, (row, item) in enumerate(zip(rows, items, strict=True)):
        s0 = ctx.steps[0][t]["start"]
        (span,) = spans[t]
        assert span == tc.target_span(tok, row.response_ids, tc.ACTION_SPAN)
        assert tok.decode(item.target) == "<action>" + ("go left" if t == 0 else "go right") + "</action>"
        assert ep_targets[t] == item.target  # the same span of the same reply
        assert layout.token_step[0, s0 + span[0] : s0 + span[1]].min() >= 0
        assert item.context[-len(block_ids) :] == block_ids == ep_contexts[t][-len(block_ids) :]
