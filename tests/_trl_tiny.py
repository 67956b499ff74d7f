"""A tiny tool-capable chat model for the TRL integration tests, built in seconds with no download.

A randomly initialised model never writes a well-formed tool call or ``<action>`` tag, so no env step would run
and every reward would be equal. The helpers here build a ChatML tokenizer trained locally on the env's own text
(TRL's Qwen2.5 template, so TRL's tool parser applies), a Qwen2-style model of ~0.2 M parameters, and clone a
noisy expert of the credit toy into it (SFT on its conversations, rendered exactly as TRL renders them): the model
then writes valid turns, and its episodes sometimes win and sometimes lose.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import tokenizers
import torch
import transformers
from trl import GRPOConfig

from stepgym import schema
from stepgym.integrations.trl import use_tool_chat_template
from stepgym.trainers.models import TinySizes, build_tiny_model


def cpu_grpo_config(output_dir: str, **over: Any) -> Any:
    """TRL's ``GRPOConfig`` for a CPU run of the tiny model: no KL term, no checkpoints, no reports, seeded;
    ``over`` replaces any field (the real class, bound at import: a test may patch ``trl.GRPOConfig``)."""
    kw: dict[str, Any] = dict(
        output_dir=str(output_dir),
        per_device_train_batch_size=8,
        num_generations=4,
        max_steps=2,
        learning_rate=2e-3,
        beta=0.0,
        use_cpu=True,
        bf16=False,
        gradient_checkpointing=False,
        report_to=[],
        logging_steps=1,
        save_strategy="no",
        seed=0,
        disable_tqdm=True,
    )
    kw.update(over)
    return GRPOConfig(**kw)


ENV_ID = "StepGym/CreditToy-v0"
#: Short episodes: two rooms, one distractor, three steps.
ENV_KWARGS = {"n_tasks": 4, "n_rooms": 2, "n_distractors": 1, "max_steps": 3}
SYSTEM = "Find the key and open the door."
_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
_TAGS = [
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
    "<action>",
    "</action>",
]


def _train(corpus: list[str], vocab: int) -> Any:
    tok = tokenizers.Tokenizer(tokenizers.models.BPE())
    # No word splitting: merges may span words, so the chat boilerplate becomes a few tokens (short rows).
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=vocab,
        special_tokens=_SPECIALS,
        initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer)
    tok.add_tokens([tokenizers.AddedToken(t, special=False, normalized=False) for t in _TAGS])
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<|endoftext|>", eos_token="<|im_end|>"
    )
    fast.padding_side = "left"
    return use_tool_chat_template(fast)


def tiny_chat_model(
    conversations: list[dict[str, Any]], *, vocab: int = 1000, seed: int = 0, num_heads: int = 4
) -> tuple[Any, Any]:
    """A ChatML tokenizer trained on ``conversations`` (each ``{"messages": [...], "tools": [...] or None}``,
    rendered through the template) and a random tiny Qwen2 model for it (``num_heads=2``: head size 32, the
    smallest vLLM's CPU attention takes)."""
    boot = _train([m["content"] or "" for c in conversations for m in c["messages"]], 300)
    rendered = [
        boot.apply_chat_template(c["messages"], tools=c.get("tools"), tokenize=False) for c in conversations
    ]
    tok = _train(rendered, vocab)
    model = build_tiny_model(
        tok,
        TinySizes(
            hidden_size=64,
            num_layers=2,
            num_heads=num_heads,
            num_kv_heads=num_heads // 2,
            intermediate_size=128,
        ),
        seed=seed,
    )
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    return tok, model


def _assistant_mask(tok: Any, messages: list[dict[str, Any]], tools: Any) -> tuple[list[int], list[int]]:
    """Token ids of the whole conversation and a 0/1 mask that is 1 on the assistant replies (EOS included)."""
    ids = tok.apply_chat_template(messages, tools=tools, tokenize=True, return_dict=False)
    mask = [0] * len(ids)
    for k, m in enumerate(messages):
        if m["role"] != "assistant":
            continue
        head = tok.apply_chat_template(
            messages[:k], tools=tools, add_generation_prompt=True, tokenize=True, return_dict=False
        )
        upto = tok.apply_chat_template(messages[: k + 1], tools=tools, tokenize=True, return_dict=False)
        end = max(i for i in range(len(head), len(upto)) if upto[i] == tok.eos_token_id)
        for i in range(len(head), end + 1):
            mask[i] = 1
    return ids, mask


def clone(
    tok: Any, model: Any, conversations: list[dict[str, Any]], *, steps: int, seed: int = 0
) -> list[float]:
    """SFT ``model`` on the assistant tokens of ``conversations``; returns the loss per step."""
    rows = [_assistant_mask(tok, c["messages"], c.get("tools")) for c in conversations]
    rng = np.random.default_rng(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    losses = []
    for _ in range(steps):
        pick = rng.choice(len(rows), size=min(8, len(rows)), replace=False)
        width = max(len(rows[i][0]) for i in pick)
        ids = torch.tensor([rows[i][0] + [tok.pad_token_id] * (width - len(rows[i][0])) for i in pick])
        mask = torch.tensor([rows[i][1] + [0] * (width - len(rows[i][1])) for i in pick])
        attn = torch.tensor([[1] * len(rows[i][0]) + [0] * (width - len(rows[i][0])) for i in pick])
        logits = model(input_ids=ids, attention_mask=attn).logits[:, :-1]
        logp = torch.log_softmax(logits.float(), -1).gather(-1, ids[:, 1:, None])[..., 0]
        m = mask[:, 1:].float()
        loss = -(logp * m).sum() / m.sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return losses


def noisy_expert(rng: np.random.Generator, p_expert: float = 0.6) -> Callable[[dict[str, Any]], str]:
    """The env's expert action with probability ``p_expert``, else a random admissible action."""

    def act(info: dict[str, Any]) -> str:
        adm = list(info[schema.ADMISSIBLE_ACTIONS])
        exp = info.get(schema.EXPERT_ACTION)
        if exp is not None and rng.random() < p_expert:
            return exp
        return adm[int(rng.integers(len(adm)))]

    return act


def tool_conversations(Env: Any, n: int, seed: int = 0) -> list[dict[str, Any]]:
    """``n`` chats of the noisy expert through an ``environment_factory`` class ``Env``, as TRL's tool loop renders
    them (the env's answers as tool turns), each with its tool list; the env is closed afterwards."""
    from stepgym.steps.tasks import task_ids

    env, rng = Env(), np.random.default_rng(seed)
    policy, ids = noisy_expert(rng), task_ids(ENV_ID, ENV_KWARGS)
    out = []
    for ep in range(n):
        messages = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": env.reset(task_id=ids[ep % len(ids)])},
        ]
        while not env.trajectory.done:
            a = policy(env.trajectory.infos()[-1])
            call = {"type": "function", "function": {"name": "act", "arguments": {"action": a}}}
            messages += [
                {"role": "assistant", "content": "", "tool_calls": [call]},
                {"role": "tool", "name": "act", "content": env.act(a)},
            ]
        messages.append({"role": "assistant", "content": "done"})
        out.append({"messages": messages, "tools": [env.act]})
    env.env.close()
    return out


def react_conversations(n: int, seed: int) -> list[dict[str, Any]]:
    """``n`` ReAct chats of the noisy expert on the credit toy, as GroupRollout renders them (one user turn per
    step, replies ``<think>…</think><action>…</action>``)."""
    from stepgym.steps.tasks import task_ids
    from stepgym.wrappers.text import make_text_env

    env = make_text_env(ENV_ID, ENV_KWARGS, fmt="alfworld", history=0)
    rng = np.random.default_rng(seed)
    policy, ids = noisy_expert(rng), task_ids(ENV_ID, ENV_KWARGS)
    out = []
    for ep in range(n):
        _, info = env.reset(seed=ep, options={"task_id": ids[ep % len(ids)]})
        messages = [{"role": "system", "content": SYSTEM}]
        done = False
        while not done:
            reply = f"<think>go</think><action>{policy(info)}</action>"
            messages += [{"role": "user", "content": env.prompt}, {"role": "assistant", "content": reply}]
            _, _, term, trunc, info = env.step(reply)
            done = term or trunc
        out.append({"messages": messages})
    return out


def vllm_server_trainer(tok: Any, client: Any, accelerator: Any = None) -> Any:
    """What ``GroupRollout`` reads from a ``GRPOTrainer(use_vllm=True, vllm_mode="server")`` (a stand-in: that
    trainer cannot be built on a CPU, its weight sync needs NCCL). ``client`` is TRL's ``VLLMClient`` or a fake one
    (``None`` on processes other than the main one, as in TRL); ``accelerator`` defaults to one process."""
    from types import SimpleNamespace

    gen = SimpleNamespace(
        vllm_client=client,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        min_p=None,
        repetition_penalty=1.0,
        generation_kwargs=None,
    )
    return SimpleNamespace(
        use_vllm=True,
        vllm_mode="server",
        vllm_generation=gen,
        processing_class=tok,
        eos_token_ids=[tok.eos_token_id],
        max_completion_length=200,
        num_generations=4,
        model=SimpleNamespace(training=True),
        accelerator=accelerator or SimpleNamespace(num_processes=1, process_index=0, is_main_process=True),
    )
