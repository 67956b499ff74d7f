"""Every worked case of the shaper specification (shared docs/shapers.md), to 1e-9.

Where the spec prints only rounded numbers (±0.866024, 8.5325, 0.196, ...) the exact expectation is recomputed here
by hand from the spec's formulas with plain ``math`` (not with the code under test), and the rounded value is
checked as well to the precision printed.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from stepgym import hindsight
from stepgym import shapers as S

EPS = 1e-6
TOL = 1e-9


def close(actual, expected, tol: float = TOL) -> None:
    np.testing.assert_allclose(
        np.asarray(actual, dtype=float), np.asarray(expected, dtype=float), rtol=0, atol=tol
    )


# --------------------------------------------------------------------------------------------------------------
# §1 GRPO
# --------------------------------------------------------------------------------------------------------------
def test_grpo_1001() -> None:
    # σ = sqrt(Σ(r-μ)²/(n-1)) = sqrt(4·0.25/3) = sqrt(1/3); A = ±0.5/(σ + ε)
    sigma = math.sqrt(1 / 3)
    a = 0.5 / (sigma + EPS)
    adv = S.grpo_advantage([1, 0, 0, 1], ["g"] * 4)
    close(adv, [a, -a, -a, a])
    close(adv, [0.866024, -0.866024, -0.866024, 0.866024], 5e-7)  # the spec's rounded value


def test_grpo_binary_k_of_n() -> None:
    n, k = 8, 3
    p = k / n
    sigma = math.sqrt(n * p * (1 - p) / (n - 1))
    r = [1] * k + [0] * (n - k)
    adv = S.grpo_advantage(r, [0] * n)
    close(adv, [(1 - p) / (sigma + EPS)] * k + [-p / (sigma + EPS)] * (n - k))


def test_grpo_all_equal_and_singleton() -> None:
    assert (S.grpo_advantage([1.0, 1.0, 1.0], [0, 0, 0]) == 0).all()  # 0/(0+ε) = 0 exactly
    assert (S.grpo_advantage([0.1, 0.1, 0.1], [0, 0, 0]) == 0).all()  # no float rounding residue
    close(S.grpo_advantage([3.0], [0]), [3.0 / (1 + EPS)])
    close(S.grpo_advantage([3.0], [0], singleton="zero"), [0.0])
    close(S.drgrpo_advantage([3.0], [0]), [3.0])


def test_grpo_cross_steps_example() -> None:
    # rows X, X, X (score 10) and Y (score 0), no std
    traj = ["X", "X", "X", "Y"]
    close(S.drgrpo_advantage([10, 10, 10, 0], [0] * 4, traj_ids=traj), [2.5, 2.5, 2.5, -7.5])
    close(S.drgrpo_advantage([10, 10, 10, 0], [0] * 4, traj_ids=traj, cross_steps=False), [5, 5, 5, -5])


# --------------------------------------------------------------------------------------------------------------
# §2 GiGPO
# --------------------------------------------------------------------------------------------------------------
GI = dict(
    rewards=[0, 0, 10, 0, 0],
    group_ids=[0] * 5,
    traj_ids=["X", "X", "X", "Y", "Y"],
    anchor_obs=["s0", "s1", "s2", "s0", "s1b"],
    valid=[True, True, True, True, False],
)
GI_NORM = S.GiGPOOptions(mode="mean_norm")
GI_SHARED = S.SharedOptions(gamma=0.95, invalid_penalty=0.1)


def test_gigpo_worked_case_mean_norm() -> None:
    t = S.gigpo_terms(**GI, options=GI_NORM, shared=GI_SHARED)
    close(t.scores, [10, 10, 10, 0, -0.1])
    mu = (10 + 10 + 10 + 0 - 0.1) / 5
    close(mu, 5.98)
    close(t.episode, [10 - mu, 10 - mu, 10 - mu, -mu, -0.1 - mu])
    close(t.episode, [4.02, 4.02, 4.02, -5.98, -6.08])
    g = [10 * 0.95**2, 10 * 0.95, 10, 0, -0.1]
    close(t.returns, g)
    close(t.returns, [9.025, 9.5, 10, 0, -0.1])
    half = (g[0] - g[3]) / 2
    close(t.step, [half, 0, 0, -half, 0])
    close(half, 4.5125)
    close(
        S.gigpo_advantage(**GI, options=GI_NORM, shared=GI_SHARED),
        [8.5325, 4.02, 4.02, -10.4925, -6.08],
    )


def test_gigpo_worked_case_mean_std_norm() -> None:
    t = S.gigpo_terms(**GI, options=S.GiGPOOptions(mode="mean_std_norm"), shared=GI_SHARED)
    s = [10, 10, 10, 0, -0.1]
    mu = sum(s) / 5
    sd = math.sqrt(sum((x - mu) ** 2 for x in s) / 4)
    close(t.episode, [(x - mu) / (sd + EPS) for x in s])
    g0, g3 = 9.025, 0.0
    m = (g0 + g3) / 2
    sd_s = math.sqrt(((g0 - m) ** 2 + (g3 - m) ** 2) / 1)
    close(t.step, [(g0 - m) / (sd_s + EPS), 0, 0, (g3 - m) / (sd_s + EPS), 0])


def test_gigpo_all_success_different_lengths() -> None:
    # X: s0 → s1 → s2 (win), Z: s0 → s3 (win). G at s0: 9.025 vs 9.5 → A^S = ∓0.2375, A^E = 0.
    t = S.gigpo_terms(
        [0, 0, 10, 0, 10],
        [0] * 5,
        list("XXXZZ"),
        ["s0", "s1", "s2", "s0", "s3"],
        options=GI_NORM,
        shared=GI_SHARED,
    )
    close(t.episode, [0] * 5)
    close(t.step, [-0.2375, 0, 0, 0.2375, 0])


def test_gigpo_all_fail_only_penalties() -> None:
    t = S.gigpo_terms(
        [0, 0, 0, 0],
        [0] * 4,
        list("XXYY"),
        ["a", "b", "a", "b"],
        [1, 0, 1, 1],
        options=GI_NORM,
        shared=GI_SHARED,
    )
    close(t.returns, [0, -0.1, 0, 0])
    close(t.step, [0, -0.05, 0, 0.05])


def test_gigpo_singletons() -> None:
    # episode group of one row: raw score (mean_norm) or s/(1+ε); singleton step group: A^S = 0
    close(S.gigpo_terms([7.0], [0], ["X"], ["s"], options=GI_NORM).episode, [7.0])
    close(
        S.gigpo_terms([7.0], [0], ["X"], ["s"], options=S.GiGPOOptions(mode="mean_std_norm")).episode,
        [7 / (1 + EPS)],
    )
    close(S.gigpo_terms([7.0], [0], ["X"], ["s"]).step, [0.0])


def test_gigpo_similarity_first_member_rule() -> None:
    # "abcdefghij" ~ "abcdefghiX" (ratio 0.9); with τ = 0.85 row 1 joins row 0's cluster; row 2 compares only to
    # the *first member* of that cluster, not to row 1.
    obs = ["abcdefghij", "abcdefghiX", "abcdefghXY", "zzzzzzzzzz"]
    codes = S.build_step_groups([0] * 4, obs, similarity=True, tau=0.85)
    assert codes[0] == codes[1] != codes[3]
    from difflib import SequenceMatcher

    assert (
        SequenceMatcher(None, obs[2], obs[0]).ratio() < 0.85 <= SequenceMatcher(None, obs[2], obs[1]).ratio()
    )
    assert codes[2] != codes[0]


# --------------------------------------------------------------------------------------------------------------
# §3 ProAS
# --------------------------------------------------------------------------------------------------------------
def test_proas_apr_worked_case() -> None:
    pa = [1, 0, 1, 0, 0]
    d = [3, 3, 2, 2, 1]  # D_t = Σ_{k≥t} (1 − PA_k)
    d_bar = sum(d) / 5
    close(d_bar, 2.2)
    out = S.proas_trajectory(-1.0, [0] * 5, pa)
    close(out, [-x / d_bar for x in d])
    close(out.sum(), -5.0)


def test_proas_mui_and_zero() -> None:
    close(S.proas_trajectory(2.0, [1, 0, 0, 1], [0, 0, 1, 0]), [2, 0, 2, 2])  # Rea := Rea ∨ PA
    close(S.proas_trajectory(0.0, [0, 0], [0, 0]), [0, 0])
    close(S.proas_trajectory(-1.5, [0, 0, 0], [1, 1, 1]), [-1.5] * 3)  # D̄ = 0 → uniform
    assert S.proas_trajectory(-1.0, [], []).shape == (0,)


def test_proas_on_gigpo_targets() -> None:
    t = S.gigpo_terms(**GI, options=GI_NORM, shared=GI_SHARED)
    rea = [1, 0, 1, 0, 0]
    pa = [1, 0, 1, 0, 0]
    ep = S.proas_on_gigpo(t, rea, pa, GI["traj_ids"], target="episode")
    # X (A^E > 0): MUI on A^E → (4.02, 0, 4.02); Y (A^E < 0): PA = (0, 0) → D = (2, 1), D̄ = 1.5
    close(ep, [4.02 + 4.5125, 0.0, 4.02, -5.98 * 2 / 1.5 - 4.5125, -6.08 * 1 / 1.5])
    comb = S.proas_on_gigpo(t, rea, pa, GI["traj_ids"], target="combined")
    close(comb, [8.5325, 0.0, 4.02, -10.4925 * 2 / 1.5, -6.08 / 1.5])


# --------------------------------------------------------------------------------------------------------------
# §4 AHEAD
# --------------------------------------------------------------------------------------------------------------
def test_ahead_formula_and_saturation() -> None:
    a = np.array([[2.0, 2.0, -1.0, -1.0, 0.5]])
    d = np.array([[0.1, 1.0, 0.1, -1.0, np.nan]])
    lam = 0.3
    w = [min(max(math.exp(0.1), 0.8), 1.2), 1.2, min(max(math.exp(-0.1), 0.8), 1.2), 1.2, 1.0]
    exp = [a[0, i] * ((1 - lam) + lam * w[i]) for i in range(5)]
    close(S.ahead_reweight(a, d, lam, eps=0.2), [exp])
    close(math.log(1.2), 0.182, 5e-4)
    close(math.log(0.8), -0.223, 5e-4)
    # exactly at the saturation points
    close(S.ahead_weights([[1.0, 1.0]], [[math.log(1.2), math.log(0.8)]], 0.2), [[1.2, 0.8]])


def test_ahead_lambda_schedule() -> None:
    assert S.ahead_lambda(0) == 0.5  # k = 0 at the first update
    close(S.ahead_lambda(1), 0.5 * (1 - 1 / 50))
    close(S.ahead_lambda(25), 0.25)
    assert S.ahead_lambda(50) == 0.0 and S.ahead_lambda(80) == 0.0
    assert S.ahead_lambda(80, decay_steps=0) == 0.5


# --------------------------------------------------------------------------------------------------------------
# §5 StepOPSD
# --------------------------------------------------------------------------------------------------------------
def test_stepopsd_lambda_schedule() -> None:
    close(S.stepopsd_lambda(1), 0.2 * (1 - 1 / 50))
    close(S.stepopsd_lambda(1), 0.196)
    assert S.stepopsd_lambda(50) == 0.0
    assert S.stepopsd_lambda(0) == 0.2
    assert S.stepopsd_lambda(99, decay_steps=-1) == 0.2


def test_stepopsd_sigmoid_and_exp_weights() -> None:
    a = np.ones((1, 4))
    d = np.array([[0.1, -0.1, 0.5, math.log(1.5)]])
    sig = [2 / (1 + math.exp(-0.1)), 2 / (1 + math.exp(0.1)), 1.2, 1.2]
    close(S.stepopsd_weights(a, d, 0.2, "sigmoid"), [sig])
    close(2 / (1 + math.exp(-math.log(1.5))), 1.2)  # saturation at |s| = ln 1.5 = 0.405
    ex = [math.exp(0.1), math.exp(-0.1), 1.2, 1.2]
    close(S.stepopsd_weights(a, d, 0.2, "exp"), [ex])
    # negative advantage flips the sign of the gap
    close(S.stepopsd_weights(-a, d, 0.2, "sigmoid"), [[sig[1], sig[0], 0.8, 0.8]])


def test_stepopsd_reweight_formula() -> None:
    a = np.array([[1.0, 1.0, 1.0, 0.0]])
    d = np.array([[0.3, 0.0, 0.3, 0.3]])
    lam = 0.196
    w = 2 / (1 + math.exp(-0.3))
    out = S.stepopsd_reweight(a, d, lam, alpha=0.2, delta_mask=[[1, 1, 0, 1]])
    close(out, [[(1 - lam) * 1 + lam * w * 1, 1.0, 1.0, 0.0]])


def test_equal_step_mean_abs_hand_case() -> None:
    # one row, two target spans: step 0 on tokens 0..1 with |Ã| = (1.1, 1.1), step 1 on tokens 3..5 (0.9 each)
    shaped = np.array([[1.1, 1.1, 7.0, 0.9, 0.9, 0.9]])
    target = S.TokenLayout.from_spans([[(0, 2), (3, 6)]], 6)
    m0, m1 = 1.1, 0.9
    mbar = (m0 + m1) / 2
    c0, c1 = mbar / (m0 + 1e-6), mbar / (m1 + 1e-6)
    out = S.equal_step_mean_abs(shaped, target)
    close(out, [[1.1 * c0, 1.1 * c0, 7.0, 0.9 * c1, 0.9 * c1, 0.9 * c1]])
    # clamp at C = 2: m = (5, 0.5): m̄ = 2.75 → c = 0.55, 5.49999 → clamped to 2
    out = S.equal_step_mean_abs(np.array([[5.0, 0.5]]), S.TokenLayout.from_spans([[(0, 1), (1, 2)]], 2))
    close(out, [[5.0 * 2.75 / (5 + 1e-6), 1.0]])


def test_equal_step_mean_abs_edge_cases() -> None:
    lay = S.TokenLayout.from_spans([[(0, 2), (2, 4)]], 4)
    assert (S.equal_step_mean_abs(np.zeros((1, 4)), lay) == 0).all()  # zero row stays 0 (c clamps to 1/C)
    one = S.TokenLayout.from_spans([[(0, 3)]], 4)
    x = np.array([[1.0, 2.0, 3.0, 4.0]])
    assert (S.equal_step_mean_abs(x, one) == x).all()  # single step unchanged
    # a span with no valid token is ignored: only one usable span remains → unchanged
    assert (S.equal_step_mean_abs(x, lay, valid_mask=[[1, 1, 0, 0]]) == x * [[1, 1, 0, 0]]).all()


def test_equal_step_mean_abs_modification() -> None:
    base = np.array([[1.0, 1.0, 1.0, 1.0]])
    shaped = np.array([[1.1, 1.1, 0.98, 0.98]])  # |d| = 0.1 and 0.02
    lay = S.TokenLayout.from_spans([[(0, 2), (2, 4)]], 4)
    mbar = (0.1 + 0.02) / 2
    c0, c1 = mbar / (0.1 + 1e-6), min(mbar / (0.02 + 1e-6), 2.0)
    out = S.equal_step_mean_abs(shaped, lay, base=base, norm_target="modification")
    close(out, [[1 + c0 * 0.1, 1 + c0 * 0.1, 1 - c1 * 0.02, 1 - c1 * 0.02]])


def test_hindsight_block_exact_text() -> None:
    block = hindsight.hindsight_block(
        "<search> q </search>\n<information>doc</information>\n<answer> x </answer>  \n"
    )
    assert block == (
        "\n<hindsight>\npeer_correct_trajectory:\n<peer_correct_trajectory>\n"
        "<search> q </search>\n<information>doc</information>\n<answer> x </answer>\n"
        "</peer_correct_trajectory>\n</hindsight>\n"
    )
    assert hindsight.hindsight_block(None) == ""
    assert (
        hindsight.hindsight_block(None, final_correctness=False)
        == "\n<hindsight>\nfinal_correctness: incorrect\n</hindsight>\n"
    )
    assert hindsight.hindsight_block("p", final_correctness="correct", golden_rollout="g \n") == (
        "\n<hindsight>\nfinal_correctness: correct\npeer_correct_trajectory:\n<peer_correct_trajectory>\np\n"
        "</peer_correct_trajectory>\ngolden_rollout:\n<golden_rollout>\ng\n</golden_rollout>\n</hindsight>\n"
    )


def test_first_correct_peers() -> None:
    correct = [0, 1, 0, 1, 1, 1, 0, 0, 0]
    groups = ["a", "a", "a", "a", "b", "b", "c", "c", "d"]
    assert hindsight.first_correct_peers(correct, groups).tolist() == [1, -1, 1, -1, -1, -1, -1, -1, -1]
    blocks = hindsight.hindsight_blocks(
        ["t0", "t1", "t2", "t3", "t4", "t5", "t6", "t7", "t8"], correct, groups
    )
    assert blocks[0] == blocks[2] == hindsight.hindsight_block("t1") and blocks[1] == "" and blocks[6] == ""


SEARCH_RESPONSE = (
    "I should search. <search>capital of France</search>\n\n<information>Paris is the capital.</information>\n\n"
    "Now answer. <answer>Paris</answer>"
)


def test_extract_response_steps_worked() -> None:
    text = SEARCH_RESPONSE
    steps = S.extract_response_steps(text)
    assert len(steps) == 2
    s0, s1 = steps
    assert (s0.start, text[s0.action_start : s0.action_end]) == (0, "<search>capital of France</search>")
    assert text[s0.start : s0.clean_end] == "I should search. <search>capital of France</search>\n\n"
    assert text[s0.clean_end : s0.end] == "<information>Paris is the capital.</information>"
    assert text[s1.start : s1.clean_end] == "Now answer. <answer>Paris</answer>"
    assert s1.is_final_answer and not s0.is_final_answer


def test_target_token_spans_char_tokenizer() -> None:
    text = SEARCH_RESPONSE
    n = len(text)  # one token per character: token index == char index
    clean = S.target_token_spans(text, "clean_step_no_observation", len, n)
    assert [(t.token_start, t.token_stop) for t in clean] == [
        (0, text.index("<information>")),
        (text.index("Now"), n),
    ]
    act = S.target_token_spans(text, "action_only", len, n)
    assert [text[t.token_start : t.token_stop] for t in act] == [
        "<search>capital of France</search>",
        "<answer>Paris</answer>",
    ]
    assert [
        text[t.token_start : t.token_stop] for t in S.target_token_spans(text, "answer_only", len, n)
    ] == ["<answer>Paris</answer>"]
    fin = S.target_token_spans(text, "final_answer_only", len, n)
    assert len(fin) == 1 and fin[0].action_type == "answer"
    # clamping: only 10 valid tokens → the answer step's action maps to (9, 10) and its clean span is dropped
    short = S.target_token_spans(text, "clean_step_no_observation", len, 10)
    assert [(t.token_start, t.token_stop) for t in short] == [(0, 10)]


def test_invalid_feedback_quirks() -> None:
    fb = "My previous action is invalid. If I want to search, I should put the query between <search> and </search>. Let me try again.\n"
    text = "bad action\n" + fb + "Think. <search>q1</search><information>d</information>done"
    steps = S.extract_response_steps(text)
    assert len(steps) == 1  # the quoted tags inside the feedback are not actions
    st = steps[0]
    # the invalid turn before the valid action is merged into the step's clean span, feedback text included
    assert text[st.start : st.clean_end] == "bad action\n" + fb + "Think. <search>q1</search>"
    # a response with only an invalid turn has no step
    assert S.extract_response_steps("nothing here\n" + fb) == []
    # feedback as the observation after an action ends the step; the next step starts after it
    text2 = "<search>a</search>\n" + fb + "x <answer>b</answer>"
    s = S.extract_response_steps(text2)
    assert [text2[t.start : t.clean_end] for t in s] == ["<search>a</search>\n", "x <answer>b</answer>"]


def test_structural_alfworld_span() -> None:
    text = "<think>go</think>\n<action>go to desk 1</action>"
    assert S.structural_target_span(text, len, len(text)) == (text.index("<action>"), len(text))
    assert S.structural_target_span("no action here", len, 14) is None
    assert S.structural_target_span(text, len, len(text), mode="clean_step_no_observation") == (0, len(text))


# --------------------------------------------------------------------------------------------------------------
# §6 DAPO
# --------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("rho", "adv", "expected"), [(1.5, 1, -1.28), (0.5, 1, -0.5), (0.5, -1, 0.8), (5, -1, 3)]
)
def test_dapo_policy_loss_values(rho: float, adv: float, expected: float) -> None:
    close(S.clipped_surrogate_np([rho], [adv], clip_low=0.2, clip_high=0.28, clip_c=3.0), [expected])
    close(S.policy_loss_np([math.log(rho)], [0.0], [adv]), [expected])


def test_agg_loss_modes() -> None:
    loss = np.array([[1.0, 1.0, 1.0], [4.0, 99.0, np.nan]])
    mask = np.array([[1, 1, 1], [1, 0, 0]])
    close(S.agg_loss_np(loss, mask, "token-mean"), 7 / 4)
    close(S.agg_loss_np(loss, mask, "seq-mean-token-mean"), (1 + 4) / 2)
    close(S.agg_loss_np(loss, mask, "seq-mean-token-sum"), (3 + 4) / 2)
    close(S.agg_loss_np(loss, mask, "seq-mean-token-sum-norm"), 7 / 3)
    assert S.agg_loss_np(loss, np.zeros((2, 3)), "token-mean") == 0.0


def test_overlong_and_dynamic_sampling() -> None:
    close(S.overlong_penalty([18432], 20480, 4096), [-0.5])
    close(S.overlong_penalty([16384, 100, 20480], 20480, 4096), [0.0, 0.0, -1.0])
    keep = S.dynamic_sampling_keep([1, 1, 0, 1, 0.1, 0.1, 0.1, 0.5], list("aabbcccd"))
    assert keep.tolist() == [False, False, True, True, False, False, False, True]
    assert S.dynamic_sampling_keep([0.5], ["d"], keep_singletons=False).tolist() == [False]


def test_torch_losses_match_numpy() -> None:
    torch = pytest.importorskip("torch")
    from stepgym.trainers import losses

    rng = np.random.default_rng(0)
    lp = rng.normal(-1, 0.5, (6, 9))
    olp = lp + rng.normal(0, 0.4, (6, 9))
    adv = rng.normal(0, 1, (6, 9))
    mask = (rng.random((6, 9)) < 0.7).astype(float)
    mask[2] = 0
    ref = S.policy_loss_np(lp, olp, adv, clip_low=0.2, clip_high=0.28, clip_c=3.0)
    t = lambda x: torch.tensor(x, dtype=torch.float64)  # noqa: E731
    got, stats = losses.policy_loss(t(lp), t(olp), t(adv), t(mask), clip_low=0.2, clip_high=0.28, clip_c=3.0)
    close(got.numpy(), ref, 1e-12)
    assert 0 <= stats["clipfrac"] <= 1 and 0 <= stats["dual_clipfrac"] <= stats["clipfrac"]
    for mode in S.AGG_MODES:
        close(float(losses.agg_loss(t(ref), t(mask), mode)), S.agg_loss_np(ref, mask, mode), 1e-12)
    for rho, a, e in [(1.5, 1, -1.28), (0.5, 1, -0.5), (0.5, -1, 0.8), (5, -1, 3)]:
        close(float(losses.clipped_surrogate(t([rho]), t([a]))[0]), e)
    # the loss is differentiable in log_prob
    lpt = t(lp).requires_grad_()
    out, _ = losses.policy_loss(lpt, t(olp), t(adv), t(mask))
    losses.agg_loss(out, t(mask)).backward()
    assert lpt.grad is not None and torch.isfinite(lpt.grad).all()


def test_target_token_spans_word_tokenizer() -> None:
    # tokens: words and single punctuation characters; prefixes are re-tokenised exactly as the code does
    import re

    def count(prefix: str) -> int:
        return len(re.findall(r"\w+|[^\w\s]", prefix))

    text = "Go. <search>a b</search> <information>x</information> ok <answer>c</answer>"
    toks = re.findall(r"\w+|[^\w\s]", text)
    n = len(toks)
    act = S.target_token_spans(text, "action_only", count, n)
    assert [" ".join(toks[t.token_start : t.token_stop]) for t in act] == [
        "< search > a b < / search >",
        "< answer > c < / answer >",
    ]
    clean = S.target_token_spans(text, "clean_step_no_observation", count, n)
    assert [" ".join(toks[t.token_start : t.token_stop]) for t in clean] == [
        "Go . < search > a b < / search >",
        "ok < answer > c < / answer >",
    ]


@pytest.mark.gpu
def test_torch_losses_on_cuda_match_cpu() -> None:
    torch = pytest.importorskip("torch")
    from stepgym.trainers import losses

    g = torch.Generator().manual_seed(0)
    lp, olp, adv = (torch.randn(64, 256, generator=g) for _ in range(3))
    mask = (torch.rand(64, 256, generator=g) < 0.8).float()
    cpu, _ = losses.policy_loss(lp, olp, adv, mask)
    gpu, _ = losses.policy_loss(lp.cuda(), olp.cuda(), adv.cuda(), mask.cuda())
    torch.testing.assert_close(gpu.cpu(), cpu)
    for mode in S.AGG_MODES:
        torch.testing.assert_close(
            losses.agg_loss(gpu, mask.cuda(), mode).cpu(), losses.agg_loss(cpu, mask, mode)
        )


def test_numpy_loss_twins_have_their_own_names() -> None:
    loss = np.array([[1.0, 1.0, 1.0], [4.0, 9.0, 9.0]])
    mask = np.array([[1, 1, 1], [1, 0, 0]])
    assert S.agg_loss_np(loss, mask) == 7 / 4
    close(S.clipped_surrogate_np([5.0], [-1.0]), [3.0])
    assert not hasattr(S, "agg_loss") and not hasattr(
        S, "policy_loss"
    )  # the torch names are trainers.losses'


def test_teacher_gaps_on_the_response_grid() -> None:
    # AHEAD: δ = teacher − student per generated token; an unscored row and the tail past the teacher's tokens keep 0
    d = S.ahead_delta([1], [[-0.5, -1.0]], [[-1.0, -1.5, -2.0]], (2, 3))
    close(d, [[0, 0, 0], [0.5, 0.5, 0]])
    # StepOPSD: Δ on the row's target span only; a span the teacher did not score gets Δ = 0 (weight 1)
    delta, mask = S.opsd_span_gaps(
        [[(1, 3)], [(0, 2)], []], {0: (1, [-0.2, -0.4])}, [[-1.0, -1.0, -1.0], [-1.0, -1.0], []], (3, 3)
    )
    close(delta, [[0, 0.8, 0.6], [0, 0, 0], [0, 0, 0]])
    assert mask.tolist() == [[False, True, True], [True, True, False], [False, False, False]]
