# Over 400 lines: saving and resuming every part of a trainer atomically; the parts must stay in step.
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
        manifest.json       the SHA-256 and size of every other file (written last)
    latest                  the name of the newest complete checkpoint (one line)

Atomicity: a checkpoint is written into a temporary sibling folder (``.tmp-step_000010-<pid>``); every file is
fsynced, the folder is renamed to its final name (an atomic rename on POSIX), the parent folder is fsynced, and
only then is ``latest`` replaced (:func:`stepgym.atomic.atomic_write_text`). A crash (or an exception raised
by any part writer) before the rename leaves only a ``.tmp-*`` folder, which is ignored and cleaned up later, and
``latest`` still names the previous checkpoint. Old checkpoints beyond ``keep`` are deleted only after the new one
is complete.

Checksums: ``manifest.json`` lists every file of the checkpoint (``trainer_state.json`` included) with its SHA-256
and size; it is written last (atomically) inside the temporary folder, and the trainer state records that a
manifest belongs to the checkpoint, so a deleted manifest is damage too. Loading verifies every checksum first: a
flipped byte in the middle of the weights, a truncated file or an edited ``iteration`` is refused even where the
file would still parse. A checkpoint written before manifests existed (its state has no ``checksums`` entry) is
still loaded, with one warning line saying that only its structure could be checked.

Damage (a disk that filled up, a copy cut short, an edited file): :func:`checkpoint_problems` checks every file of a
checkpoint without building a trainer and names each one that is damaged, one line per file (one per folder for
``tokenizer/`` and ``arg/``). Resuming
(:func:`choose_resume`) takes the newest checkpoint with no problem, says which files of the newer ones it skipped
and why, and reports a ``latest`` pointer that is unreadable or names no complete checkpoint; a file that reads
but does not fit the run (weights of another shape) fails :func:`load_trainer` with one line naming it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from stepgym.atomic import atomic_write_text, fsync_path
from stepgym.errors import StepGymError
from stepgym.trainers.distributed import world_record

__all__ = [
    "FORMAT_VERSION",
    "CheckpointError",
    "checkpoint_name",
    "checkpoint_problems",
    "choose_resume",
    "find_latest",
    "has_manifest",
    "load_trainer",
    "read_state",
    "resume_path",
    "save_checkpoint",
    "save_trainer",
]

FORMAT_VERSION = 1
_LATEST = "latest"
_STATE = "trainer_state.json"
_MANIFEST = "manifest.json"
_MANIFEST_FORMAT = "stepgym-checkpoint-manifest"
#: the trainer state's entry that says the checkpoint has a manifest (absent: written before manifests existed)
_CHECKSUMS_KEY = "checksums"

PartWriter = Callable[[Path], None]


log = logging.getLogger(__name__)


class CheckpointError(StepGymError, RuntimeError):
    """A checkpoint folder is missing, incomplete, damaged or of another format version (the message names the
    file and what to do)."""


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
        payload = {"format_version": FORMAT_VERSION, **state, _CHECKSUMS_KEY: _MANIFEST}
        (tmp / _STATE).write_text(
            json.dumps(payload, indent=1, sort_keys=True, default=str), encoding="utf-8"
        )
        _fsync_tree(tmp)
        atomic_write_text(tmp / _MANIFEST, json.dumps(_manifest_of(tmp), indent=1, sort_keys=True))
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
    _write_latest(root, name)
    _prune(root, keep, protect=name)
    return final


def _write_latest(root: Path, name: str) -> None:
    """Point ``latest`` at ``name``. Something other than a file in its place (a folder, a socket) is moved aside
    as ``latest.moved-<n>`` with one warning line (never deleted: it may be somebody's), then ``latest`` is
    written; if even that fails, a :class:`CheckpointError` of one line says what to do (the checkpoint itself is
    complete, and a resume finds it without ``latest``)."""
    pointer = root / _LATEST
    try:
        if pointer.is_symlink() or (pointer.exists() and not pointer.is_file()):
            n = 1
            while (root / f"{_LATEST}.moved-{n}").exists() or (root / f"{_LATEST}.moved-{n}").is_symlink():
                n += 1
            aside = root / f"{_LATEST}.moved-{n}"
            os.rename(pointer, aside)
            log.warning(f"{pointer} was not a file; moved it to {aside.name} and wrote a new pointer")
        atomic_write_text(pointer, name + "\n")
    except OSError as exc:
        raise CheckpointError(
            f"{pointer}: cannot be written ({_why(exc)}); checkpoint {root / name} is complete, move {pointer} "
            "away and resume with --run.resume auto"
        ) from exc


def _sha256(f: Path) -> str:
    h = hashlib.sha256()
    with open(f, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _manifest_of(folder: Path) -> dict[str, Any]:
    """The SHA-256 and size of every file under ``folder`` (paths relative to it, ``/``-separated)."""
    files = {}
    for f in sorted(p for p in folder.rglob("*") if p.is_file() and p.name != _MANIFEST):
        rel = f.relative_to(folder).as_posix()
        files[rel] = {"sha256": _sha256(f), "bytes": f.stat().st_size}
    return {"format": _MANIFEST_FORMAT, "version": 1, "files": files}


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
    problem = _state_problem(f)
    if problem:
        raise CheckpointError(f"{f}: {problem}")
    return json.loads(f.read_text(encoding="utf-8"))


def _state_problem(f: Path) -> str:
    try:
        state = json.loads(f.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        return f"cannot be read ({_why(exc)})"
    if not isinstance(state, dict):
        return f"holds a JSON {type(state).__name__}, not the trainer state object"
    if state.get("format_version") != FORMAT_VERSION:
        return f"has checkpoint format {state.get('format_version')!r}; this stepgym reads {FORMAT_VERSION}"
    if not isinstance(state.get("iteration"), int) or isinstance(state.get("iteration"), bool):
        return f"has no integer 'iteration' (got {state.get('iteration')!r})"
    return ""


def _why(exc: BaseException) -> str:
    """An exception as one short phrase (the first line of its message, torch's advice paragraphs dropped)."""
    text = " ".join((str(exc).strip().splitlines() or [""])[0].split())
    return f"{type(exc).__name__}: {text[:200]}" if text else type(exc).__name__


def _safetensors_problem(f: Path) -> str:
    """Reads the header and checks it covers the file exactly (a truncated or padded file fails), without loading
    the tensors."""
    from safetensors import safe_open

    try:
        with safe_open(str(f), framework="pt") as h:
            h.keys()
    except Exception as exc:  # safetensors raises its own SafetensorError (and OSError, ValueError) on damage
        return f"cannot be read ({_why(exc)})"
    return ""


def _torch_problem(f: Path, check: Callable[[Any], str]) -> str:
    import torch

    try:
        # mmap: the tensors are not read into memory here (the optimizer state is twice the model's size)
        obj = torch.load(f, map_location="cpu", weights_only=True, mmap=True)
    except Exception as exc:  # torch raises RuntimeError, UnpicklingError, EOFError, ... on damage
        return f"cannot be read ({_why(exc)})"
    return check(obj)


def _optimizer_shape(obj: Any) -> str:
    if not isinstance(obj, dict) or not isinstance(obj.get("optimizer"), dict) or "scheduler" not in obj:
        return "is not a stepgym optimizer state (a dict with 'optimizer' and 'scheduler')"
    if not {"state", "param_groups"} <= set(obj["optimizer"]):
        return "holds no optimizer 'state' and 'param_groups'"
    return ""


def _torch_rng_shape(obj: Any) -> str:
    import torch

    cpu = obj.get("cpu") if isinstance(obj, dict) else None
    want = torch.get_rng_state()
    if not isinstance(cpu, torch.Tensor) or cpu.dtype != want.dtype or cpu.shape != want.shape:
        return (
            f"holds no torch CPU RNG state (a {want.dtype} tensor of shape {tuple(want.shape)} under 'cpu')"
        )
    return ""


def _rng_problem(f: Path) -> str:
    import numpy as np

    try:
        state = json.loads(f.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        return f"cannot be read ({_why(exc)})"
    try:
        np.random.PCG64().state = state  # the trainer's generator is default_rng's PCG64
    except Exception as exc:  # numpy raises TypeError / ValueError / KeyError for a foreign state
        return f"is not a NumPy PCG64 generator state ({_why(exc)})"
    return ""


def _tokenizer_problem(d: Path) -> str:
    """``tokenizer/`` as ``save_pretrained`` writes it: ``tokenizer_config.json``, and ``tokenizer.json`` for a
    fast (``tokenizers``-backed) tokenizer; every JSON file parses."""
    config = d / "tokenizer_config.json"
    if not config.is_file():
        return "is missing tokenizer_config.json"
    for f in sorted(d.glob("*.json")):
        try:
            data = json.loads(f.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            return f"{f.name} cannot be read ({_why(exc)})"
        if f == config and isinstance(data, dict):
            fast = data.get("backend") == "tokenizers" or str(data.get("tokenizer_class", "")).endswith(
                "Fast"
            )
            if fast and not (d / "tokenizer.json").is_file():
                return "is missing tokenizer.json (the fast tokenizer's vocabulary)"
    return ""


def _part_of(rel: str) -> str:
    """The part a file belongs to, as problems name it: the file itself, or its top folder (``tokenizer``)."""
    return rel.split("/", 1)[0]


def _manifest_problems(path: Path) -> tuple[dict[str, str], str]:
    """``({part: why}, manifest problem)`` from checking every file of ``path`` against its ``manifest.json``
    (sizes first, then SHA-256). A checkpoint whose trainer state names no manifest (written before manifests
    existed) gives ``({}, "")``; one whose manifest is missing or unreadable gives the manifest's problem."""
    try:
        state = json.loads((path / _STATE).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        state = None
    f = path / _MANIFEST
    if not f.exists() and not (isinstance(state, dict) and state.get(_CHECKSUMS_KEY)):
        return {}, ""  # written before manifests (or the state is unreadable: its own check names it)
    try:
        manifest = json.loads(f.read_text(encoding="utf-8"))
        files = manifest["files"]
        if manifest.get("format") != _MANIFEST_FORMAT or not isinstance(files, dict):
            raise ValueError("not a stepgym checkpoint manifest")
        entries = {str(k): (str(v["sha256"]), int(v["bytes"])) for k, v in files.items()}
    except FileNotFoundError:
        return {}, "missing (the trainer state says this checkpoint has one)"
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError) as exc:
        return {}, f"cannot be read ({_why(exc)})"
    found: dict[str, list[str]] = {}
    for rel, (digest, size) in sorted(entries.items()):
        file = path / rel
        if ".." in Path(rel).parts or Path(rel).is_absolute():
            why = "is not a path inside the checkpoint"
        elif not file.is_file():
            why = "missing"
        elif file.stat().st_size != size:
            why = f"is {file.stat().st_size} bytes, the manifest says {size} (cut short or padded)"
        elif _sha256(file) != digest:
            why = "does not match its SHA-256 in the manifest (damaged or edited)"
        else:
            continue
        found.setdefault(_part_of(rel), []).append(why if "/" not in rel else f"{rel.split('/', 1)[1]} {why}")
    return {part: "; ".join(whys) for part, whys in found.items()}, ""


def has_manifest(path: str | os.PathLike[str]) -> bool:
    """Whether checkpoint ``path`` was written with a manifest (False: written before manifests existed)."""
    return (Path(path) / _MANIFEST).is_file()


#: checkpoint folders this process found intact, with the (path, size, mtime) of every file then: a checkpoint
#: checked by the CLI and again by the trainer it builds is hashed once
_INTACT: dict[Path, tuple[tuple[str, int, int], ...]] = {}


def _signature(path: Path) -> tuple[tuple[str, int, int], ...]:
    out = []
    for f in sorted(path.rglob("*")):
        st = f.lstat()
        out.append((f.relative_to(path).as_posix(), st.st_size, st.st_mtime_ns))
    return tuple(out)


def checkpoint_problems(path: str | os.PathLike[str]) -> list[str]:
    """Every damaged file of checkpoint folder ``path``, as ``"<file>: <why>"`` (one entry per file, one per
    folder for ``tokenizer/``; empty when the checkpoint is intact). Each file listed in ``manifest.json`` must
    have its size and SHA-256; then each file is checked for structure (headers only: weights are not loaded into
    memory), which is all a checkpoint written before manifests gets. A folder found intact earlier in this
    process whose files all have the same size and modification time is not read again."""
    path = Path(path)
    try:
        signature = _signature(path)
    except OSError:
        signature = None
    if signature is not None and _INTACT.get(path.resolve()) == signature:
        return []
    problems = _problems(path)
    if not problems and signature is not None:
        _INTACT[path.resolve()] = signature
    return problems


def _problems(path: Path) -> list[str]:
    by_manifest, manifest_problem = _manifest_problems(path)
    checks: list[tuple[str, Callable[[Path], str], bool]] = [
        (_STATE, _state_problem, True),
        ("model.safetensors", _safetensors_problem, True),
        ("optimizer.pt", lambda f: _torch_problem(f, _optimizer_shape), True),
        ("rng.json", _rng_problem, True),
        ("torch_rng.pt", lambda f: _torch_problem(f, _torch_rng_shape), True),
        ("teacher.safetensors", _safetensors_problem, False),
        ("reference.safetensors", _safetensors_problem, False),
    ]
    problems = [f"{path / _MANIFEST}: {manifest_problem}"] if manifest_problem else []
    for name, check, required in checks:
        f = path / name
        if name in by_manifest:
            problems.append(f"{f}: {by_manifest.pop(name)}")
            continue
        if not f.is_file():
            if required:
                problems.append(f"{f}: missing")
            continue
        why = check(f)
        if why:
            problems.append(f"{f}: {why}")
    why = by_manifest.pop("tokenizer", "") or _tokenizer_problem(path / "tokenizer")
    if why:
        problems.append(f"{path / 'tokenizer'}: {why}")
    problems += [f"{path / part}: {why}" for part, why in sorted(by_manifest.items())]
    return problems


def _pointer(root: Path) -> tuple[Path | None, str]:
    """The checkpoint ``latest`` names, and a problem with the pointer itself ('' when none)."""
    pointer = root / _LATEST
    if not pointer.exists():
        return None, ""
    try:
        name = pointer.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        return None, f"{pointer}: cannot be read ({_why(exc)})"
    if not name or "/" in name or os.sep in name or not name.startswith("step_"):
        return None, f"{pointer}: does not name a checkpoint (holds {name[:40]!r})"
    if not _complete(root / name):
        return None, f"{pointer}: names {name}, which is not a complete checkpoint"
    return root / name, ""


def choose_resume(root: str | os.PathLike[str]) -> tuple[Path | None, list[str]]:
    """The newest checkpoint under ``root`` that reads (``latest`` first), and one line per problem met on the
    way: a broken ``latest``, each unreadable file of each newer checkpoint skipped. ``(None, [])`` when ``root``
    holds no checkpoint at all; ``(None, problems)`` when none reads."""
    root = Path(root)
    if not root.is_dir():
        return None, []
    target, pointer_problem = _pointer(root)
    problems = [pointer_problem] if pointer_problem else []
    done = sorted((p for p in root.glob("step_*") if p.is_dir()), reverse=True)
    if target is not None:
        done = [target, *(p for p in done if p != target)]
    for cand in done:
        found = checkpoint_problems(cand)
        if not found:
            return cand, problems
        problems += found
    return None, problems


def resume_path(resume: str, ckpt_dir: Path) -> Path | None:
    """The checkpoint a run resumes from, for ``RunConfig.resume``: '' (fresh: refuses a ``ckpt_dir`` that already
    holds checkpoints), 'auto' (the newest readable one in ``ckpt_dir``, if any: :func:`choose_resume`), or a
    checkpoint / run / checkpoints folder (a run or checkpoints folder: its newest readable checkpoint).

    What is skipped on the way (a broken ``latest``, each unreadable file of a newer checkpoint) is logged as a
    warning, one line per file, followed by the checkpoint chosen instead. A :class:`CheckpointError` names the
    damaged file when nothing readable is left, or when the checkpoint folder named explicitly is damaged."""
    if not resume:
        if find_latest(ckpt_dir) is not None:
            raise CheckpointError(
                f"{ckpt_dir.parent} already holds checkpoints: pass --run.resume auto to continue that run, or "
                "choose another --run.output-dir"
            )
        return None
    p = Path(resume)
    if resume == "auto" or p.name == "checkpoints" or (p / "checkpoints").is_dir():
        root = ckpt_dir if resume == "auto" else p if p.name == "checkpoints" else p / "checkpoints"
        chosen, problems = choose_resume(root)
        for line in problems:
            log.warning(line)
        if chosen is not None:
            if problems:
                log.warning(f"resuming from {chosen} instead, the newest intact checkpoint")
            _warn_legacy(chosen)
            return chosen
        if problems:
            raise CheckpointError(
                f"no checkpoint in {root} can be read ({problems[0]}"
                + (f", and {len(problems) - 1} more problem(s) above" if len(problems) > 1 else "")
                + "); start a new run with another --run.output-dir"
            )
        if resume == "auto":
            return None
        raise CheckpointError(f"{p} is not a complete stepgym checkpoint (no {_STATE}); pick another folder")
    problems = checkpoint_problems(p) if _complete(p) else []
    if problems:
        for line in problems[1:]:
            log.warning(line)
        older, _ = choose_resume(p.parent)
        hint = f"resume from {older} instead" if older is not None else "no other checkpoint beside it reads"
        raise CheckpointError(f"{problems[0]}; {hint}")
    if _complete(p):
        _warn_legacy(p)
    return p


_WARNED: set[Path] = set()


def _warn_legacy(path: Path) -> None:
    """One warning line (once per process and folder) for a checkpoint written before manifests."""
    if not has_manifest(path) and path.resolve() not in _WARNED:
        _WARNED.add(path.resolve())
        log.warning(
            f"{path} has no {_MANIFEST} (written by a stepgym without checkpoint checksums): its files were "
            "checked for structure only; the next checkpoint this run saves has one"
        )


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
    """Restore everything :func:`save_trainer` wrote into a freshly built trainer, then sync its backend.

    A file that does not fit the run (weights of another shape, an optimizer of other parameters, a foreign RNG
    state) raises a :class:`CheckpointError` naming it, not the loader's traceback."""
    import torch
    from safetensors.torch import load_model

    device = str(tr.device)

    def part(name: str, load: Callable[[Path], None]) -> None:
        f = path / name
        if not f.exists():
            raise CheckpointError(f"{f}: missing; this run needs it")
        try:
            load(f)
        except CheckpointError:
            raise
        except Exception as exc:  # any loader's error on a file that read but does not fit this run
            raise CheckpointError(f"{f}: does not fit this run ({_why(exc)})") from exc

    def optimizer(f: Path) -> None:
        opt = torch.load(f, map_location=tr.device, weights_only=True)
        tr.optimizer.load_state_dict(opt["optimizer"])
        tr.scheduler.load_state_dict(opt["scheduler"])

    def numpy_rng(f: Path) -> None:
        tr.rng.bit_generator.state = json.loads(f.read_text(encoding="utf-8"))

    def torch_rng(f: Path) -> None:
        rs = torch.load(f, weights_only=True)
        torch.set_rng_state(rs["cpu"])
        if "cuda" in rs and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(rs["cuda"])

    part("model.safetensors", lambda f: load_model(tr.model, str(f), device=device))
    part("optimizer.pt", optimizer)
    part("rng.json", numpy_rng)
    part("torch_rng.pt", torch_rng)
    if tr.stale is not None:
        part("teacher.safetensors", lambda f: load_model(tr.stale.model, str(f), device=device))
        tr.stale.version = int(state.get("stale_version") or 0)
    if tr.reference is not None:
        part("reference.safetensors", lambda f: load_model(tr.reference.model, str(f), device=device))
    if tr.arg is not None:
        part("arg", tr.arg.load)
    try:
        tr.iteration = int(state["iteration"])
        tr.evals = list(state.get("evals") or [])
        tr.abort_totals = {str(k): int(v) for k, v in dict(state.get("aborts") or {}).items()}
    except (TypeError, ValueError, KeyError) as exc:  # a state of the wrong types (one written by hand)
        raise CheckpointError(f"{path / _STATE}: does not fit this run ({_why(exc)})") from exc
    tr.backend.sync_weights(tr.model)
