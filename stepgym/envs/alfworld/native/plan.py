"""Text-free successors of a native-engine game, for planners (the value oracle, :mod:`stepgym.envs.alfworld.values`).

A :class:`NativeEngine` step derives the feedback text, rebuilds TextWorld's fact list and lists the admissible
commands: most of a step's cost, and nothing a search needs. :class:`PlanView` works on the *true atoms* alone (the
fluent atoms the engine keeps as Fast Downward's state): for a state given as :data:`Atoms` it lists the commands
``step()`` would accept with the operator each one runs (the first one of that text, as ``step()`` picks), applies an
operator's effects with the engine's own SAS effects, and tests the goal with the engine's own goal plans. What an
engine step does to the true atoms, :meth:`PlanView.apply` does too (``tests/test_values_alfworld.py`` checks it
against engine steps).

States are compared by :meth:`PlanView.key`: the atoms of the predicates that some precondition, effect condition
or the goal reads. Atoms of the others (ALFWorld's ``checked``, which looking, examining and opening write and
nothing reads) never change what can be done or whether the game is won, so two states that differ only there have
the same successors, up to steps that change nothing read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from stepgym.envs.alfworld.native.ground import Op, Tables

if TYPE_CHECKING:
    from stepgym.envs.alfworld.native.engine import NativeEngine, NativeSnapshot

__all__ = ["Atoms", "PlanView"]

Atoms = tuple[tuple[str, frozenset[tuple]], ...]
"""A state's true atoms: ``(predicate, its argument tuples)`` in predicate order, empty predicates left out."""


class PlanView:
    """Successors over the true atoms of the game ``engine`` has loaded (see the module docstring).

    The engine must stay on that game while the view is used (command texts are derived through it) and its own
    state is never changed. Raises ``ValueError`` for a game whose command texts read changing facts (then the
    text of a command is not a function of the true atoms; ALFWorld's never do).
    """

    def __init__(self, engine: NativeEngine):
        game = engine._require()
        if game.options_cache is None:
            raise ValueError(
                f"{engine.game_file}: its command templates read facts that change, so commands are not a "
                "function of the true atoms; PlanView cannot list them"
            )
        self._engine = engine
        self._game = game
        self.grounder = grounder = game.grounder
        self.schema_names = [s.name for s in grounder.domain.schemas]
        self.names = {i: e.name for i, e in game.entities.items()}
        self.read = _read_predicates(game)
        self._indexes: dict[tuple, dict[tuple, list[tuple]]] = {}  # (pred, positions, atoms) -> index

    def on(self, engine: NativeEngine) -> bool:
        """Whether ``engine`` is still on this view's game (an engine's small game cache may have reloaded it)."""
        return engine is self._engine and engine._game is self._game

    # -- states ---------------------------------------------------------------------------------------------
    @staticmethod
    def atoms_of(snapshot: NativeSnapshot) -> Atoms:
        """The true atoms of an engine snapshot."""
        return tuple(sorted((p, f) for p, f in snapshot.true_atoms if f))

    def current(self) -> Atoms:
        """The true atoms of the engine's current state."""
        true = self._engine._true
        return tuple(sorted((p, true.frozen(p)) for p, rows in true.data.items() if rows))

    def key(self, atoms: Atoms) -> Atoms:
        """What decides the state's future: its atoms of the predicates something reads."""
        read = self.read
        return tuple([(p, f) for p, f in atoms if p in read])

    def tables(self, atoms: Atoms) -> Tables:
        """``atoms`` as the grounder's tables: read-only, their frozensets reused, and each predicate's join index
        shared with every other state that has the same atoms of it (a successor changes one or two)."""
        return _StateTables(atoms, self._indexes)

    # -- moves ----------------------------------------------------------------------------------------------
    @staticmethod
    def options_of(snapshot: NativeSnapshot) -> list[tuple[Op, str]]:
        """:meth:`options` of a snapshot's state, from what the engine worked out when it got there."""
        return _first_per_command(zip(snapshot.ops, snapshot.commands, strict=True))

    def options(self, tables: Tables, skip: frozenset[str] = frozenset()) -> list[tuple[Op, str]]:
        """The commands ``step()`` accepts in this state, each with the operator it runs (the engine's first of
        that text), in the engine's order; ``skip``: PDDL actions (lower case) left out, never listed."""
        engine, by_name = self._engine, self._game.command_of
        skipped = (
            frozenset(i for i, name in enumerate(self.schema_names) if name in skip) if skip else frozenset()
        )
        ops = self.grounder.applicable(tables, skipped)
        return _first_per_command((op, by_name.get(op[0]) or engine._command(op)) for op in ops)

    def apply(self, atoms: Atoms, tables: Tables, op: Op) -> Atoms:
        """The true atoms after ``op`` (applicable in the state ``atoms``, given also as its ``tables``)."""
        fire = [
            (atom, val)
            for atom, val, cond in self.grounder.effects(op, tables)
            if all((catom in tables) == (cval == 0) for catom, cval in cond)
        ]
        changed: dict[str, set[tuple]] = {}
        for atom, val in fire:
            pred = atom[0]
            rows = changed.get(pred)
            if rows is None:
                rows = changed[pred] = set(tables.data.get(pred, ()))
            if val == 0:
                rows.add(atom[1:])
            else:
                rows.discard(atom[1:])
        if not changed:
            return atoms
        data = dict(atoms)
        for pred, rows in changed.items():
            data[pred] = frozenset(rows)
        return tuple(sorted((p, f) for p, f in data.items() if f))

    def won(self, tables: Tables) -> bool:
        """Whether the goal holds in the state ``tables``."""
        return self._engine._won_in(tables)

    def schema(self, op: Op) -> str:
        """The PDDL action ``op`` instantiates (lower case, e.g. ``"gotolocation"``)."""
        return self.schema_names[op[1]]


def _first_per_command(pairs: Any) -> list[tuple[Op, str]]:
    """(operator, command) pairs in the engine's order -> the first operator of each command, in that order (the
    grounder's, which follows the game's sorted facts, not set iteration: the same in every process)."""
    seen: set[str] = set()
    out: list[tuple[Op, str]] = []
    for op, command in pairs:
        if command not in seen:
            seen.add(command)
            out.append((op, command))
    return out


_SHARED_INDEXES = 50_000  # join indexes a view keeps (then it starts over)


class _StateTables(Tables):
    """The tables of one search state: never changed, so an index on a predicate depends only on that
    predicate's atoms and is looked up in the view's shared ``indexes`` before being built."""

    __slots__ = ("_shared",)

    def __init__(self, atoms: Atoms, indexes: dict[tuple, dict[tuple, list[tuple]]]):
        super().__init__(dict(atoms))  # type: ignore[arg-type] - frozensets: read, never changed
        self._frozen = dict(atoms)
        self._shared = indexes

    def index(self, pred: str, positions: tuple[int, ...]) -> dict[tuple, list[tuple]]:
        ix = self._idx.get((pred, positions))
        if ix is None:
            rows = self._frozen.get(pred, frozenset())
            key = (pred, positions, rows)
            ix = self._shared.get(key)
            if ix is None:
                ix = {}
                for t in sorted(
                    rows
                ):  # the order Tables gives its engine state's index does not matter: sorted
                    ix.setdefault(tuple(t[j] for j in positions), []).append(t)
                if len(self._shared) >= _SHARED_INDEXES:
                    self._shared.clear()
                self._shared[key] = ix
            self._idx[(pred, positions)] = ix
        return ix

    def frozen(self, pred: str) -> frozenset[tuple]:
        return self._frozen.get(pred, frozenset())

    def add(self, pred: str, args: tuple) -> None:
        raise TypeError("a search state's tables are read-only")

    def discard(self, pred: str, args: tuple) -> None:
        raise TypeError("a search state's tables are read-only")


def _read_predicates(game: Any) -> frozenset[str]:
    """The fluent predicates a precondition, an effect condition or the goal reads (all fluents when the goal is
    a formula the grounder keeps as is)."""
    grounder = game.grounder
    fluents = grounder.fluents
    read: set[str] = set()
    for schema in grounder.domain.schemas:
        for _, lits in schema.disjuncts:
            read.update(lit[1] for lit in lits if lit[1] in fluents)
        for effect in schema.effects:
            read.update(lit[1] for lit in effect.condition if lit[1] in fluents)
    if isinstance(game.goal, list):
        for plan in game.goal:
            read |= plan.fluent_preds
    else:
        read |= fluents
    return frozenset(read)
