# Over 400 lines: ALFWorld's A* value oracle and its admissible heuristic over the native engine's states.
"""ALFWorld's value oracle: the fewest commands to win, by an A* search over the native engine's states.

From the env's current state (a snapshot, :meth:`~stepgym.envs.alfworld.env.ALFWorldEnv.get_state`) the oracle
searches the game on a *private* native engine, through its text-free view
(:class:`~stepgym.envs.alfworld.native.plan.PlanView`): the commands ``step()`` accepts are the edges, a state is
its true atoms (deduplicated by what preconditions and the goal read), a win is tested when a state is generated.
No text is derived and the live env is only read.

The search is A* with an admissible lower bound on the commands left (:class:`LowerBound`, read off the goal:
the takes, puts, property changes and visits still needed), so its first proof is the shortest way:

1. a win reached at cost ``d`` with nothing cheaper left to search is exact, and so is every state on that way;
   the bounds it starts with (the stored walkthrough's length at the start state, a cached upper bound) and cached
   exact values of states it meets count as ways too; the whole reachable space searched without a win proves the
   game unwinnable;
2. when the search spends its ``budget`` (successor states generated) first, the handcoded expert plays on from
   the snapshot (on the private engine): the label is the best way known (the expert's completion length or a
   bound the search started with) with ``exact=False``, or "unknown" (``reachable=False, exact=False``) when
   there is none.

Moves that are never on a shortest path are not expanded. Each rule is sound by the domain's PDDL
(``logic/alfred.pddl``; ``tests/test_values_alfworld.py`` checks the pruned search against an unpruned one and
against brute force over engine steps, ``scripts/alfworld_values_check.py`` on every game):

* ``look``, ``inventory``, ``help`` and the two ``examine`` actions only add ``checked`` facts, which nothing
  reads; ``close`` only removes ``opened``, which preconditions need and none forbids;
* two ``go to`` in a row: the first can be dropped (``go to`` needs only the agent's location, changes only it,
  and every destination can be reached from anywhere), so after a ``go to`` only what is done there is expanded;
* taking, cleaning, heating, cooling or slicing an object that is not one of the task's target objects
  (``pddl_params``) changes nothing the goal reads and only occupies the hand (putting such an object down stays:
  the agent may hold one when the search starts); ``use`` of anything but the task's lamp only toggles it;
* ``open`` of a receptacle holding no target object, of a type the goal does not name, while the hand holds no
  other object: ``opened`` is read only by taking from and putting into that receptacle, and a shortest plan never
  parks a target object there to take it back.

Every state on the way the search proves shortest gets its exact value through the cache (keyed by its atoms, next
to the env's state keys), so an agent that follows the optimum costs one search per episode. The search reads the cache too: a generated state whose exact value is cached is not expanded
(the way through it costs its depth plus that value), and any cached value bounds the result, so a detour next to a
labelled state gets at least an upper bound.
"""

from __future__ import annotations

import copy
import gc
import threading
from collections import OrderedDict, deque
from collections.abc import Collection, Iterator, Mapping
from heapq import heappop, heappush
from itertools import combinations
from typing import Any

import numpy as np

from stepgym import schema
from stepgym.envs.alfworld.native.ground import Op, Tables
from stepgym.envs.alfworld.native.plan import Atoms, PlanView
from stepgym.envs.alfworld.state import TaskTargets
from stepgym.envs.base import lru_get
from stepgym.envs.oracle import Remember, Value
from stepgym.errors import ValueOracleError

__all__ = ["ALFWorldOracle", "LowerBound", "Relevance", "clear_shared_work", "reference_cost", "useful_moves"]

EXPERT_LIMIT = 100
"""The most commands the expert may play to reach a win from a state (its completions are far shorter)."""

_NEVER = frozenset({"look", "inventory", "help", "examinereceptacle", "examineobject", "closeobject"})
_ON_OBJECT = {
    "pickupobject": "?o",
    "cleanobject": "?o",
    "heatobject": "?o",
    "coolobject": "?o",
    "sliceobject": "?co",
}
_GOTO = "gotolocation"
_NEVER_AFTER_GOTO = _NEVER | {_GOTO}
_BOUND_MEMO = 100_000  # lower bounds kept per game (by the atoms they read)


_EXACT_COSTS: dict[int, Value] = {}


def _exact_cost(cost: int) -> Value:
    """The exact value of a state ``cost`` commands from a win (one object per cost: many states share it)."""
    value = _EXACT_COSTS.get(cost)
    if value is None:
        value = _EXACT_COSTS[cost] = Value(float(cost), True, True, 1.0)
    return value


def _memo_key(key: Atoms) -> tuple[str, Atoms]:
    """The cache key of a search state (the env's own state keys are strings: no clash)."""
    return ("atoms", key)


class Relevance:
    """What the pruning rules ask of a game's objects for one task, worked out once: the ids of the target
    objects, of the task's lamps and of the receptacles of the goal's type (by their names, as ``TaskTargets``
    reads them)."""

    def __init__(self, view: PlanView, targets: TaskTargets):
        names = view.names
        self.view = view  # the game it was worked out for
        self.targets = frozenset(i for i, n in names.items() if targets.is_target_object(n))
        self.toggles = frozenset(i for i, n in names.items() if targets.is_toggle(n))
        self.parents = frozenset(i for i, n in names.items() if targets.is_parent(n))


def useful_moves(
    view: PlanView,
    tables: Tables,
    rel: Relevance,
    after_goto: bool,
    options: list[tuple[Op, str]] | None = None,
) -> Iterator[tuple[Op, str]]:
    """The moves the search expands in the state ``tables``: the commands ``step()`` accepts there (``options``,
    default: all of them) less those never on a shortest path (see the module docstring for why each is safe to
    drop). ``after_goto``: the state was reached by a ``go to``."""
    actions, target_ids = view.schema_names, rel.targets
    data = tables.data
    held_other = any(o not in target_ids for _, o in data.get("holds", ()))
    with_targets: set[str] | None = None
    if options is None:  # what is never expanded is not even listed
        options = view.options(tables, _NEVER_AFTER_GOTO if after_goto else _NEVER)
    for op, command in options:
        action = actions[op[1]]
        if action in _NEVER or (after_goto and action == _GOTO):
            continue
        b = op[2]
        param = _ON_OBJECT.get(action)
        if param is not None and b[param] not in target_ids:
            continue
        if action == "toggleobject" and b["?o"] not in rel.toggles:
            continue
        if action == "openobject" and not held_other:
            recep = b["?r"]
            if with_targets is None:
                with_targets = {r for o, r in data.get("inreceptacle", ()) if o in target_ids}
            if recep not in with_targets and recep not in rel.parents:
                continue
        yield op, command


class LowerBound:
    """An admissible lower bound on the commands to a win, read off the goal of one game (the search's A*
    heuristic: it never overestimates, so the search stays exact; a tight bound is what makes it fast).

    ALFWorld's goals come in two shapes, recognised from the goal's literals:

    * *place*: one or two objects of a type (with a property: clean, hot, cool) in one receptacle of a type. Per
      object not yet in place: take it (plus freeing the hand of another object, plus opening a closed source),
      give it the property at an appliance, put it in (plus opening a closed receptacle), and the ``go to`` it
      takes to visit, in this order, its place, an appliance and the receptacle (consecutive visits to one location
      need none). Two objects: the sum of their actions and the larger of their visits. Receptacles overlap (a pan
      on two burners is "in" both), and taking an object from one leaves it in the other: an object already "in" a
      receptacle of the goal's type may need no put and no return there, and it can be taken at any of its places.
    * *look*: an object held where a lamp of a type is toggled on: take the object (as above), toggle the lamp if
      it is not, and the visits to the object, then the lamp.

    Any other goal gets 0 (the search is then breadth-first, still exact).
    """

    def __init__(self, view: PlanView):
        self.kind = ""
        self._memo: dict[tuple, int] = {}
        self._relevant: frozenset[str] = frozenset()  # the objects the bound reads (targets, lamps)
        self._parents: frozenset[str] = frozenset()
        self._reads = (  # what the bound reads besides where the agent is
            "holds",
            "inreceptacle",
            "opened",
            "isclean",
            "ishot",
            "iscool",
            "istoggled",
        )
        game = view._game
        grounder = view.grounder
        static = grounder.static
        self.loc = dict(static.get("receptacleatlocation", ()))
        self.openable = {r for (r,) in static.get("openable", ())}
        goal = game.goal
        if not isinstance(goal, list) or len(goal) != 1:
            return
        lits = goal[0].literals
        if any(neg and pred != "=" for neg, pred, _ in lits):
            return
        by_type = _rows_by_second(static.get("objecttype", ()))
        recep_by_type = _rows_by_second(static.get("receptacletype", ()))
        obj_vars = [args[0] for neg, pred, args in lits if pred == "objecttype"]
        cands: dict[str, frozenset[str]] = {}
        props: dict[str, list[str]] = {}
        for v in obj_vars:
            typ = next(args[1] for _, pred, args in lits if pred == "objecttype" and args[0] == v)
            pool = set(by_type.get(typ, ()))
            props[v] = []
            for _, pred, args in lits:
                if args != (v,):
                    continue
                if pred in grounder.fluents:
                    props[v].append(pred)
                else:
                    pool &= {o for (o,) in static.get(pred, ())}
            cands[v] = frozenset(pool)
        placed = {args[0]: args[1] for _, pred, args in lits if pred == "inreceptacle"}
        held = [args[1] for _, pred, args in lits if pred == "holds"]
        recep_type = {args[0]: args[1] for _, pred, args in lits if pred == "receptacletype"}
        fixers = _fixers(grounder, recep_by_type)
        if held:  # look: the held object and a toggled lamp at the agent's location
            lamps = [v for v in obj_vars if v not in held and props[v] == ["istoggled"] and v in placed]
            if len(held) != 1 or len(lamps) != 1 or props[held[0]]:
                return
            self.kind = "look"
            self.objects, self.lamps = cands[held[0]], cands[lamps[0]]
            self._relevant = self.objects | self.lamps
            return
        if not 1 <= len(obj_vars) <= 2 or set(placed) != set(obj_vars) or len(set(placed.values())) != 1:
            return
        r_var = next(iter(placed.values()))
        v = obj_vars[0]
        if r_var not in recep_type or any(props[w] != props[v] or cands[w] != cands[v] for w in obj_vars):
            return
        if any(p not in fixers for p in props[v]) or len(props[v]) > 1:
            return
        self.kind = "place"
        self.n = len(obj_vars)
        self.objects = cands[v]
        self.parents = self._parents = frozenset(recep_by_type.get(recep_type[r_var], ()))
        self._relevant = self.objects
        self.prop = props[v][0] if props[v] else ""
        self.appliance_locs = sorted({self.loc[r] for r in fixers.get(self.prop, ()) if r in self.loc})

    def __call__(self, data: Mapping[str, Collection[tuple]]) -> int:
        """The bound in the state whose atoms by predicate are ``data``."""
        if not self.kind:
            return 0
        least, stops = self.profile(data)
        if stops is None:
            return least
        return least + (next(iter(data.get("atlocation", ())), ("", ""))[1] not in stops)

    def profile(self, data: Mapping[str, Collection[tuple]]) -> tuple[int, frozenset[str] | None]:
        """The bound as a function of where the agent is, the rest of the state as in ``data``: ``(m, stops)``
        with the bound ``m`` at the locations ``stops`` and ``m + 1`` elsewhere (``stops`` None: ``m``
        everywhere). Only the first visit depends on the agent's place, and it costs one ``go to`` or none, so
        this is exact; the search reads the bound of every ``go to`` from one profile. Kept per state content
        (a search's states share most of it)."""
        key = tuple([_frozen(data.get(p)) for p in self._reads])
        hit = self._memo.get(key)
        if hit is None:
            if len(self._memo) >= _BOUND_MEMO:
                self._memo.clear()
            hit = self._memo[key] = self._compute(data)
        return hit

    def _compute(self, data: Mapping[str, Collection[tuple]]) -> tuple[int, frozenset[str] | None]:
        held = {o for _, o in data.get("holds", ())}
        relevant = self._relevant
        where: dict[
            str, list[str]
        ] = {}  # object -> its receptacles (receptacles overlap: a pan on two burners)
        for o, r in data.get("inreceptacle", ()):
            if o in relevant:
                where.setdefault(o, []).append(r)
        opened = data.get("opened", ())
        openable = self.openable
        sites = {r for rs in where.values() for r in rs} | self._parents
        closed = {r for r in sites if r in openable and (r,) not in opened}
        ways = (
            self._look(data, held, where, closed)
            if self.kind == "look"
            else self._place(data, held, where, closed)
        )
        if ways is None:
            return 0, None  # done, or no way the bound can see: 0 everywhere
        least = min(c for c, _ in ways)
        return least, frozenset(stop for c, stop in ways if c == least and stop is not None)

    # Each candidate way is (cost with its first visit free, the location of that first visit or None when the
    # cost is one more wherever the agent is).
    def _takes(
        self, o: str, held: set[str], where: dict[str, list[str]], closed: set[str]
    ) -> list[tuple[int, str | None, str | None]]:
        """The ways to get ``o`` in hand: (actions, not counting freeing the hand; the location it is taken at,
        None when held or not known; the receptacle it is taken from), one per receptacle holding it."""
        if o in held:
            return [(0, None, None)]
        srcs = where.get(o)
        if not srcs:
            return [(1, None, None)]  # inside something: one take at least, where is not known
        return [(1 + (src in closed), self.loc.get(src), src) for src in srcs]

    def _look(self, data, held, where, closed) -> list[tuple[int, str | None]] | None:
        toggled = {o for (o,) in data.get("istoggled", ())}
        ways: list[tuple[int, str | None]] = []
        for lamp in self.lamps:
            lamp_at = {self.loc[r] for r in where.get(lamp, ()) if r in self.loc}
            for at in lamp_at:
                for o in self.objects:
                    hand = bool(o not in held and held)  # the hand must be freed first
                    for acts, taken_at, _ in self._takes(o, held, where, closed):
                        acts += hand + (lamp not in toggled)
                        if taken_at is None:
                            ways.append((acts, at))
                        else:
                            ways.append((acts + (at != taken_at), taken_at))
        return ways or None

    def _place(self, data, held, where, closed) -> list[tuple[int, str | None]] | None:
        prop_of = {o for (o,) in data.get(self.prop, ())} if self.prop else set()
        loc, appliances = self.loc, self.appliance_locs
        ways: list[tuple[int, str | None]] = []
        for r in self.parents:
            at = loc.get(r)
            if at is None:
                continue
            closed_r = r in closed
            # Per object not yet in r: its ways, each (actions, visits after the first, first visit, whether it
            # needs r open: taking it from r or putting it in, the receptacle it is taken from). r is opened once, whoever needs it: its opening
            # is left out of the actions and counted once per way below.
            per: list[tuple[list[tuple[int, int, str, bool, str | None]], str]] = []
            done = 0
            for o in self.objects:
                fixed = not self.prop or o in prop_of
                if fixed and r in where.get(o, ()):
                    done += 1
                    continue
                options: list[tuple[int, int, str, bool, str | None]] = []
                in_r = r in where.get(o, ())
                for acts, taken_at, src in self._takes(o, held, where, closed):
                    # Already "in r" but without its property: held, or taken from another receptacle that
                    # also holds it (they overlap), it stays "in r": no put and no return to r needed.
                    stale = in_r and src != r
                    if src == r and closed_r:
                        acts -= 1  # opening r, counted with the way
                    uses_r = closed_r and (src == r or not stale)
                    acts += (not stale) + (not fixed)  # the put, the property
                    if taken_at is not None:  # first to where it is taken
                        if stale:
                            tail = min(int(a != taken_at) for a in appliances) if appliances else 0
                        elif fixed or not appliances:
                            tail = int(at != taken_at)
                        else:
                            tail = min((a != taken_at) + (at != a) for a in appliances)
                        options.append((acts, tail, taken_at, uses_r, src))
                    elif fixed or not appliances:
                        options.append((acts, 0, at, uses_r, src))
                    else:  # in hand (or somewhere unknown): first to an appliance
                        options.extend(
                            (acts, 0 if stale else int(at != a), a, uses_r, src) for a in appliances
                        )
                per.append((options, o))
            need = self.n - min(done, self.n)
            if need == 0:
                return None
            # the hand holds at most one object: one not used must be put down (one action) before a take
            if need == 1:
                for options, o in per:
                    hand = bool(held and o not in held)
                    ways.extend((acts + tail + u + hand, first) for acts, tail, first, u, _ in options)
                continue
            for (f1, o1), (f2, o2) in combinations(per, 2):  # pick two: the larger of their visits
                hand = bool(held and o1 not in held and o2 not in held)
                for a1, t1, s1, u1, src1 in f1:
                    for a2, t2, s2, u2, src2 in f2:
                        base = a1 + a2 + (u1 or u2) + hand
                        if src1 is not None and src1 == src2 and src1 != r and src1 in closed:
                            base -= 1  # both taken from one closed receptacle: opened once
                        if t1 != t2:
                            ways.append((base + max(t1, t2), s1 if t1 > t2 else s2))
                        else:
                            ways.append((base + t1, s1 if s1 == s2 else None))
        return ways or None


def _frozen(rows: Collection[tuple] | None) -> frozenset[tuple] | None:
    return rows if rows is None or isinstance(rows, frozenset) else frozenset(rows)


def _rows_by_second(rows: Any) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for first, second in rows:
        out.setdefault(second, []).append(first)
    return out


def _fixers(grounder: Any, recep_by_type: dict[str, list[str]]) -> dict[str, list[str]]:
    """Property predicate -> the receptacles where an action adds it (``ishot`` -> the microwaves), from the
    actions whose preconditions name a receptacle type."""
    out: dict[str, list[str]] = {}
    for action in grounder.domain.schemas:
        adds = [e.pred for e in action.effects if not e.negated and not e.condition]
        types = [
            args[1] for _, lits in action.disjuncts for _, pred, args in lits if pred == "receptacletype"
        ]
        if not types or any(t.startswith("?") for t in types):
            continue
        for pred in adds:
            out.setdefault(pred, []).extend(r for t in types for r in recep_by_type.get(t, ()))
    return out


class ALFWorldOracle:
    """See the module docstring. ``budget``: successor states the search may generate per uncached state."""

    unit_gain = False

    def __init__(self, env: Any, budget: int):
        if not hasattr(env.engine, "get_state"):
            raise ValueOracleError(
                'ValueWrapper on ALFWorld searches native-engine snapshots: make the env with engine="native" '
                "(the default)"
            )
        self.env = env
        self.budget = int(budget)
        self._engine: Any = None  # the private engine of the game last labelled (never the live one)
        self.stats = {"searches": 0, "exact": 0, "bound": 0, "unknown": 0, "generated": 0}

    # -- the label ------------------------------------------------------------------------------------------
    def value(self, info: dict[str, Any], remember: Remember) -> Value:
        if info[schema.WON]:
            return Value.won()
        # A search allocates many small containers that die with it and form no cycles: the cyclic garbage
        # collector is paused meanwhile (as ``timeit`` does), or its collections would promote the search's
        # short-lived states and set off full collections of the whole process (a third of the labels' cost).
        # The per-game work is shared by the process's oracles (its private engine is stepped by the expert's
        # completion): one label at a time, whichever thread asks.
        with _LOCK:
            paused = gc.isenabled()
            gc.disable()
            try:
                return self._value(info, remember)
            finally:
                if paused:
                    gc.enable()

    def _value(self, info: dict[str, Any], remember: Remember) -> Value:
        live = (
            self.env.engine.get_state()
        )  # the engine's snapshot (the env's whole one only if the expert plays)
        game = self.env.game
        work = _game_work(live)
        self._engine = engine = work.engine
        view, bound, rel = work.view, work.bound, work.relevance(game)
        if getattr(remember, "caching", True):  # shares exact values with the other oracles on this game
            remember = _SharedMemo(remember, work.exact_of(game.task_id), work.pairs)
        root = view.atoms_of(live)
        known = remember.recall(_memo_key(view.key(root)))
        if known is not None and known.exact:  # the same state, up to facts nothing reads
            return known
        upper = len(self.env.walkthrough) if info[schema.STEP_INDEX] == 0 and self.env.walkthrough else None
        if known is not None and known.reachable:
            upper = int(known.cost) if upper is None else min(upper, int(known.cost))
        self.stats["searches"] += 1
        found, cost, path = self._search(view, root, rel, upper, remember, bound, view.options_of(live))
        if found == "none":
            self.stats["exact"] += 1
            return Value.unreachable()
        if found == "budget":  # the expert's completion bounds it
            snap = self.env.get_state()
            state = engine.set_state(snap.engine)
            expert_path = self._expert_path(view, snap, info.get(schema.EXPERT_ACTION), state)
            if expert_path is not None:
                cost = len(expert_path) if cost is None else min(cost, len(expert_path))
            if cost is None:
                self.stats["unknown"] += 1
                return Value.unknown()
            self.stats["bound"] += 1
            return Value(float(cost), False, True, 1.0)
        # exact: nothing shorter than the best way found exists. Every state on that way has its exact value.
        assert cost is not None
        self.stats["exact"] += 1
        for i, key in enumerate(path or [view.key(root)]):
            remember(_memo_key(key), _exact_cost(cost - i))
        return _exact_cost(cost)

    # -- the expert's completion ----------------------------------------------------------------------------
    def _expert_path(
        self, view: PlanView, snap: Any, action: str | None, state: dict[str, Any]
    ) -> list[Atoms] | None:
        """The search keys of the states after each of the expert's commands until it wins (None if it does
        not). It plays on the private engine from ``snap`` (the engine's current state, ``state``); the engine is
        left on the game, in whatever state the expert reached (the view needs only the game)."""
        if snap.expert is None or action is None:
            return None
        from stepgym.envs.alfworld.expert import RobustExpert

        engine = self._engine
        rng = np.random.Generator(type(self.env.np_random.bit_generator)())
        rng.bit_generator.state = copy.deepcopy(snap.rng)
        expert = RobustExpert()
        expert.set_memory(copy.deepcopy(snap.expert), rng)
        keys: list[Atoms] = []
        for _ in range(EXPERT_LIMIT):
            if action is None or action not in state["admissible_commands"]:
                return None
            state = engine.step(action)
            keys.append(view.key(view.current()))
            if state["won"]:
                return keys
            action = expert.next_action(state, action)
        return None

    # -- the search -----------------------------------------------------------------------------------------
    def _search(
        self,
        view: PlanView,
        root: Atoms,
        rel: Relevance,
        upper: int | None,
        memo: Remember,
        bound: LowerBound,
        root_options: list[tuple[Op, str]] | None = None,
    ) -> tuple[str, int | None, list[Atoms]]:
        """A* from ``root`` (``bound`` the heuristic, admissible; ``root_options`` the root's moves, if known).
        Returns ``(outcome, cost, path)``:

        * ``("exact", c, keys)``: the cheapest way costs ``c``: a way of that cost is known (a win found by the
          search, the bound ``upper``, or a state whose value is cached) and nothing cheaper is left to search.
          ``keys``: the search keys of the states on that way from the root up to where it was found (empty when
          it is ``upper``);
        * ``("none", None, [])``: the reachable space is exhausted without a win (unwinnable);
        * ``("budget", c, [])``: the budget ran out first; ``c`` is the best upper bound known (None: none).

        A generated state whose exact value ``v`` is cached is not expanded (every way through it costs ``g + v``,
        and that is achieved); a cached upper bound ``v`` only offers the way ``g + v``.
        """
        if upper is not None and bound(dict(root)) >= upper:
            return self._done("exact", upper, [], 0)
        search = _AStar(view, rel, memo, bound, self.budget, root, root_options, upper)
        if not search.run():
            return self._done("budget", search.best, [], search.generated)
        if search.best is None:
            return self._done("none", None, [], search.generated)
        # best is optimal, so every state on its way is on an optimal way: its value is best less its depth (the
        # last one's too when the cache had only an upper bound for it: that bound is then attained)
        path = _path(search.parent, search.best_at) if search.best_at != search.root_key else []
        return self._done("exact", search.best, path, search.generated)

    def _done(
        self, outcome: str, cost: int | None, path: list[Atoms], generated: int
    ) -> tuple[str, int | None, list[Atoms]]:
        self.stats["generated"] += generated
        return outcome, cost, path


class _GameWork:
    """What labelling one game needs besides the state, worked out once per process and shared by every oracle
    on that game (a GRPO group's envs play one game each, each with its own ``ValueWrapper``): a private engine
    on the game, its :class:`PlanView` (with the join indexes it accumulates), the :class:`LowerBound` (with its
    memo), the :class:`Relevance` per task, and the exact values proved so far, per task.

    Only *exact* values are shared: a proved cost-to-go is a property of the state and the task, whoever proved
    it, so reading one another's never changes an exact label; it only spares the search (and where a search
    would have run out of budget, it may turn an upper bound into the exact value)."""

    def __init__(self, live: Any):
        from stepgym.envs.alfworld.native import NativeEngine

        self.engine = NativeEngine(cache_size=1)  # private: the live engine is never stepped
        self.engine.set_state(live)
        self.view = PlanView(self.engine)
        self.bound = LowerBound(self.view)
        self._relevance: dict[str, Relevance] = {}
        self._exact: dict[str, dict[Any, Value]] = {}
        self.pairs: dict[Any, Any] = {}  # the (predicate, atoms) pairs of the stored states' keys, interned

    def relevance(self, game: Any) -> Relevance:
        rel = self._relevance.get(game.task_id)
        if rel is None:
            rel = self._relevance[game.task_id] = Relevance(self.view, TaskTargets(game.task_params()))
        return rel

    def exact_of(self, task_id: str) -> dict[Any, Value]:
        return self._exact.setdefault(task_id, {})


_WORK: OrderedDict[str, _GameWork] = OrderedDict()
_LOCK = threading.RLock()
_WORK_GAMES = 8  # games whose work a process keeps (least recently labelled dropped first; each holds its
# parsed game alive, and a full garbage collection walks all of it: a few more than a group's one game)
_SHARED_VALUES = 200_000  # exact values kept per task


def _game_work(live: Any) -> _GameWork:
    """The shared work of the game the snapshot ``live`` is on (made on first use)."""
    return lru_get(_WORK, live.game_file, lambda: _GameWork(live), _WORK_GAMES, lambda w: w.view.on(w.engine))


def clear_shared_work() -> None:
    """Forget every game's shared work and the exact values proved (benchmarks: time a first visit)."""
    with _LOCK:
        _WORK.clear()


class _SharedMemo:
    """A :class:`Remember` over the wrapper's own cache and the game's shared exact values: reads prefer an
    exact value from either, writes go to both (exact ones only to the shared store)."""

    def __init__(self, own: Remember, exact: dict[Any, Value], pairs: dict[Any, Any]):
        self._own, self._exact, self._pairs = own, exact, pairs

    def __call__(self, state_key: Any, value: Value) -> None:
        if value.exact and len(self._exact) < _SHARED_VALUES:
            # read back from here by every oracle: not copied to the own cache
            self._exact[self._interned(state_key)] = value
        else:
            self._own(state_key, value)

    def _interned(self, state_key: Any) -> Any:
        """``("atoms", key)`` with each ``(predicate, atoms)`` pair of the key replaced by one object shared by every
        stored state that has it (the states of a game share most of them): the store keeps fewer objects alive."""
        if not (isinstance(state_key, tuple) and len(state_key) == 2 and state_key[0] == "atoms"):
            return state_key
        pairs = self._pairs
        return ("atoms", tuple([pairs.setdefault(pair, pair) for pair in state_key[1]]))

    def recall(self, state_key: Any) -> Value | None:
        known = self._exact.get(state_key)
        return known if known is not None else self._own.recall(state_key)


class _AStar:
    """One search of :meth:`ALFWorldOracle._search`: its queue, the cheapest depth and parent of every state it has
    generated, and the cheapest way known (``best``, found at ``best_at``)."""

    def __init__(
        self,
        view: PlanView,
        rel: Relevance,
        memo: Remember,
        bound: LowerBound,
        budget: int,
        root: Atoms,
        root_options: list[tuple[Op, str]] | None,
        upper: int | None,
    ) -> None:
        self.view, self.rel, self.memo, self.bound, self.budget = view, rel, memo, bound, budget
        self.root_key = view.key(root)
        self.root_options = root_options  # the live engine listed the root's moves already
        self.best, self.best_at = upper, self.root_key
        self.parent: dict[Atoms, Atoms | None] = {self.root_key: None}
        self.g_of: dict[Atoms, int] = {self.root_key: 0}
        # (f, -g, tie, atoms, tables, key, reached by a go to, the f up to which its go to moves are generated)
        self.heap: list[tuple[int, int, int, Atoms, Tables | None, Atoms, bool, int]] = []
        self.tie = 0
        self.generated = 0
        self._push(bound(dict(root)), 0, root, view.tables(root), self.root_key, False, -1)

    def _push(
        self, f: int, g: int, atoms: Atoms, tables: Tables | None, key: Atoms, after_goto: bool, done_f: int
    ) -> None:
        self.tie += 1
        # ties of f: the deeper state first (it is nearer a win when the bound is tight)
        heappush(self.heap, (f, -g, self.tie, atoms, tables, key, after_goto, done_f))

    def run(self) -> bool:
        """Searches until nothing left can beat ``best`` (True), or until the budget is spent (False)."""
        while self.heap:
            f, minus_g, _, atoms, tables, key, after_goto, done_f = heappop(self.heap)
            g = -minus_g
            if self.best is not None and f >= self.best:
                break  # every way left costs at least f
            if self.g_of[key] < g:
                continue  # reached more cheaply since it was queued
            if tables is None:
                tables = self.view.tables(atoms)
            if not self._expand(f, g, atoms, tables, key, after_goto, done_f):
                return False
        return True

    def _expand(
        self, f: int, g: int, atoms: Atoms, tables: Tables, key: Atoms, after_goto: bool, done_f: int
    ) -> bool:
        """Makes the moves of a popped state whose f is at most ``f`` (False: the budget ran out).

        Partial expansion: a go to changes only where the agent is, so its bound is known before the move is made;
        moves whose f exceeds this state's are made only when the search gets that far (the state is queued again
        at the smallest such f), so most go to moves are never made."""
        view = self.view
        least, stops = self.bound.profile(dict(atoms)) if self.bound.kind else (0, None)
        later: int | None = None
        options = self.root_options if key == self.root_key else None
        for op, _ in useful_moves(view, tables, self.rel, after_goto, options):
            is_goto = view.schema(op) == _GOTO
            h: int | None = None
            if is_goto:
                h = least if stops is None else least + (op[2]["?lend"] not in stops)
                nf = g + 1 + h
                if nf <= done_f:
                    continue  # made at an earlier expansion of this state
                if nf > f:
                    later = nf if later is None else min(later, nf)
                    continue
            elif done_f >= 0:
                continue  # made at the first expansion
            if self.generated >= self.budget:
                return False
            self._offer(view.apply(atoms, tables, op), g + 1, h, key, is_goto)
        if later is not None:
            self._push(later, g, atoms, tables, key, after_goto, max(f, done_f))
        return True

    def _offer(self, child: Atoms, ng: int, h: int | None, parent_key: Atoms, is_goto: bool) -> None:
        """A state generated at depth ``ng`` (``h``: its bound, when already known): kept if it is the cheapest
        way to it that can still beat ``best``; a win or a cached value updates ``best``; else it is queued."""
        self.generated += 1
        view = self.view
        child_key = view.key(child)
        if self.g_of.get(child_key, ng + 1) <= ng:
            return
        if h is None:
            h = self.bound(dict(child))
        if self.best is not None and ng + h >= self.best:
            return  # cannot beat the best way known
        self.g_of[child_key] = ng
        self.parent[child_key] = parent_key
        child_tables = None  # made when it is expanded (most generated states never are)
        if h == 0 and view.won(child_tables := view.tables(child)):
            self.best, self.best_at = ng, child_key
            return
        known = self.memo.recall(_memo_key(child_key))
        if known is not None and known.reachable and (self.best is None or ng + known.cost < self.best):
            self.best, self.best_at = int(ng + known.cost), child_key
        if known is not None and known.exact:
            return  # its value is proved: nothing below it is needed
        self._push(ng + h, ng, child, child_tables, child_key, is_goto, -1)


def _path(parent: dict[Atoms, Atoms | None], last: Atoms) -> list[Atoms]:
    keys = [last]
    while (up := parent[keys[-1]]) is not None:
        keys.append(up)
    return keys[::-1]


def reference_cost(view: PlanView, root: Atoms, limit: int) -> int | str | None:
    """Fewest commands to a win from ``root`` by breadth-first search over *every* command ``step()`` accepts (no
    pruning, no bound, no cache, states told apart by all their true atoms): what the oracle's search is checked against (tests,
    ``scripts/alfworld_values_check.py``). ``"limit"`` when it would generate more than ``limit`` states; None when
    no win is reachable."""
    root_tables = view.tables(root)
    if view.won(root_tables):
        return 0
    seen = {root}  # all the true atoms: not even the search keys' projection is trusted
    frontier = deque([(root, root_tables, 0)])
    generated = 0
    while frontier:
        atoms, tables, depth = frontier.popleft()
        for op, _ in view.options(tables):
            child = view.apply(atoms, tables, op)
            generated += 1
            if generated > limit:
                return "limit"
            if child in seen:
                continue
            seen.add(child)
            child_tables = view.tables(child)
            if view.won(child_tables):
                return depth + 1
            frontier.append((child, child_tables, depth + 1))
    return None
