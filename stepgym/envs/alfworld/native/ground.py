"""Grounding of one ALFWorld game: which operators apply in a state, and what each one changes.

Built once per game from :mod:`stepgym.envs.alfworld.native.pddl` (see that module for the Fast Downward rules it
reproduces). Applicable operators are found by joining each precondition disjunct against the current atoms
(static predicates are indexed once; the few fluent ones are scanned). An operator's SAS effects do not depend on
the state, so they are computed the first time the operator is seen and cached.
"""

from __future__ import annotations

from collections import defaultdict
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
    """Atoms by predicate (``pred -> {args}``) with lazily built, incrementally kept indexes on bound positions."""

    __slots__ = ("_idx", "data")

    def __init__(self, data: dict[str, set[tuple]] | None = None):
        self.data: dict[str, set[tuple]] = data if data is not None else {}
        self._idx: dict[tuple[str, tuple[int, ...]], dict[tuple, list[tuple]]] = {}

    def lookup(self, pred: str, positions: tuple[int, ...], key: tuple) -> Any:
        if not positions:
            return self.data.get(pred, ())
        ix = self._idx.get((pred, positions))
        if ix is None:
            ix = {}
            for t in self.data.get(pred, ()):
                ix.setdefault(tuple(t[j] for j in positions), []).append(t)
            self._idx[(pred, positions)] = ix
        return ix.get(key, ())

    def add(self, pred: str, args: tuple) -> None:
        table = self.data.setdefault(pred, set())
        if args in table:
            return
        table.add(args)
        for (p, positions), ix in self._idx.items():
            if p == pred:
                ix.setdefault(tuple(args[j] for j in positions), []).append(args)

    def discard(self, pred: str, args: tuple) -> None:
        table = self.data.get(pred)
        if not table or args not in table:
            return
        table.discard(args)
        for (p, positions), ix in self._idx.items():
            if p == pred:
                ix[tuple(args[j] for j in positions)].remove(args)

    def __contains__(self, atom: tuple) -> bool:
        return atom[1:] in self.data.get(atom[0], ())


class _Plan:
    """A join order for one conjunction of literals over some parameters."""

    def __init__(
        self, params: list[tuple[str, str]], literals: list[tuple], grounder: Grounder, prebound: tuple = ()
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

    @staticmethod
    def _ready_checks(rest: list[tuple], bound: set[str]) -> list[tuple]:
        out = []
        for lit in list(rest):
            if all(not a.startswith("?") or a in bound for a in lit[2]):
                rest.remove(lit)
                out.append(("check", lit))
        return out


_PLANS: dict[int, tuple[Domain, list[list[_Plan]]]] = {}


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
        sizes: dict[
            str, int
        ] = {}  # rough table sizes for join orders (a fluent atom listed twice counts twice)
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
                [_Plan(s.params + extra, lits, self) for extra, lits in s.disjuncts] for s in domain.schemas
            ]
            cached = _PLANS[id(domain)] = (domain, plans)
        self.plans: list[list[_Plan]] = cached[1]
        self._reachable_by_cone: dict[frozenset[str] | None, set[tuple]] = {}
        self._effects: dict[str, tuple[SasEffect, ...]] = {}

    def table_size(self, pred: str) -> int:
        return self._sizes.get(pred, 0)

    def objects_of(self, typ: str) -> frozenset[str]:
        return self._type_ok.get(typ, frozenset())

    # -- joins ----------------------------------------------------------------------------------------------
    def _lookup(self, pred: str, positions: tuple[int, ...], key: tuple) -> list[tuple]:
        idx = self._index.get((pred, positions))
        if idx is None:
            idx = self._index[(pred, positions)] = _grouped(sorted(self.static.get(pred, ())), positions)
        return idx.get(key, [])

    def _holds(self, lit: tuple, b: dict[str, str], facts: Tables) -> bool:
        negated, pred, args = lit
        vals = tuple(b.get(a, a) for a in args)
        if pred == "=":
            return (vals[0] == vals[1]) != negated
        table = facts.data.get(pred, ()) if pred in self.fluents else self.static.get(pred, ())
        return (vals in table) != negated

    def assignments(
        self, plan: _Plan, facts: Tables, b: dict[str, str] | None = None, limit: int = 0
    ) -> list[dict]:
        """The bindings of ``plan``'s parameters satisfying its literals in ``facts`` (the fluent atoms); at most
        ``limit`` of them when it is positive."""
        out: list[dict] = []
        self._collect(plan, 0, dict(b or {}), facts, out, limit)
        return out

    def _collect(
        self, plan: _Plan, i: int, b: dict[str, str], facts: Tables, out: list[dict], limit: int
    ) -> bool:
        """Depth-first join; appends complete bindings to ``out``; True once ``limit`` is reached."""
        steps = plan.steps
        if i == len(steps):
            out.append(dict(b))
            return 0 < limit <= len(out)
        step = steps[i]
        kind = step[0]
        if kind == "check":
            return self._holds(step[1], b, facts) and self._collect(plan, i + 1, b, facts, out, limit)
        if kind == "enum":
            name = step[1]
            for obj in self._by_type.get(step[2], ()):
                b[name] = obj
                if self._collect(plan, i + 1, b, facts, out, limit):
                    return True
            b.pop(name, None)
            return False
        _, pred, args, new, positions, bind = step
        key = tuple([b.get(args[j], args[j]) for j in positions])
        cands = (
            facts.lookup(pred, positions, key) if pred in self.fluents else self._lookup(pred, positions, key)
        )
        if not cands:
            return False
        type_ok = self._type_ok
        types = plan.types
        for t in cands:
            ok = True
            for j, a in bind:
                cur = b.get(a)
                if cur is None:
                    if t[j] not in type_ok.get(types.get(a, "object"), ()):
                        ok = False
                        break
                    b[a] = t[j]
                elif cur != t[j]:
                    ok = False
                    break
            if ok and self._collect(plan, i + 1, b, facts, out, limit):
                return True
            for a in new:
                b.pop(a, None)
        return False

    # -- operators ------------------------------------------------------------------------------------------
    def applicable(self, facts: Tables) -> list[Op]:
        """Applicable operators, one per operator name (the first disjunct that applies), noops left out."""
        out: list[Op] = []
        seen: set[str] = set()
        for si, schema in enumerate(self.domain.schemas):
            n_ext = len(schema.params)
            for di, plan in enumerate(self.plans[si]):
                for b in self.assignments(plan, facts):
                    name = " ".join([schema.name, *(b[p] for p, _ in schema.params[:n_ext])])
                    if name in seen:
                        continue
                    op = (name, si, dict(b), di)
                    if not self.effects(op, facts):
                        continue
                    seen.add(name)
                    out.append(op)
        return out

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
        """Whether ``atom`` is relaxed-reachable, given that the atoms of ``state`` are (any state reached by
        playing). The exploration starts from them and the initial state, and stops as soon as ``atom`` is
        added; the least fixpoint is the same as from the initial state alone, so a full run is cached."""
        cone = self._cone(atom[0])
        done = self._reachable_by_cone.get(cone)
        if done is not None:
            return atom in done
        if self._explore(cone, Tables({p: set(ts) for p, ts in state.data.items()}), atom):
            return True
        return atom in self._reachable_by_cone[cone]

    def _explore(self, cone: frozenset[str] | None, facts: Tables, target: tuple | None = None) -> bool:
        """Semi-naive relaxed exploration of the rules producing ``cone`` from ``facts`` and the initial state.
        True as soon as ``target`` is added; otherwise the fixpoint is cached for ``cone`` and False returned."""
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
            if target is not None and target[1:] in fresh.get(target[0], ()):
                return True
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
        return False

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
        dels = [d for d in dels if d not in adds]
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
