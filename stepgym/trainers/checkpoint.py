"""Checkpoints that resume exactly and survive a crash during the save.

Layout of ``<output_dir>/checkpoints/``::

    step_000010/            one complete checkpoint per saved iteration
        trainer_state.json  format version, iteration, update counter, config, model source, stale-teacher version
        model.safetensors   the policy's weights (safetensors ``save_model``: tied weights handled)
        optimizer.pt        optimizer + LR-scheduler state (torch.save of tensors and numbers; loaded weights_only)
        rng.json            the trainer's NumPy generator state (task order, env seeds, sampling seeds, shuffles)
        torch_rng.pt        torch CPU (and CUDA) RNG states
        teacher.safetensors StepOPSD's stale snapshot (when used)
        reference.safetensors the KL reference (when used)
        arg/                ProAS graphs (their own JSON format)
    latest                  the name of the newest complete checkpoint (one line)

Atomicity: a checkpoint is written into a temporary sibling folder (``.tmp-step_000010-<pid>``); every file is
fsynced, the folder is renamed to its final name (an atomic rename on POSIX), the parent folder is fsynced, and
only then is ``latest`` replaced (:func:`stepgym.atomic.atomic_write_text`). A crash (or an exception raised
by any part writer) before the rename leaves only a ``.tmp-*`` folder, which is ignored and cleaned up later, and
``latest`` still names the previous checkpoint. Old checkpoints beyond ``keep`` are deleted only after the new one
is complete.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from stepgym.atomic import atomic_write_text, fsync_path
from stepgym.trainers.distributed import world_record

__all__ = [
    "FORMAT_VERSION",
    "CheckpointError",
    "checkpoint_name",
    "find_latest",
    "load_trainer",
    "read_state",
    "resume_path",
    "save_checkpoint",
    "save_trainer",
]

FORMAT_VERSION = 1
_LATEST = "latest"
_STATE = "trainer_state.json"

PartWriter = Callable[[Path], None]


class CheckpointError(RuntimeError):
    """A checkpoint folder is missing, incomplete or of another format version."""


def checkpoint_name(iteration: int) -> str:
    return f"step_{iteration:06d}"


def _fsync_tree(root: Path) -> None:
    for p in sorted(root.rglob("*")):
        if p.is_file():
            fsync_path(p)
    for p in sorted((d for d in root.rglob("*") if d.is_dir()), reverse=True):
        fsync_path(p)
    fsync_path(root)


def save_checkpoint(
    root: str | os.PathLike[str],
    iteration: int,
    state: Mapping[str, Any],
    parts: Mapping[str, PartWriter],
    *,
    keep: int = 2,
) -> Path:
    """Write checkpoint ``step_<iteration>`` under ``root`` atomically and return its folder.

    ``state`` is JSON-serialisable trainer state (written as ``trainer_state.json`` with the format version);
    ``parts`` maps a label to a function that writes its files into the (temporary) checkpoint folder. Any
    exception propagates after the temporary folder is removed; the previous checkpoint stays the latest.
    """
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    name = checkpoint_name(iteration)
    final = root / name
    tmp = root / f".tmp-{name}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        for writer in parts.values():
            writer(tmp)
        payload = {"format_version": FORMAT_VERSION, **state}
        (tmp / _STATE).write_text(
            json.dumps(payload, indent=1, sort_keys=True, default=str), encoding="utf-8"
        )
        _fsync_tree(tmp)
        if final.exists():  # re-saving the same iteration (e.g. after a resume): move the old one aside first
            old = root / f".old-{name}-{os.getpid()}"
            shutil.rmtree(old, ignore_errors=True)
            os.rename(final, old)
            os.rename(tmp, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, final)
        fsync_path(root)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    atomic_write_text(root / _LATEST, name + "\n")
    _prune(root, keep, protect=name)
    return final


def _complete(path: Path) -> bool:
    return path.is_dir() and (path / _STATE).is_file() and not path.name.startswith(".")


def _prune(root: Path, keep: int, protect: str) -> None:
    for stale in root.glob(".tmp-*"):
        if str(os.getpid()) not in stale.name:
            shutil.rmtree(stale, ignore_errors=True)
    if keep <= 0:
        return
    done = sorted(p for p in root.glob("step_*") if _complete(p))
    for p in done[:-keep]:
        if p.name != protect:
            shutil.rmtree(p, ignore_errors=True)


def find_latest(root: str | os.PathLike[str]) -> Path | None:
    """The newest complete checkpoint under ``root`` (``latest`` if it names a complete one), or None."""
    root = Path(root)
    if not root.is_dir():
        return None
    pointer = root / _LATEST
    if pointer.is_file():
        cand = root / pointer.read_text(encoding="utf-8").strip()
        if _complete(cand):
            return cand
    done = sorted(p for p in root.glob("step_*") if _complete(p))
    return done[-1] if done else None


def read_state(path: str | os.PathLike[str]) -> dict[str, Any]:
    """``trainer_state.json`` of a checkpoint folder, with its format version checked."""
    path = Path(path)
    f = path / _STATE
    if not f.is_file():
        raise CheckpointError(
            f"{path} is not a complete stepgym checkpoint (no {_STATE}); pick another folder"
        )
    try:
        state = json.loads(f.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"{f} is corrupt ({exc}); resume from an older checkpoint") from exc
    if state.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(
            f"{path} has checkpoint format {state.get('format_version')!r}; this stepgym reads {FORMAT_VERSION}"
        )
    return state


def resume_path(resume: str, ckpt_dir: Path) -> Path | None:
    """The checkpoint a run resumes from, for ``RunConfig.resume``: '' (fresh: refuses a ``ckpt_dir`` that already
    holds checkpoints), 'auto' (the latest in ``ckpt_dir``, if any), or a checkpoint / run / checkpoints folder."""
    if resume == "auto":
        return find_latest(ckpt_dir)
    if resume:
        p = Path(resume)
        if p.name == "checkpoints" or (p / "checkpoints").is_dir():
            p = find_latest(p if p.name == "checkpoints" else p / "checkpoints") or p
        return p
    if find_latest(ckpt_dir) is not None:
        raise CheckpointError(
            f"{ckpt_dir.parent} already holds checkpoints: pass --run.resume auto to continue that run, or choose "
            "another --run.output-dir"
        )
    return None


# ---------------------------------------------------------------------------------------------------------------
# The bundled trainer's parts
# ---------------------------------------------------------------------------------------------------------------
def save_trainer(tr: Any, extra_parts: Mapping[str, PartWriter] | None = None) -> Path:
    """Write a checkpoint of a :class:`~stepgym.trainers.grpo.GRPOTrainer` (model, optimizer + scheduler, every
    RNG, tokenizer, the stale teacher / KL reference / ARG graphs when used) with :func:`save_checkpoint`."""
    import torch
    from safetensors.torch import save_model

    def rng_part(d: Path) -> None:
        (d / "rng.json").write_text(json.dumps(tr.rng.bit_generator.state), encoding="utf-8")
        states = {"cpu": torch.get_rng_state()}
        if torch.cuda.is_available():
            states["cuda"] = torch.cuda.get_rng_state_all()
        torch.save(states, d / "torch_rng.pt")

    parts: dict[str, PartWriter] = {
        "model": lambda d: save_model(tr.model, str(d / "model.safetensors")),
        "optimizer": lambda d: torch.save(
            {"optimizer": tr.optimizer.state_dict(), "scheduler": tr.scheduler.state_dict()},
            d / "optimizer.pt",
        ),
        "rng": rng_part,
        "tokenizer": lambda d: tr.tokenizer.save_pretrained(str(d / "tokenizer")),
    }
    if tr.stale is not None:
        parts["teacher"] = lambda d: save_model(tr.stale.model, str(d / "teacher.safetensors"))
    if tr.reference is not None:
        parts["reference"] = lambda d: save_model(tr.reference.model, str(d / "reference.safetensors"))
    if tr.arg is not None:
        parts["arg"] = lambda d: tr.arg.save(d / "arg")
    parts.update(extra_parts or {})
    state = {
        "iteration": tr.iteration,
        "method": tr.cfg.method,
        "model_source": tr.model_source,
        "stale_version": tr.stale.version if tr.stale is not None else None,
        "evals": tr.evals,
        "aborts": dict(tr.abort_totals),  # aborted episodes per cause so far (a resumed run goes on counting)
        "config": tr.cfg.to_dict(),
        **world_record(tr.dist.world, tr.cfg.rollout.n_tasks),  # world_size and each rank's groups
    }
    return save_checkpoint(tr.ckpt_dir, tr.iteration, state, parts, keep=tr.cfg.run.keep_checkpoints)


def load_trainer(tr: Any, path: Path, state: Mapping[str, Any]) -> None:
    """Restore everything :func:`save_trainer` wrote into a freshly built trainer, then sync its backend."""
    import torch
    from safetensors.torch import load_model

    device = str(tr.device)
    load_model(tr.model, str(path / "model.safetensors"), device=device)
    opt = torch.load(path / "optimizer.pt", map_location=tr.device, weights_only=True)
    tr.optimizer.load_state_dict(opt["optimizer"])
    tr.scheduler.load_state_dict(opt["scheduler"])
    tr.rng.bit_generator.state = json.loads((path / "rng.json").read_text(encoding="utf-8"))
    rs = torch.load(path / "torch_rng.pt", weights_only=True)
    torch.set_rng_state(rs["cpu"])
    if "cuda" in rs and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(rs["cuda"])
    if tr.stale is not None:
        if not (path / "teacher.safetensors").is_file():
            raise CheckpointError(f"{path} has no stale teacher but this config needs one")
        load_model(tr.stale.model, str(path / "teacher.safetensors"), device=device)
        tr.stale.version = int(state.get("stale_version") or 0)
    if tr.reference is not None:
        load_model(tr.reference.model, str(path / "reference.safetensors"), device=device)
    if tr.arg is not None:
        tr.arg.load(path / "arg")
    tr.iteration = int(state["iteration"])
    tr.evals = list(state.get("evals") or [])
    tr.abort_totals = {str(k): int(v) for k, v in (state.get("aborts") or {}).items()}
    tr.backend.sync_weights(tr.model)
