"""vLLM rollout backend (GPU only; optional: ``pip install 'stepgym[gpu]'``).

Imported only when ``rollout.backend = "vllm"`` is chosen (:func:`stepgym.trainers.backends.make_backend`), so
stepgym imports and runs without vLLM. **It cannot run on the CPU machines stepgym is developed on** (vLLM 0.33
pins its own CUDA torch); it is written against vLLM's public offline API and has not been exercised here — the
HF backend is the tested path, and ``benchmarks/gpu_check.py`` measures the HF path on a GPU.

Design (colocated, one GPU): vLLM holds its own copy of the weights. The engine runs in this process
(``VLLM_ENABLE_V1_MULTIPROCESSING=0``), and after every update :meth:`sync_weights` hands the policy's state dict to
the worker's model through ``LLM.collective_rpc`` with a small worker extension whose method calls the model's
``load_weights`` (the route vLLM's own RLHF examples use). Prompts go in as token ids, so vLLM samples exactly
the contexts the trainer tokenised; sampling is seeded per request from the trainer's generator. LoRA is not
supported here (the trainer refuses the combination): sync merged full weights instead if you add it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from stepgym import _deps
from stepgym.trainers.backends import Generation, GenerationRequest

__all__ = ["StepgymWorkerExtension", "VLLMBackend"]


class StepgymWorkerExtension:
    """Mixed into vLLM's GPU worker (``worker_extension_cls``): receive named tensors and load them."""

    def stepgym_load_weights(self, named_tensors: list[tuple[str, Any]]) -> int:
        model = self.model_runner.model  # type: ignore[attr-defined]
        device = next(model.parameters()).device
        model.load_weights(weights=[(n, t.to(device)) for n, t in named_tensors])
        return len(named_tensors)


class VLLMBackend:
    """Rollouts with ``vllm.LLM`` (see the module docstring).

    Args:
        model: the training policy (its config path or name is what vLLM loads first; weights are synced after).
        tokenizer: the policy's tokenizer (decoding and EOS).
        max_new_tokens, temperature, top_p: sampling knobs.
        gpu_memory_utilization: vLLM's share of GPU memory (the trainer needs the rest).
        model_path: folder vLLM loads the architecture and initial weights from (default: the model's
            ``name_or_path``; a randomly initialised model is saved to a temporary folder first).
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        max_new_tokens: int = 512,
        temperature: float = 1.0,
        top_p: float = 1.0,
        gpu_memory_utilization: float = 0.4,
        model_path: str | None = None,
    ) -> None:
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        self.vllm = _deps.require("vllm", "gpu", what="the vLLM rollout backend")
        self.tokenizer = tokenizer
        self.max_new_tokens = int(max_new_tokens)
        self.temperature = float(temperature)
        self.top_p = float(top_p)
        path = model_path or self._materialise(model, tokenizer)
        self.llm = self.vllm.LLM(
            model=path,
            tokenizer=path,
            dtype="bfloat16",
            gpu_memory_utilization=gpu_memory_utilization,
            enforce_eager=False,
            worker_extension_cls=f"{__name__}.StepgymWorkerExtension",
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
                seed=int(seed) + i,
                skip_special_tokens=True,
            )
            for i in range(len(requests))
        ]
        prompts = [{"prompt_token_ids": list(r.prompt_ids)} for r in requests]
        outs = self.llm.generate(prompts, params, use_tqdm=False)
        result = []
        eos = self.tokenizer.eos_token_id
        for out in outs:
            comp = out.outputs[0]
            ids = list(comp.token_ids)
            finished = comp.finish_reason == "stop"
            if finished and eos is not None and (not ids or ids[-1] != eos):
                ids.append(int(eos))  # vLLM omits the stop token; the trainer trains on it like HF generate
            result.append(Generation(ids, self.tokenizer.decode(ids, skip_special_tokens=True), finished))
        return result
