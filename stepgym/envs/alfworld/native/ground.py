# Over 400 lines: the grounding of a game's operators and their effects, one search.
"""Grounding of one ALFWorld game: which operators apply in a state, and what each one changes.

Built once per game from :mod:`stepgym.envs.alfworld.native.pddl` (see that module for the Fast Downward rules it
reproduces). Applicable operators are found by joining each precondition disjunct against the current atoms
(static predicates are indexed once; the few fluent ones are scanned). An operator's SAS effects do not depend on
the state, so they are computed the first time the operator is seen and cached.
"""

from __future__ import annotations

from collections import defaultdict, deque
from itertools import groupby
from operator import itemgetter
from typing import Any

from stepgym.envs.alfworld.native.pddl import Domain, Problem, atom_args
from stepgym.errors import CorruptDataError

# An operator: (name, schema index, binding of all parameters (incl. existential ones) by variable name).
Op = tuple[str, int, dict[str, str]]
# One reported SAS effect: (atom, value) with value 0 = the atom holds, 1 = it does not; and its condition.
SasEffect = tuple[tuple, int, tuple[tuple[tuple, int], ...]]


class Tables:
    """Atoms by predicate (``pred -> {args}``) with lazily built, incrementally kept indexes on bound positions,
    and each predicate's atoms as a frozenset (:meth:`frozen`, kept until the predicate changes)."""

    __slots__ = ("_frozen", "_idx", "data")

    def __init__(self, data: dict[str, set[tuple]] | None = None):
        self.data: dict[str, set[tuple]] = data if data is not None else {}
        self._idx: dict[tuple[str, tuple[int, ...]], dict[tuple, list[tuple]]] = {}
        self._frozen: dict[str, frozenset[tuple]] = {}

    def frozen(self, pred: str) -> frozenset[tuple]:
        f = self._frozen.get(pred)
        if f is None:
            f = self._frozen[pred] = frozenset(self.data.get(pred, ()))
        return f

    def index(self, pred: str, positions: tuple[int, ...]) -> dict[tuple, list[tuple]]:
        """The atoms of ``pred`` by their values at ``positions`` (built on first use, then kept up to date by
        :meth:`add` and :meth:`discard`)."""
        ix = self._idx.get((pred, positions))
        if ix is None:
            ix = {}
            for t in self.data.get(pred, ()):
                ix.setdefault(tuple(t[j] for j in positions), []).append(t)
            self._idx[(pred, positions)] = ix
        return ix

    def add(self, pred: str, args: tuple) -> None:
        table = self.data.setdefault(pred, set())
        if args in table:
            return
        table.add(args)
        self._frozen.pop(pred, None)
        for (p, positions), ix in self._idx.items():
            if p == pred:
                ix.setdefault(tuple(args[j] for j in positions), []).append(args)

    def discard(self, pred: str, args: tuple) -> None:
        table = self.data.get(pred)
        if not table or args not in table:
            return
        table.discard(args)
        self._frozen.pop(pred, None)
        for (p, positions), ix in self._idx.items():
            if p == pred:
                ix[tuple(args[j] for j in positions)].remove(args)

    def __contains__(self, atom: tuple) -> bool:
        return atom[1:] in self.data.get(atom[0], ())


class _Plan:
    """A join order for one conjunction of literals over some parameters."""

    def __init__(
        self,
        params: list[tuple[str, str]],
        literals: list[tuple],
        grounder: Grounder,
        prebound: tuple = (),
        op_name: tuple[str, list[str]] | None = None,
    ):
        self.params = params
        self.literals = literals
        steps: list[tuple] = []
        bound: set[str] = set(prebound)
        pos = [lit for lit in literals if not lit[0] and lit[1] != "="]
        rest = [lit for lit in literals if lit[0] or lit[1] == "="]

        def is_var(a: str) -> bool:
            return a.startswith("?")

        while pos:
            # the literal expected to match the fewest atoms (its table's size, shrunk by bound arguments)
            def cost(lit: tuple) -> tuple[bool, float]:
                n = len(lit[2]) or 1
                nb = sum(1 for a in lit[2] if not is_var(a) or a in bound)
                size = grounder.table_size(lit[1])
                if lit[1] in grounder.fluents:
                    size = max(size, 10)  # fluent tables grow while playing
                return (nb == 0 and bool(lit[2]), (size + 1) ** ((n - nb) / n))

            lit = min(pos, key=cost)
            pos.remove(lit)
            new = tuple(a for a in lit[2] if is_var(a) and a not in bound)
            positions = tuple(j for j, a in enumerate(lit[2]) if a not in new)
            bind = tuple((j, a) for j, a in enumerate(lit[2]) if a in new)
            steps.append(("match", lit[1], lit[2], new, positions, bind))
            bound.update(a for a in lit[2] if is_var(a))
            steps.extend(self._ready_checks(rest, bound))
        for name, typ in params:
            if name not in bound:
                steps.append(("enum", name, typ))
                bound.add(name)
                steps.extend(self._ready_checks(rest, bound))
        steps.extend(self._ready_checks(rest, bound))
        if rest:
            raise CorruptDataError(f"PDDL literals over unknown variables: {rest!r}")
        self.steps = steps
        self.types = dict(params)
        self.prebound = tuple(prebound)
        self.fluent_preds = frozenset(lit[1] for lit in literals if lit[1] in grounder.fluents)
        self._join: Any = None
        self.consts: tuple[str, ...] = ()
        # (action, its declared parameters): the join then yields (operator name, binding) pairs
        self.op_name = op_name

    def join(self) -> Any:
        """This plan as a Python function, generated once per join shape: plans that differ only in their
        constants and variable names (a goal names its game's types; its variables are renamed apart) share
        it. See :func:`_compile_join`."""
        if self._join is None:
            consts: list[str] = []
            canon: dict[str, str] = {}

            def var(a: str) -> str:
                if a not in canon:
                    canon[a] = f"?{len(canon)}"
                return canon[a]

            def shape(args: tuple) -> tuple:
                out: list[Any] = []
                for a in args:
                    if a.startswith("?"):
                        out.append(var(a))
                    else:  # a constant becomes (its index in consts,)
                        out.append((len(consts),))
                        consts.append(a)
                return tuple(out)

            prebound = tuple(var(a) for a in self.prebound)
            steps: list[tuple] = []
            for step in self.steps:
                if step[0] == "match":
                    _, pred, args, new, positions, bind = step
                    args = shape(args)
                    new = tuple(var(a) for a in new)
                    steps.append(("match", pred, args, new, positions, tuple((j, var(a)) for j, a in bind)))
                elif step[0] == "check":
                    negated, pred, args = step[1]
                    steps.append(("check", (negated, pred, shape(args))))
                else:
                    steps.append(("enum", var(step[1]), step[2]))
            types = {c: self.types.get(a, "object") for a, c in canon.items()}
            op_name = (
                None if self.op_name is None else (self.op_name[0], tuple(var(a) for a in self.op_name[1]))
            )
            key = (tuple(steps), tuple(types.items()), prebound, len(consts), self.fluent_preds, op_name)
            fn = _JOINS.get(key)
            if fn is None:
                fn = _JOINS[key] = _compile_join(
                    steps, types, prebound, len(consts), self.fluent_preds, op_name
                )
            self.consts = (*consts, *canon)  # the constants, then the variables' names in canonical order
            self._join = fn
        return self._join

    @staticmethod
    def _ready_checks(rest: list[tuple], bound: set[str]) -> list[tuple]:
        out = []
        for lit in list(rest):
            if all(not a.startswith("?") or a in bound for a in lit[2]):
                rest.remove(lit)
                out.append(("check", lit))
        return out


_PLANS: dict[int, tuple[Domain, list[list[_Plan]], list[list[Any]], list[tuple]]] = {}
_DEMAND_RULES: dict[int, tuple[Domain, dict]] = {}
_PLAN_MEMO_SIZE = 1 << 14  # action-disjunct results kept per game
_JOINS: dict[tuple, Any] = {}  # generated join functions by join order (shared by all games of a process)


def _compile_join(
    steps: list[tuple],
    types: dict[str, str],
    prebound: tuple[str, ...],
    n_consts: int,
    fluent_preds: frozenset[str],
    op_name: tuple[str, tuple[str, ...]] | None = None,
) -> Any:
    """Generate the nested loops of a join plan (see :meth:`_Plan.join`) as Python source and compile it.

    The join is the innermost loop of a step (every applicable operator, every goal check), and an interpreter
    over the plan's steps (a recursive call and a binding dict per candidate) cost most of it. The generated
    function walks the same candidates in the same order, with each variable in a local. Variables are named
    ``?0``, ``?1``… in ``steps`` and constants ``(i,)``; ``consts`` holds the constants, then the variables'
    real names (for the bindings returned)::

        def join(fl_index, fl_data, st_index, st_data, type_ok, by_type, out, limit, init, consts):
            ts_v1 = type_ok.get('location', EMPTY)
            ix0 = fl_index('atlocation', (0,))
            for t0 in ix0.get((v0,), ()):
                v1 = t0[1]
                if v1 not in ts_v1: continue
                ...
                out.append({**init, n0: v0, n1: v1})

    ``fl_*`` are the fluent atoms of the state (:class:`Tables`), ``st_*`` the game's static ones (their indexes
    by bound positions are fetched once per call), ``init`` the
    pre-bound variables; at most ``limit`` bindings are collected when it is positive. With ``op_name`` (an
    action and its declared parameters) each binding comes with its operator's name, ``"action obj obj"``.
    """
    src = _JoinSource(types, n_consts, fluent_preds)
    for var in prebound:
        name = src.real(var)
        src.head.append(f"    {src.local(var)} = init.get({name}, {name})")
    for i, step in enumerate(steps):
        if step[0] == "check":
            src.check(i, *step[1])
        elif step[0] == "enum":
            src.enum(step[1], step[2])
        else:
            src.match(i, step[1], step[2], step[4], step[5])
    source = src.finish(prebound, op_name)
    try:
        code = compile(source, "<stepgym join>", "exec")
    except SyntaxError as exc:  # Python allows 20 nested loops; ALFWorld's joins have at most 8
        raise CorruptDataError(f"a PDDL condition is too deeply nested to join ({exc.msg})") from exc
    namespace: dict[str, Any] = {"EMPTY": frozenset()}
    exec(code, namespace)
    return namespace["join"]


class _JoinSource:
    """The source of one generated join (see :func:`_compile_join`), written one plan step at a time: ``head``
    holds what is looked up once per call (indexes, tables, constants, type sets), ``body`` the nested loops;
    ``names`` maps each variable (``?k``) to the local holding its value."""

    def __init__(self, types: dict[str, str], n_consts: int, fluent_preds: frozenset[str]) -> None:
        self.types, self.n_consts, self.fluent_preds = types, n_consts, fluent_preds
        self.names: dict[str, str] = {}
        self.consts: set[str] = set()
        self.head: list[str] = []
        self.body: list[str] = []
        self.depth = 1

    def emit(self, line: str) -> None:
        self.body.append("    " * self.depth + line)

    def local(self, var: str) -> str:
        self.names[var] = f"v{len(self.names)}"
        return self.names[var]

    def value(self, arg: str | tuple) -> str:
        """The expression for an argument: a bound variable's local, or a constant (``(i,)``) read once."""
        if isinstance(arg, tuple):
            if f"c{arg[0]}" not in self.consts:
                self.consts.add(f"c{arg[0]}")
                self.head.append(f"    c{arg[0]} = consts[{arg[0]}]")
            return f"c{arg[0]}"
        return self.names[arg]

    @staticmethod
    def tup(items: list[str]) -> str:
        return "(" + "".join(f"{x}, " for x in items) + ")"

    def real(self, var: str) -> str:
        """The local holding the variable's real name (the key of the bindings returned)."""
        k = int(var[1:])
        self.head.append(f"    n{k} = consts[{self.n_consts + k}]")
        return f"n{k}"

    def check(self, i: int, negated: bool, pred: str, args: tuple) -> None:
        """A literal whose arguments are all bound: skip the candidate (or return, outside any loop) unless it holds."""
        fail = "continue" if self.depth > 1 else "return"
        if pred == "=":
            test = f"({self.value(args[0])} == {self.value(args[1])})"
        else:
            table = f"tab{i}"
            source = "fl_data" if pred in self.fluent_preds else "st_data"
            self.head.append(f"    {table} = {source}.get({pred!r}, ())")
            test = f"({self.tup([self.value(a) for a in args])} in {table})"
        self.emit(f"if {test}: {fail}" if negated else f"if not {test}: {fail}")

    def enum(self, var: str, typ: str) -> None:
        """A variable no literal binds: a loop over the objects of its type."""
        self.emit(f"for {self.local(var)} in by_type.get({typ!r}, ()):")
        self.depth += 1

    def match(self, i: int, pred: str, args: tuple, positions: tuple, bind: tuple) -> None:
        """A loop over the atoms of ``pred`` agreeing with the bound ``positions``, binding the others (``bind``:
        (position, variable)), each checked against its variable's type."""
        if pred in self.fluent_preds and not positions:
            self.emit(f"for t{i} in fl_data.get({pred!r}, ()):")
        else:
            index = "fl_index" if pred in self.fluent_preds else "st_index"
            self.head.append(f"    ix{i} = {index}({pred!r}, {positions!r})")
            self.emit(f"for t{i} in ix{i}.get({self.tup([self.value(args[j]) for j in positions])}, ()):")
        self.depth += 1
        for j, var in bind:
            if var in self.names:  # the variable occurs twice in this literal
                self.emit(f"if t{i}[{j}] != {self.names[var]}: continue")
                continue
            v = self.local(var)
            self.head.append(f"    ts_{v} = type_ok.get({self.types.get(var, 'object')!r}, EMPTY)")
            self.emit(f"{v} = t{i}[{j}]")
            self.emit(f"if {v} not in ts_{v}: continue")

    def finish(self, prebound: tuple[str, ...], op_name: tuple[str, tuple[str, ...]] | None) -> str:
        """The innermost statement (collect the binding, with the operator's name for an action; stop at
        ``limit``) and the whole function's source."""
        fields = "".join(
            f"{self.real(var) if var not in prebound else 'n' + var[1:]}: {v}, "
            for var, v in self.names.items()
        )
        binding = f"{{**init, {fields}}}"
        if op_name is None:
            self.emit(f"out.append({binding})")
        else:
            self.head.append(f"    op = {op_name[0]!r}")
            args = " ".join("{" + self.names[v] + "}" for v in op_name[1])
            self.emit(f'out.append((f"{{op}} {args}", {binding}))')
        self.emit("if limit and len(out) >= limit: return")
        signature = (
            "def join(fl_index, fl_data, st_index, st_data, type_ok, by_type, out, limit, init, consts):"
        )
        return "\n".join([signature, *self.head, *self.body])


def _grouped(atoms: list[tuple], positions: tuple[int, ...]) -> dict[tuple, list[tuple]]:
    """``atoms`` by their values at ``positions``, each group in the order of ``atoms`` (a stable sort by the key
    makes the groups runs; a new game builds several of these indexes in its first reset)."""
    if not positions:
        return {(): atoms} if atoms else {}
    if len(positions) == 1:
        at = positions[0]
        return {(k,): list(run) for k, run in groupby(sorted(atoms, key=itemgetter(at)), itemgetter(at))}
    key = itemgetter(*positions)
    return {k: list(run) for k, run in groupby(sorted(atoms, key=key), key)}


class Grounder:
    """The compiled game: objects, static facts, join plans, reachable atoms and SAS effects of operators."""

    def __init__(self, domain: Domain, problem: Problem):
        self.domain = domain
        self.objects = problem.objects
        self.fluents = fluents = domain.fluents
        self.init = set(problem.init)
        # Objects by type, in the problem's order. Objects and atoms come in runs of one type or predicate, so each
        # run is added in one call (a new game's reset builds these; fewer Python-level steps per atom).
        subtypes = {t: domain.subtypes(t) for t in set(domain.types) | set(problem.objects.values())}
        self._by_type: dict[str, list[str]] = defaultdict(list)
        for typ, run in groupby(problem.objects.items(), itemgetter(1)):
            names = list(map(itemgetter(0), run))
            for t, subs in subtypes.items():
                if typ in subs:
                    self._by_type[t] += names
        self._type_ok: dict[str, frozenset[str]] = {t: frozenset(o) for t, o in self._by_type.items()}
        # The init atoms by predicate: the static ones (indexed for joins) and the fluent ones (the initial state).
        self.static: dict[str, set[tuple]] = defaultdict(set)
        self.initial: dict[str, set[tuple]] = defaultdict(set)
        # rough table sizes for join orders (a fluent atom listed twice counts twice)
        sizes: dict[str, int] = {}
        for pred, run in groupby(problem.init, itemgetter(0)):
            if pred in fluents:
                atoms = list(run)
                self.initial[pred].update(map(atom_args, atoms))
                sizes[pred] = sizes.get(pred, 0) + len(atoms)
            else:
                self.static[pred].update(map(atom_args, run))
        self._sizes = {p: len(ts) for p, ts in self.static.items()} | sizes
        self._index: dict[tuple[str, tuple[int, ...]], dict[tuple, list[tuple]]] = {}
        # Join orders depend only on the domain and rough table sizes: the first game's are kept for all.
        cached = _PLANS.get(id(domain))
        if cached is None or cached[0] is not domain:
            plans = [
                [
                    _Plan(s.params + extra, lits, self, op_name=(s.name, [p for p, _ in s.params]))
                    for extra, lits in s.disjuncts
                ]
                for s in domain.schemas
            ]
            probes = self._change_probes()
            action_plans = [  # (schema, disjunct, plan, noop probe, the fluent predicates it reads)
                (si, di, plan, probes[si][di], sorted(plan.fluent_preds))
                for si, row in enumerate(plans)
                for di, plan in enumerate(row)
            ]
            cached = _PLANS[id(domain)] = (domain, plans, probes, action_plans)
        self.plans: list[list[_Plan]] = cached[1]
        self._probes: list[list[Any]] = cached[2]
        self._action_plans: list[tuple] = cached[3]
        self._plan_memo: dict[tuple, list[Op]] = {}
        self._reachable_by_cone: dict[frozenset[str] | None, set[tuple]] = {}
        self._reach_memo: dict[tuple, bool] = {}
        self._effects: dict[str, tuple[SasEffect, ...]] = {}

    def clear_state_cache(self) -> None:
        """Forget the operators kept per content of the fluent predicates (see :meth:`applicable`)."""
        self._plan_memo.clear()

    def table_size(self, pred: str) -> int:
        return self._sizes.get(pred, 0)

    def objects_of(self, typ: str) -> frozenset[str]:
        return self._type_ok.get(typ, frozenset())

    # -- joins ----------------------------------------------------------------------------------------------
    def _static_index(self, pred: str, positions: tuple[int, ...]) -> dict[tuple, list[tuple]]:
        """The static atoms of ``pred`` by their values at ``positions``, each group in sorted order."""
        idx = self._index.get((pred, positions))
        if idx is None:
            idx = self._index[(pred, positions)] = _grouped(sorted(self.static.get(pred, ())), positions)
        return idx

    def assignments(
        self, plan: _Plan, facts: Tables, b: dict[str, str] | None = None, limit: int = 0
    ) -> list[Any]:
        """The bindings of ``plan``'s parameters satisfying its literals in ``facts`` (the fluent atoms); at most
        ``limit`` of them when it is positive. An action's plan (``op_name``) gives ``(operator name, binding)``
        pairs."""
        out: list[Any] = []
        join = plan.join()
        join(
            facts.index,
            facts.data,
            self._static_index,
            self.static,
            self._type_ok,
            self._by_type,
            out,
            limit,
            b or {},
            plan.consts,
        )
        return out

    # -- operators ------------------------------------------------------------------------------------------
    def applicable(self, facts: Tables, skip: frozenset[int] = frozenset()) -> list[Op]:
        """Applicable operators, one per operator name (the first disjunct that applies), noops left out;
        ``skip``: schema indices whose operators are not wanted (a planner's pruned actions).

        What one action disjunct yields depends only on the atoms of the fluent predicates its precondition
        reads, and most steps change few of them (taking an object leaves where one can go unchanged), so each
        disjunct's operators are kept per content of those predicates (``_plan_memo``, per game).
        """
        out: list[Op] = []
        seen: set[str] = set()
        memo = self._plan_memo
        if len(memo) > _PLAN_MEMO_SIZE:
            memo.clear()
        for k, (si, di, plan, probe, reads) in enumerate(self._action_plans):
            if si in skip:
                continue
            key = (k, *[facts.frozen(p) for p in reads])
            ops = memo.get(key)
            if ops is None:
                ops = memo[key] = self._plan_ops(si, di, plan, probe, facts)
            for op in ops:
                if op[0] not in seen:
                    seen.add(op[0])
                    out.append(op)
        return out

    def _plan_ops(self, si: int, di: int, plan: _Plan, probe: Any, facts: Tables) -> list[Op]:
        """The operators of one action disjunct in ``facts``, noops left out, in the join's order."""
        out: list[Op] = []
        for name, b in self.assignments(
            plan, facts
        ):  # an action's plan yields (operator name, binding) pairs
            op = (name, si, b, di)
            if probe is True or self._changes_something(op, probe, facts):
                out.append(op)
        return out

    def _change_probes(self) -> list[list[Any]]:
        """Per schema disjunct, what tells cheaply that an operator is not a noop (FD drops noops).

        An unconditional add effect survives FD's pruning unless the precondition requires its atom (the last
        fluent literal on that atom is positive). So an operator with an add whose predicate no positive fluent
        precondition has is never a noop (``True``); otherwise the probe lists, per add, the argument pairs to
        compare with each precondition literal that could be the same atom, last literal first. Only when
        every add is required are the operator's full SAS effects (and their reachability analysis) needed to
        decide; for the operators applied, they are computed when applied.
        """
        probes: list[list[Any]] = []
        for schema in self.domain.schemas:
            adds = [(e.pred, e.args) for e in schema.effects if not e.negated and not e.condition]
            row: list[Any] = []
            for _, lits in schema.disjuncts:
                pre = [(neg, p, a) for neg, p, a in lits if p != "=" and p in self.fluents]
                required = {p for neg, p, _ in pre if not neg}
                if any(p not in required for p, _ in adds):
                    row.append(True)
                    continue
                row.append(
                    [
                        [
                            (neg, [(x, y) for x, y in zip(args, pre_args, strict=True) if x != y])
                            for neg, p, pre_args in reversed(pre)
                            if p == pred and len(pre_args) == len(args)
                        ]
                        for pred, args in adds
                    ]
                )
            probes.append(row)
        return probes

    def _changes_something(self, op: Op, probe: list, state: Tables) -> bool:
        """Whether ``op`` has an SAS effect (see :meth:`_change_probes`); exact."""
        b = op[2]
        for candidates in probe:
            for negated, pairs in candidates:
                if all(b.get(x, x) == b.get(y, y) for x, y in pairs):  # the same atom
                    if negated:
                        return True
                    break
            else:
                return True
        return bool(self.effects(op, state))

    def relaxed_rules(self) -> list[tuple[list[tuple[str, str]], list[tuple], list[tuple[str, tuple]]]]:
        """FD's relaxed rules: (parameters, positive body literals, added atoms); one per schema disjunct and
        add-effect condition."""
        rules = []
        for schema in self.domain.schemas:
            for extra, lits in schema.disjuncts:
                pos = [lit for lit in lits if not lit[0]]
                by_cond: dict[tuple, list] = {}
                for eff in schema.effects:
                    if not eff.negated:
                        cond = tuple(lit for lit in eff.condition if not lit[0])
                        by_cond.setdefault(cond, []).append((eff.pred, eff.args))
                for cond, heads in by_cond.items():
                    rules.append((schema.params + extra, pos + list(cond), heads))
        return rules

    def reachable(self, pred: str | None = None) -> set[tuple]:
        """FD's relaxed exploration: atoms reachable ignoring negative literals and deletes.

        With ``pred``, only the rules ``pred`` depends on are explored (its atoms come out exact; others may be
        missing); results are cached per dependency cone.
        """
        cone = self._cone(pred) if pred is not None else None
        if cone not in self._reachable_by_cone:
            self._explore(cone, Tables())
        return self._reachable_by_cone[cone]

    def reaches(self, atom: tuple, state: Tables) -> bool:
        """Whether ``atom`` is relaxed-reachable (FD's exploration: negative literals and deletes ignored), given
        that the atoms of ``state`` are (any state reached by playing is).

        Answered on demand instead of by exploring everything: the atoms a derivation of ``atom`` could use are
        collected backwards (each rule producing a wanted atom, its static literals joined, its other
        parameters enumerated by type, its fluent body atoms wanted in turn), breadth first, while the rule
        instances met are propagated forwards with a count of missing body atoms per instance. It stops as soon
        as ``atom`` is derived; otherwise every instance that could derive it has been met, so it is not
        reachable. Same answer as :meth:`reachable` (tested), cached per atom.
        """
        hit = self._reach_memo.get(atom)
        if hit is None:
            hit = self._reach_memo[atom] = self._derive_on_demand(atom, state)
        return hit

    def _derive_on_demand(self, goal: tuple, state: Tables) -> bool:
        init = self.init
        if goal in init or goal in state:
            return True
        rules = self._demand_rules()
        none = Tables()
        derived: set[tuple] = set()
        wanted = {goal}
        queue = deque([goal])
        waiting: dict[tuple, list[int]] = defaultdict(list)  # body atom -> instances missing it
        missing_count: list[int] = []
        heads: list[tuple] = []

        def derive(atom: tuple) -> bool:
            """Mark ``atom`` derived and propagate; True once the goal is."""
            stack = [atom]
            while stack:
                a = stack.pop()
                if a in derived:
                    continue
                if a == goal:
                    return True
                derived.add(a)
                for k in waiting.pop(a, ()):
                    missing_count[k] -= 1
                    if missing_count[k] == 0:
                        stack.append(heads[k])
            return False

        while queue:
            atom = queue.popleft()
            if atom in derived:
                continue
            for head_args, plan, body in rules.get(atom[0], ()):
                b0 = self._bind(head_args, atom[1:], plan.types)
                if b0 is None:
                    continue
                for b in self.assignments(plan, none, b0):
                    needs = {(p, *[b.get(a, a) for a in args]) for p, args in body}
                    missing = [x for x in needs if x not in derived and x not in init and x not in state]
                    if not missing:
                        if derive(atom):
                            return True
                        break
                    k = len(heads)
                    heads.append(atom)
                    missing_count.append(len(missing))
                    for x in missing:
                        waiting[x].append(k)
                        if x not in wanted:
                            wanted.add(x)
                            queue.append(x)
                if atom in derived:
                    break
        return False

    def _demand_rules(self) -> dict[str, list[tuple[tuple, _Plan, list[tuple[str, tuple]]]]]:
        """The relaxed rules by head predicate: (head arguments, join plan of the static body literals with
        the head's variables bound, fluent body literals)."""
        cached = _DEMAND_RULES.get(id(self.domain))
        if cached is None or cached[0] is not self.domain:
            rules: dict[str, list] = defaultdict(list)
            for params, body, heads in self.relaxed_rules():
                static = [lit for lit in body if lit[1] not in self.fluents]
                fluent = [(lit[1], lit[2]) for lit in body if lit[1] in self.fluents]
                for pred, args in heads:
                    bound = tuple(dict.fromkeys(a for a in args if a.startswith("?")))
                    rules[pred].append((args, _Plan(params, static, self, bound), fluent))
            cached = _DEMAND_RULES[id(self.domain)] = (self.domain, dict(rules))
        return cached[1]

    def _explore(self, cone: frozenset[str] | None, facts: Tables) -> None:
        """Semi-naive relaxed exploration of the rules producing ``cone`` from ``facts`` and the initial state;
        the fixpoint is cached for ``cone``."""
        for atom in self.init:
            if atom[0] in self.fluents:
                facts.add(atom[0], atom[1:])
        rules = []  # (params by name, body, heads, [(delta literal, plan of the rest)])
        for params, body, heads in self.relaxed_rules():
            heads = [h for h in heads if cone is None or h[0] in cone]
            if not heads:
                continue
            deltas = []
            for i, lit in enumerate(body):
                if lit[1] in self.fluents:
                    vars_ = tuple(a for a in lit[2] if a.startswith("?"))
                    deltas.append((lit, _Plan(params, body[:i] + body[i + 1 :], self, vars_)))
            rules.append((dict(params), _Plan(params, body, self), heads, deltas))
        delta: dict[str, set[tuple]] = defaultdict(set)
        for _, plan, heads, _ in rules:
            for b in self.assignments(plan, facts):
                for pred, args in heads:
                    delta[pred].add(tuple(b.get(a, a) for a in args))
        while True:
            fresh: dict[str, set[tuple]] = {p: ts - facts.data.get(p, set()) for p, ts in delta.items()}
            fresh = {p: ts for p, ts in fresh.items() if ts}
            if not fresh:
                break
            for pred, ts in fresh.items():
                for t in ts:
                    facts.add(pred, t)
            delta = defaultdict(set)
            for types, _, heads, deltas in rules:
                for lit, plan in deltas:
                    for t in fresh.get(lit[1], ()):
                        b = self._bind(lit[2], t, types)
                        if b is None:
                            continue
                        for full in self.assignments(plan, facts, b):
                            for pred, args in heads:
                                delta[pred].add(tuple(full.get(a, a) for a in args))
        self._reachable_by_cone[cone] = {(p, *a) for p, ts in facts.data.items() for a in ts} | self.init

    def _cone(self, pred: str) -> frozenset[str]:
        """``pred`` and every fluent predicate in the body of a rule producing one already in the set."""
        cone = {pred}
        changed = True
        while changed:
            changed = False
            for schema in self.domain.schemas:
                if not any(not e.negated and e.pred in cone for e in schema.effects):
                    continue
                for _, lits in schema.disjuncts:
                    conds = [
                        lit for e in schema.effects if not e.negated and e.pred in cone for lit in e.condition
                    ]
                    for negated, p, _ in lits + conds:
                        if not negated and p in self.fluents and p not in cone:
                            cone.add(p)
                            changed = True
        return frozenset(cone)

    def _bind(self, args: tuple, values: tuple, types: dict[str, str]) -> dict[str, str] | None:
        if len(args) != len(values):
            return None
        b: dict[str, str] = {}
        for a, v in zip(args, values, strict=True):
            if not a.startswith("?"):
                if a != v:
                    return None
            elif b.setdefault(a, v) != v or v not in self._type_ok.get(types.get(a, "object"), ()):
                return None
        return b

    def effects(self, op: Op, state: Tables) -> tuple[SasEffect, ...]:
        """The SAS effects of ``op`` in FD's canonical order (cached: they do not depend on the state)."""
        name = op[0]
        cached = self._effects.get(name)
        if cached is None:
            cached = self._effects[name] = self._sas_effects(op, state)
        return cached

    def _sas_effects(self, op: Op, state: Tables) -> tuple[SasEffect, ...]:
        schema = self.domain.schemas[op[1]]
        if any(e.condition for e in schema.effects):
            return self._sas_effects_general(op, state)
        return self._sas_effects_unconditional(op, state)

    def _sas_effects_unconditional(self, op: Op, state: Tables) -> tuple[SasEffect, ...]:
        """:meth:`_sas_effects_general` for an action without conditional effects (all of ALFWorld's), where
        its rules reduce to: an add survives unless the precondition requires its atom; a delete survives if its
        atom is reachable, not also added, and not already required false."""
        _, si, b, di = op
        schema = self.domain.schemas[si]
        pre: dict[tuple, int] = {}
        for negated, pred, args in schema.disjuncts[di][1]:
            if pred != "=" and pred in self.fluents:
                pre[(pred, *[b.get(a, a) for a in args])] = 1 if negated else 0
        added = {(e.pred, *[b.get(a, a) for a in e.args]) for e in schema.effects if not e.negated}
        out = {(atom, 0, ()) for atom in added if pre.get(atom, -1) != 0}
        reach = _Reach(self, state, added)
        for e in schema.effects:
            if e.negated:
                atom = (e.pred, *[b.get(a, a) for a in e.args])
                if atom not in added and pre.get(atom, -1) != 1 and atom in reach:
                    out.add((atom, 1, ()))
        return tuple(sorted(out))

    def _sas_effects_general(self, op: Op, state: Tables) -> tuple[SasEffect, ...]:
        """FD's ``translate_strips_operator`` for one operator: its effects with their conditions, deletes
        guarded by "no add of the same atom fires", then what the precondition already fixes dropped."""
        _, si, b, di = op
        schema = self.domain.schemas[si]

        def inst(args: tuple) -> tuple:
            return tuple(b.get(a, a) for a in args)

        # The op applies now, so the relaxed exploration reaches it and every atom it adds under a condition
        # whose positive literals hold now; those need no exploration.
        known = set()
        for eff in schema.effects:
            if not eff.negated and all(
                neg or p == "=" or (p, *inst(a)) in state or (p, *inst(a)) in self.init
                for neg, p, a in eff.condition
            ):
                known.add((eff.pred, *inst(eff.args)))
        reach = _Reach(self, state, known)
        # SAS preconditions hold the fluent literals on reachable atoms. A positive one holds now (reachable); a
        # negative one on an unreachable atom gives the same effects whether kept or not (the atom can only
        # appear through this op's own add effects, which its reachability would then contradict), so all kept.
        pre: dict[tuple, int] = {}
        for negated, pred, args in schema.disjuncts[di][1]:
            if pred != "=" and pred in self.fluents:
                pre[(pred, *inst(args))] = 1 if negated else 0
        adds: list[tuple[tuple, frozenset]] = []
        dels: list[tuple[tuple, frozenset]] = []
        for eff in schema.effects:
            cond = self._condition(eff.condition, inst, reach)
            if cond is None:
                continue
            atom = (eff.pred, *inst(eff.args))
            if not eff.negated:
                adds.append((atom, cond))
            elif atom in reach:
                dels.append((atom, cond))
        return _sas_output(_conditions_by_value(adds, [d for d in dels if d not in adds]), pre)

    def _condition(self, lits: list[tuple], inst: Any, reach: _Reach) -> frozenset | None:
        """An effect condition as {atom: value}, static parts evaluated; None if it can never hold."""
        out: dict[tuple, int] = {}
        for negated, pred, args in lits:
            vals = inst(args)
            if pred == "=":
                if (vals[0] == vals[1]) == negated:
                    return None
                continue
            atom = (pred, *vals)
            if pred in self.fluents and atom in reach:
                val = 1 if negated else 0
                if out.setdefault(atom, val) != val:
                    return None
            elif (atom in self.init) != negated:
                continue
            else:
                return None
        return frozenset(out.items())


class _Reach:
    """Membership in the relaxed-reachable atoms, answered without the exploration when it can be: atoms of the
    initial state or of the current (reachable) state are reachable; otherwise the exploration starts from
    them and stops once the atom is found."""

    def __init__(self, grounder: Grounder, state: Tables, known: set[tuple]):
        self.grounder, self.state, self.known = grounder, state, known

    def __contains__(self, atom: tuple) -> bool:
        g = self.grounder
        if atom in g.init or atom in self.state or atom in self.known:
            return True
        return g.reaches(atom, self.state)


def _conditions_by_value(
    adds: list[tuple[tuple, frozenset]], dels: list[tuple[tuple, frozenset]]
) -> dict[tuple, dict[int, list[dict]]]:
    """Per atom and new value (0 added, 1 deleted), the conditions under which the operator sets it: an add's
    own condition; a delete's condition with the atom true and no add of the same atom firing ("add wins")."""
    by_var: dict[tuple, dict[int, list[dict]]] = {}
    add_conds: dict[tuple, list[dict]] = defaultdict(list)
    for atom, cond in adds:
        c = dict(cond)
        by_var.setdefault(atom, {}).setdefault(0, []).append(c)
        add_conds[atom].append(c)
    for atom, cond in dels:
        no_add = _negate_dnf(add_conds[atom])
        if no_add is None:
            continue
        c = dict(cond)
        if c.get(atom, 0) != 0:
            continue
        c[atom] = 0
        for extra in no_add:
            merged = dict(c)
            if all(merged.setdefault(v, val) == val for v, val in extra.items()):
                by_var.setdefault(atom, {}).setdefault(1, []).append(merged)
    return by_var


def _sas_output(by_var: dict[tuple, dict[int, list[dict]]], pre: dict[tuple, int]) -> tuple[SasEffect, ...]:
    """The SAS effects of :func:`_conditions_by_value` in FD's canonical order. An effect setting the value the
    precondition ``pre`` already fixes is dropped; when the operator never sets the atom's other value, a
    condition that the atom has that other value is dropped (with the new value already there the effect changes
    nothing); condition parts ``pre`` fixes are left out, and a condition contradicting ``pre`` drops its effect."""
    out: set[SasEffect] = set()
    for atom, posts in by_var.items():
        orig_pre = pre.get(atom, -1)
        for post, conds in posts.items():
            if orig_pre == post:
                continue
            lists = [sorted(c.items()) for c in conds]
            if (1 - post) not in posts and lists != [[]]:
                dual = (atom, 1 - post)
                for lst in lists:
                    while dual in lst:
                        lst.remove(dual)
                    if not lst:
                        lists = [[]]
                        break
            for lst in lists:
                filtered = []
                contradicts = False
                for var, val in lst:
                    if var in pre:
                        if pre[var] != val:
                            contradicts = True
                            break
                    else:
                        filtered.append((var, val))
                if not contradicts:
                    out.add((atom, post, tuple(filtered)))
    return tuple(sorted(out, key=lambda e: (e[0], e[1], e[2])))


def _negate_dnf(conds: list[dict]) -> list[dict] | None:
    """¬(c1 ∨ c2 ∨ …) as a list of consistent conjunctions; None when some ci is empty (always true)."""
    out: list[dict] = [{}]
    for c in conds:
        if not c:
            return None
        nxt = []
        for partial in out:
            for var, val in c.items():
                if partial.get(var, 1 - val) == 1 - val:
                    nxt.append({**partial, var: 1 - val})
        out = nxt
    return out
