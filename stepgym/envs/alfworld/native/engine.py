# Over 400 lines: TextWorld's PddlEnv and ALFWorld's demangler reproduced in one engine.
"""The native ALFWorld engine: TextWorld's ``PddlEnv`` + ALFWorld's demangler, reproduced in plain Python.

It plays the same ``game.tw-pddl`` files and gives the same observations, admissible commands, wins and facts
as :class:`stepgym.envs.alfworld.engine.AlfredEngine` (``tests/test_alfworld_native.py`` and
``scripts/alfworld_native_equality.py`` compare them), but nothing of TextWorld's runs in a step: no Fast Downward,
no TatSu, no deep copies. What is parsed from a game (its PDDL, its grammar, the operators' effects) is parsed
once and kept in a small LRU cache, so re-resetting a game is a copy of its kept initial state.

Two views of the world are kept, because TextWorld keeps two (see :mod:`.pddl`): the true atoms (Fast
Downward's state: what is applicable, whether the goal holds) and TextWorld's fact list, which also records the
negated atoms (``not_…``) of every effect of the applied operator and drives the text and ``state["facts"]``.
What the state keys read of that list (:class:`~stepgym.envs.alfworld.state.KeyFacts`, ``key_facts()``) is kept
up to date with the facts each step adds and removes, so the env's keys never re-read the whole list.

``get_state()``/``set_state()`` snapshot and restore both views and the step counter in microseconds; a restored
engine continues exactly as if the actions leading to the snapshot had been replayed.
"""

from __future__ import annotations

import json
import keyword
import os
import re
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path
from typing import Any

from stepgym.envs.alfworld.native.grammar import Grammar, Query, parse_grammar, parse_symbols
from stepgym.envs.alfworld.native.ground import Grounder, Op, Tables, _Plan
from stepgym.envs.alfworld.native.pddl import Domain, atom_args, dnf, nnf, parse_domain, parse_problem
from stepgym.envs.alfworld.state import FactTexts, KeyFacts, fact_text_fields
from stepgym.envs.base import lru_get
from stepgym.errors import CorruptDataError

__all__ = ["NativeEngine", "NativeSnapshot"]

NOTHING_HAPPENS = "Nothing happens."
_OPTIONS_CACHE_SIZE = 4096  # states per game


class Entity:
    """TextWorld's ``EntityInfo`` as the grammar's ``{…}`` expressions see it."""

    __slots__ = ("definite", "id", "indefinite", "name", "type")

    def __init__(self, id: str, type: str, name: str):
        self.id, self.type, self.name = id, type, name
        self.definite, self.indefinite = "the", "a"

    def __str__(self) -> str:
        return self.name


class Var:
    __slots__ = ("name", "type")

    def __init__(self, name: str, type: str):
        self.name, self.type = name, type

    def __str__(self) -> str:
        return f"{self.name}: {self.type}"


class Fact:
    """One fact of ``state["facts"]``, shaped like TextWorld's human-readable ``Proposition``.

    Made once per game and never changed, so it also carries what the state keys read of it: ``texts``, its
    ``fact_text_fields`` (``describe_fact`` as a plain tuple, which the garbage collector stops tracking: a new
    game makes hundreds of facts); ``names`` is that tuple's argument names (a tuple, as in TextWorld).
    """

    __slots__ = ("arguments", "name", "names", "texts")

    def __init__(self, name: str, arguments: tuple[Var, ...]):
        self.name = name
        self.arguments = arguments
        self.texts = texts = fact_text_fields(name, tuple([v.name for v in arguments]))
        self.names = texts[1]

    @property
    def stepgym_texts(self) -> FactTexts:
        """``describe_fact`` of this fact (see ``state.fact_texts``)."""
        return FactTexts._make(self.texts)

    def __str__(self) -> str:
        return "{}({})".format(self.name, ", ".join(map(str, self.arguments)))

    __repr__ = __str__


_DEMANGLE = (("_bar_", "|"), ("_minus_", "-"), ("_plus_", "+"), ("_dot_", "."), ("_comma_", ","))


def demangled_names(ids: list[str]) -> dict[str, str]:
    """ALFWorld's ``Demangler(shuffle=False)``: ``apple_bar__plus_01…`` → ``apple 2`` (numbered in sorted id
    order, the highest number first), ids without ``_bar_`` → ``agent1 `` (with its trailing space).

    ``ids`` are PDDL names (no whitespace), so all of them are demangled in one string."""
    ids = sorted(ids)
    if not ids:
        return {}
    text = "\n".join(ids)
    for mangled, plain in _DEMANGLE:
        text = text.replace(mangled, plain)
    out = {}
    numbered: dict[str, int] = {}
    for i, plain in zip(reversed(ids), reversed(text.split("\n")), strict=True):  # the last id gets number 1
        name, bar, _ = plain.partition("|")
        if not bar:
            out[i] = f"{plain} "
            continue
        if "basin" in i:
            name += "basin"
        n = numbered[name] = numbered.get(name, 0) + 1
        out[i] = f"{name} {n}"
    return out


_NAME_EXPR = re.compile(r"\s*([A-Za-z_]\w*)(\.name)?\s*")


@dataclass
class _Template:
    """How to write the command of one action: its grammar symbols, and what the text depends on.

    ``key_params``: the action parameters whose values decide the text (those its expressions and queries
    name; all of them when a query binds new placeholders, which must avoid every bound object), or None when
    it cannot be cached (it reads a changing fact). ``parts``: ``(text, None, None)`` / ``("", parameter, guard)``
    when the template is literal text and ``{x}`` / ``{x.name}`` expressions (alone, or as a ``[...]`` list),
    for a direct join; an expression's query may only name the action's parameters (``go to [{r.name |
    receptacleatlocation(r, lend)}]``), and it becomes a ``guard``: the facts that must hold (as the query's one
    match) for the name to be written; when one does not, the template is derived in full.
    """

    symbols: list[tuple]
    params: list[tuple[str, str]]
    key_params: tuple[str, ...] | None
    parts: list[tuple[str, str | None, tuple | None]] | None

    @classmethod
    def of(cls, game: _Game, si: int) -> _Template:
        schema = game.grounder.domain.schemas[si]
        symbols = game.grammar.actions[schema.name].template
        by_name = {p.lstrip("?"): p for p, _ in schema.params}
        read: set[str] = set()
        key = None
        if _reads_only(symbols, game.grammar, game.fluent_tw):
            if not _names_read(symbols, game.grammar, set(by_name), read, set()):
                read = set(by_name)
            key = tuple(p for p, _ in schema.params if p.lstrip("?") in read)
        params = {(p.lstrip("?"), t): p for p, t in schema.params}
        parts: list[tuple[str, str | None, tuple | None]] | None = []
        for sym in symbols:
            if sym[0] == "t":
                parts.append((sym[1], None, None))
                continue
            cond = sym[1] if sym[0] == "list" else sym if sym[0] == "cond" else None
            m = _NAME_EXPR.fullmatch(cond[1][2]) if cond is not None and cond[1][0] == "eval" else None
            guard = None
            if m is not None and cond[2] is not None:  # a query on parameters only: a test of bound facts
                phs = [ph for _, args in cond[2].preds for ph in args]
                if all(ph in params for ph in phs):
                    guard = tuple(
                        (pred, tuple((params[ph], ph[1]) for ph in args)) for pred, args in cond[2].preds
                    )
                else:
                    m = None
            if m is None or m.group(1) not in by_name:
                parts = None
                break
            parts.append(("", by_name[m.group(1)], guard))
        return cls(symbols, schema.params, key, parts)


def _names_read(symbols: list[tuple], grammar: Grammar, bound: set[str], read: set[str], seen: set) -> bool:
    """Collect into ``read`` the placeholders that deriving ``symbols`` reads; False if a query binds one not
    in ``bound`` (its matches then depend on every bound object)."""

    def query(q: Query | None) -> bool:
        if q is None:
            return True
        for _, args in q.preds:
            for name, _ in args:
                if name not in bound:
                    return False
                read.add(name)
        return True

    def expr(e: tuple) -> bool:
        if e[0] == "nt":
            return nonterminal(e[1])
        read.update(n for n in e[1].co_names if n in bound)
        return True

    def nonterminal(name: str) -> bool:
        if name in seen:
            return True
        seen.add(name)
        return all(
            query(r.condition) and _names_read(r.symbols, grammar, bound, read, seen)
            for r in grammar.rules.get(name, [])
        )

    for sym in symbols:
        kind = sym[0]
        if kind == "nt" and not nonterminal(sym[1]):
            return False
        if kind in ("cond", "list"):
            cond = sym[1] if kind == "list" else sym
            if not (query(cond[2]) and expr(cond[1])):
                return False
            if kind == "list" and not all(
                nonterminal(n) for n in ("list_empty", "list_separator", "list_last_separator")
            ):
                return False
    return True


@dataclass
class _Game:
    """Everything about one game file that does not change while it is played."""

    walkthrough: list[str]
    grounder: Grounder
    grammar: Grammar
    entities: dict[str, Entity]
    fluent_tw: frozenset[str]  # predicates of TextWorld's facts that can change
    init_true: dict[str, frozenset[tuple]]
    init_tw: tuple[tuple, ...]
    goal: Any
    facts_of: dict[tuple, Fact]
    commands: dict[tuple, str]
    options_cache: dict[frozenset, tuple] | None
    intro: str = ""
    init_view: tuple | None = None  # the engine's views of init_tw (``_set_tw``), made on the first reset
    vars: dict[str, Var] = field(default_factory=dict)  # Var of each object (shared by its facts)
    static_sorted: dict[tuple, dict[tuple, list[tuple]]] | None = None  # static facts by bound arguments
    templates: dict[int, _Template] = field(default_factory=dict)  # command templates by schema index
    command_of: dict[str, str] = field(default_factory=dict)  # cacheable command texts by operator name


@dataclass(frozen=True)
class NativeSnapshot:
    """An engine state from :meth:`NativeEngine.get_state`; immutable, cheap to keep many of."""

    game_file: str
    true_atoms: tuple[tuple[str, frozenset[tuple]], ...]
    tw_facts: tuple[tuple, ...]
    moves: int
    last: dict[str, Any]
    ops: tuple = ()
    commands: tuple[str, ...] = ()
    keys: KeyFacts | None = None  # never changed: restoring copies it


_DOMAINS: dict[str, Domain] = {}


def _domain(text: str) -> Domain:
    """The parsed domain of ``text``; every ALFWorld game has the same one, so it is parsed once per process."""
    dom = _DOMAINS.get(text)
    if dom is None:
        dom = _DOMAINS[text] = parse_domain(text)
    return dom


class NativeEngine:
    """Same interface as :class:`~stepgym.envs.alfworld.engine.AlfredEngine`: ``load``/``reset``/``step`` return
    a state dict with ``feedback``, ``admissible_commands``, ``won``, ``facts`` (plus ``get_state``/``set_state``).
    Not thread-safe: use one engine per env."""

    def __init__(self, cache_size: int = 16):
        self._games: OrderedDict[str, _Game] = OrderedDict()
        self._cache_size = cache_size
        self._game: _Game | None = None
        self.game_file: Path | None = None
        self._true = Tables()
        self._tw: dict[tuple, Fact] = {}  # TextWorld's fact list, in its order: atom -> its Fact
        self._tw_by_pred: dict[str, set[tuple]] = {}
        self._keys = KeyFacts()  # what the state keys read of self._tw, kept up to date by _apply
        self._ops: list[Op] = []
        self._commands: list[str] = []
        self._moves = 0
        self._state: dict[str, Any] = {}

    # -- loading ------------------------------------------------------------------------------------------------
    def load(self, game_file: Path | str) -> None:
        key = str(game_file)
        game = lru_get(self._games, key, lambda: _shared_game(key), self._cache_size)
        self._game = game
        self.game_file = Path(game_file)

    @property
    def walkthrough(self) -> list[str]:
        return list(self._game.walkthrough) if self._game else []

    def close(self) -> None:
        self._games.clear()

    def clear_state_cache(self) -> None:
        """Forget the per-state answers of the loaded games (benchmarks use it to time states seen first)."""
        for game in self._games.values():
            if game.options_cache is not None:
                game.options_cache.clear()
            game.grounder.clear_state_cache()

    # -- playing ------------------------------------------------------------------------------------------------
    def reset(self) -> dict[str, Any]:
        game = self._require()
        self._true = Tables({p: set(ts) for p, ts in game.init_true.items()})
        if game.init_view is None:
            self._set_tw(game.init_tw)
            by_pred = {p: frozenset(ts) for p, ts in self._tw_by_pred.items()}
            game.init_view = (dict(self._tw), by_pred, self._keys.copy())
        else:  # copies of the views: no fact is looked up again
            tw, by_pred, keys = game.init_view
            self._tw, self._keys = dict(tw), keys.copy()
            self._tw_by_pred = {p: set(ts) for p, ts in by_pred.items()}
        self._moves = 0
        if not game.intro:
            game.intro = self._derive(parse_symbols("#intro#"), {})
        return self._gather(game.intro)

    def step(self, command: str) -> dict[str, Any]:
        game = self._require()
        command = command.strip()
        try:
            idx = self._commands.index(command)
        except ValueError:
            return self._gather(NOTHING_HAPPENS)
        op = self._ops[idx]
        self._apply(op)
        name, si, b, _ = op
        schema = game.grounder.domain.schemas[si]
        mapping = _placeholders(schema.params, b)
        text = game.grammar.actions[schema.name]
        feedback = self._derive(text.feedback, mapping)
        self._moves += 1
        return self._gather(feedback)

    def _fact(self, atom: tuple) -> Fact:
        game = self._require()
        fact = game.facts_of.get(atom)
        if fact is None:
            fact = game.facts_of[atom] = _make_fact(atom, game)
        return fact

    def _require(self) -> _Game:
        if self._game is None:
            raise RuntimeError("load() a game before reset()/step()")
        return self._game

    def _set_tw(self, facts: tuple[tuple, ...], keys: KeyFacts | None = None) -> None:
        """Make ``facts`` TextWorld's fact list; ``keys``: their KeyFacts if known (copied, never changed)."""
        fact = self._fact
        self._tw = {f: fact(f) for f in facts}
        self._keys = KeyFacts(f.texts for f in self._tw.values()) if keys is None else keys.copy()
        by_pred: dict[str, set[tuple]] = {}
        for f in facts:
            by_pred.setdefault(f[0], set()).add(f[1:])
        self._tw_by_pred = by_pred

    def _apply(self, op: Op) -> None:
        game = self._require()
        effects = game.grounder.effects(op, self._true)
        true = self._true
        fire = []
        for atom, val, cond in effects:
            if all((catom in true) == (cval == 0) for catom, cval in cond):
                fire.append((atom, val))
        for atom, val in fire:
            if val == 0:
                true.add(atom[0], atom[1:])
            else:
                true.discard(atom[0], atom[1:])
        tw, by_pred, keys = self._tw, self._tw_by_pred, self._keys
        for atom, val, _ in effects:
            pred = atom[0]
            if val == 0:
                neg, pos = ("not_" + pred, *atom[1:]), atom
            else:
                neg, pos = atom, ("not_" + pred, *atom[1:])
            if neg in tw:
                keys.discard(tw.pop(neg).texts)
                by_pred[neg[0]].discard(neg[1:])
            if pos not in tw:
                fact = tw[pos] = self._fact(pos)
                keys.add(fact.texts)
                by_pred.setdefault(pos[0], set()).add(pos[1:])

    def key_facts(self) -> KeyFacts:
        """What the state keys read of the current state's facts (kept up to date step by step; do not change it)."""
        return self._keys

    def _gather(self, feedback: str) -> dict[str, Any]:
        self._require()
        self._ops, self._commands, admissible, won = self._options()
        facts = list(self._tw.values())
        self._state = {
            "feedback": feedback,
            "raw": feedback,
            "admissible_commands": list(admissible),
            "won": won,
            "lost": False,
            "facts": facts,
            "moves": self._moves,
        }
        return self._state

    def _options(self) -> tuple[list[Op], list[str], tuple[str, ...], bool]:
        """Applicable operators, their commands (FD's order), the sorted admissible commands and the win.

        They depend only on the true atoms when no command template reads a changing fact (ALFWorld's do not),
        so they are cached per state: a state seen before (another rollout of the same game) costs a lookup.
        """
        game = self._require()
        key = None
        if game.options_cache is not None:
            true = self._true  # the state as its predicates' atom sets (kept by the tables until they change)
            key = tuple([(p, f) for p in sorted(true.data) if (f := true.frozen(p))])
            hit = game.options_cache.get(key)
            if hit is not None:
                return hit
        ops = game.grounder.applicable(self._true)
        by_name = game.command_of
        commands = [by_name.get(op[0]) or self._command(op) for op in ops]
        out = (ops, commands, tuple(sorted(set(commands))), self._won())
        if key is not None:
            if len(game.options_cache) >= _OPTIONS_CACHE_SIZE:
                game.options_cache.clear()
            game.options_cache[key] = out
        return out

    def _won(self) -> bool:
        return self._won_in(self._true)

    def _won_in(self, true: Tables) -> bool:
        """Whether the loaded game's goal holds in the true atoms ``true``."""
        game = self._require()
        if isinstance(game.goal, list):
            grounder = game.grounder
            return any(grounder.assignments(plan, true, limit=1) for plan in game.goal)
        return _holds(game.goal, true.data, game, {})

    # -- snapshots ----------------------------------------------------------------------------------------------
    def get_state(self) -> NativeSnapshot:
        """A snapshot of the current game state (restore it with :meth:`set_state`)."""
        self._require()
        return NativeSnapshot(
            str(self.game_file),
            tuple((p, frozenset(ts)) for p, ts in self._true.data.items()),
            tuple(self._tw),
            self._moves,
            dict(self._state),
            tuple(self._ops),
            tuple(self._commands),
            self._keys.copy(),
        )

    def set_state(self, snapshot: NativeSnapshot) -> dict[str, Any]:
        """Restore a snapshot of this engine's current game; returns the state dict it had."""
        if self.game_file is None or snapshot.game_file != str(self.game_file):
            self.load(snapshot.game_file)
        self._true = Tables({p: set(ts) for p, ts in snapshot.true_atoms})
        self._set_tw(snapshot.tw_facts, snapshot.keys)
        self._moves = snapshot.moves
        state = dict(snapshot.last)
        state["facts"] = list(state["facts"])
        state["admissible_commands"] = list(state["admissible_commands"])
        self._ops, self._commands = list(snapshot.ops), list(snapshot.commands)
        self._state = state
        return state

    def _command(self, op: Op) -> str:
        """The command text of ``op``, cached per game by the values of the parameters its template reads
        (``go to desk 1`` does not depend on where the agent comes from) when it reads no changing fact."""
        game = self._require()
        _, si, b, _ = op
        template = game.templates.get(si)
        if template is None:
            template = game.templates[si] = _Template.of(game, si)
        if template.key_params is None:
            return self._derive_command(template, b)
        key = (si, *[b[p] for p in template.key_params])
        text = game.commands.get(key)
        if text is None:
            text = game.commands[key] = self._derive_command(template, b)
        game.command_of[op[0]] = text  # the operator's name holds all its template's parameters
        return text

    def _derive_command(self, template: _Template, b: dict[str, str]) -> str:
        if template.parts is not None:  # literal text and entity names (see _Template)
            game = self._require()
            out = []
            for text, var, guard in template.parts:
                if var is None:
                    out.append(text)
                    continue
                for pred, args in guard or ():
                    key = tuple([b[p] for p, _ in args])
                    if key not in self._tw_by_pred.get(pred, ()) or not all(
                        _type_ok(game, obj, typ) for obj, (_, typ) in zip(key, args, strict=True)
                    ):
                        return self._derive(template.symbols, _placeholders(template.params, b))
                out.append(game.entities[b[var]].name)
            return "".join(out)
        return self._derive(template.symbols, _placeholders(template.params, b))

    # -- text ---------------------------------------------------------------------------------------------------
    def _derive(self, symbols: list[tuple], mapping: dict[tuple[str, str], str]) -> str:
        out: list[str] = []
        variables = {ph[0]: obj for ph, obj in mapping.items()}
        self._expand(symbols, mapping, variables, out)
        return "".join(out)

    def _expand(self, symbols: list[tuple], mapping: dict, variables: dict, out: list[str]) -> None:
        for sym in symbols:
            kind = sym[0]
            if kind == "t":
                out.append(sym[1])
            elif kind == "nt":
                self._nonterminal(sym[1], mapping, variables, out)
            elif kind == "cond":
                for m, v in self._contexts(sym[2], mapping, variables):
                    self._expr(sym[1], m, v, out)
            else:  # list
                cond = sym[1]
                items = self._contexts(cond[2], mapping, variables)
                if not items:
                    self._nonterminal("list_empty", mapping, variables, out)
                for i, (m, v) in enumerate(items):
                    if i and i == len(items) - 1:
                        self._nonterminal("list_last_separator", mapping, variables, out)
                    elif i:
                        self._nonterminal("list_separator", mapping, variables, out)
                    self._expr(cond[1], m, v, out)

    def _expr(self, expr: tuple, mapping: dict, variables: dict, out: list[str]) -> None:
        if expr[0] == "nt":
            self._nonterminal(expr[1], mapping, variables, out)
        else:
            key = (expr[2], tuple(variables))
            fn = _EXPRESSIONS.get(key) or _expression(*key)
            ents = self._game.entities  # type: ignore[union-attr]
            out.append(str(fn(*[ents[o] for o in variables.values()])))

    def _nonterminal(self, name: str, mapping: dict, variables: dict, out: list[str]) -> None:
        rules = self._game.grammar.rules.get(name)  # type: ignore[union-attr]
        if not rules:
            raise CorruptDataError(f"the game grammar has no rule for #{name}#")
        for rule in rules:
            if rule.condition is None or self._first(rule.condition, mapping):
                self._expand(rule.symbols, mapping, variables, out)
                return
        raise CorruptDataError(f"no rule for #{name}# applies")

    def _contexts(self, query: Query | None, mapping: dict, variables: dict) -> list[tuple[dict, dict]]:
        if query is None:
            return [(mapping, variables)]
        if _all_bound(query, mapping):  # a test, not a search: the one context (read only), or none
            return [(mapping, variables)] if self._holds_bound(query, mapping) else []
        out = []
        for m in self._assignments(query, mapping):
            v = dict(variables)
            for ph, obj in m.items():
                v[ph[0]] = obj
            out.append((m, v))
        return out

    def _first(self, query: Query, mapping: dict) -> bool:
        if _all_bound(query, mapping):
            return self._holds_bound(query, mapping)
        for _ in self._assignments(query, mapping, first=True):
            return True
        return False

    def _holds_bound(self, query: Query, mapping: dict) -> bool:
        """Whether a query whose placeholders are all bound matches: each fact is there and each object has its
        placeholder's type (what :meth:`_assignments` finds then, without the search)."""
        game = self._require()
        by_pred = self._tw_by_pred
        for pred, args in query.preds:
            key = tuple([mapping[ph] for ph in args])
            if key not in by_pred.get(pred, ()):
                return False
            for ph, obj in zip(args, key, strict=True):
                if not _type_ok(game, obj, ph[1]):
                    return False
        return True

    def _assignments(self, query: Query, mapping: dict, first: bool = False) -> list[dict]:
        """TextWorld's ``State.all_assignments`` over its fact list, in its order.

        Each predicate's facts are narrowed to those agreeing with the placeholders already bound (an index
        lookup for facts that never change), which keeps TextWorld's order and result.
        """
        game = self._require()
        results: list[dict] = []
        m = dict(mapping)
        used = set(mapping.values())
        preds = query.preds
        seen = set(m)
        levels = []  # per predicate: bound positions, the others with their type's objects, new placeholders
        for _, args in preds:
            bound = tuple(j for j, ph in enumerate(args) if ph in seen)
            free = tuple(
                (j, ph, game.grounder.objects_of(ph[1])) for j, ph in enumerate(args) if ph not in seen
            )
            new = []
            for ph in args:
                if ph not in seen:
                    new.append(ph)
                    seen.add(ph)
            levels.append((bound, free, new))

        def rec(depth: int) -> bool:
            if depth == len(preds):
                results.append(dict(m))
                return first
            pred, args = preds[depth]
            bound, free, new = levels[depth]
            key = tuple(m[args[j]] for j in bound)
            if not all(_type_ok(game, obj, args[j][1]) for j, obj in zip(bound, key, strict=True)):
                return False
            for fact in self._matching_facts(pred, len(args), bound, key, game):
                ok = True
                for j, ph, objs in free:
                    obj = fact[j]
                    if obj not in objs:
                        ok = False
                        break
                    existing = m.get(ph)
                    if existing is None:
                        if obj in used:
                            ok = False
                            break
                        m[ph] = obj
                        used.add(obj)
                    elif existing != obj:
                        ok = False
                        break
                if ok and rec(depth + 1):
                    return True
                for ph in new:
                    obj = m.pop(ph, None)
                    used.discard(obj)
            return False

        rec(0)
        return results

    def _matching_facts(
        self, pred: str, arity: int, positions: tuple[int, ...], key: tuple, game: _Game
    ) -> list[tuple]:
        """The facts of ``pred`` with ``arity`` arguments and ``key`` at ``positions``, in sorted order."""
        if pred in game.fluent_tw:  # the matches, then sorted (the same order as filtering the sorted facts)
            facts = self._tw_by_pred.get(pred, ())
            if len(positions) == 1:
                j, k = positions[0], key[0]
                return sorted([f for f in facts if len(f) == arity and f[j] == k])
            return sorted(
                [
                    f
                    for f in facts
                    if len(f) == arity and all(f[j] == k for j, k in zip(positions, key, strict=True))
                ]
            )
        cache = game.static_sorted
        if cache is None:
            cache = game.static_sorted = {}
        index = cache.get((pred, arity, positions))
        if index is None:
            index = cache[(pred, arity, positions)] = {}
            for f in sorted(self._tw_by_pred.get(pred, ())):
                if len(f) == arity:
                    index.setdefault(tuple(f[j] for j in positions), []).append(f)
        return index.get(key, [])


def _reads_only(
    symbols: list[tuple], grammar: Grammar, fluent: frozenset[str], seen: set | None = None
) -> bool:
    """Whether deriving ``symbols`` never queries a predicate in ``fluent`` (so its text is fixed per binding)."""
    seen = set() if seen is None else seen
    for sym in symbols:
        if sym[0] == "t":
            continue
        if sym[0] == "list":
            sym = sym[1]
            for name in ("list_empty", "list_separator", "list_last_separator"):
                if not _reads_only([("nt", name)], grammar, fluent, seen):
                    return False
        if sym[0] == "cond":
            if sym[2] is not None and any(p in fluent for p, _ in sym[2].preds):
                return False
            sym = sym[1]
        if sym[0] == "nt" and sym[1] not in seen:
            seen.add(sym[1])
            for rule in grammar.rules.get(sym[1], []):
                if rule.condition is not None and any(p in fluent for p, _ in rule.condition.preds):
                    return False
                if not _reads_only(rule.symbols, grammar, fluent, seen):
                    return False
    return True


def _placeholders(params: list[tuple[str, str]], b: dict[str, str]) -> dict[tuple[str, str], str]:
    """An operator's binding as the grammar's placeholders: ``("r", "receptacle") -> object``."""
    return {(p.lstrip("?"), t): b[p] for p, t in params}


def _all_bound(query: Query, mapping: dict) -> bool:
    return all(ph in mapping for _, args in query.preds for ph in args)


_EXPRESSIONS: dict[tuple[str, tuple[str, ...]], Any] = {}


def _expression(source: str, names: tuple[str, ...]) -> Any:
    """A grammar expression as a function of the entities named ``names`` (what ``eval`` of it with those
    entities as locals gives, without building a dict and entering ``eval`` for each use); made once per process
    (grammars share their expressions)."""
    fn = _EXPRESSIONS.get((source, names))
    if fn is None:
        params = [
            n if n.isidentifier() and not keyword.iskeyword(n) else f"_unnamed{i}"
            for i, n in enumerate(names)
        ]
        if len(_EXPRESSIONS) > 1 << 14:
            _EXPRESSIONS.clear()
        fn = _EXPRESSIONS[(source, names)] = eval(
            compile(f"lambda {', '.join(params)}: ({source})", "<grammar>", "eval"), {}
        )
    return fn


def _type_ok(game: _Game, obj: str, typ: str) -> bool:
    return obj in game.grounder.objects_of(typ)


def _make_fact(atom: tuple, game: _Game) -> Fact:
    known = game.vars
    return Fact(atom[0], tuple([known.get(a) or _var(a, game) for a in atom[1:]]))


def _var(obj: str, game: _Game) -> Var:
    var = game.vars.get(obj)
    if var is None:
        ents = game.entities
        var = game.vars[obj] = Var(
            ents[obj].name if obj in ents else obj, game.grounder.objects.get(obj, "object")
        )
    return var


def _holds(f: tuple, true: dict[str, set[tuple]], game: _Game, b: dict[str, str]) -> bool:
    kind = f[0]
    if kind == "atom":
        args = tuple(b.get(a, a) for a in f[2])
        if f[1] == "=":
            return args[0] == args[1]
        table = true.get(f[1]) if f[1] in game.grounder.fluents else game.grounder.static.get(f[1])
        return args in (table or ())
    if kind == "not":
        return not _holds(f[1], true, game, b)
    if kind == "and":
        return all(_holds(p, true, game, b) for p in f[1])
    if kind == "or":
        return any(_holds(p, true, game, b) for p in f[1])
    params = f[1]
    if kind == "exists":
        return any(
            _holds(f[2], true, game, {**b, **dict(zip([p for p, _ in params], objs, strict=True))})
            for objs in _product(game, params)
        )
    return all(
        _holds(f[2], true, game, {**b, **dict(zip([p for p, _ in params], objs, strict=True))})
        for objs in _product(game, params)
    )


def _product(game: _Game, params: list[tuple[str, str]]):
    import itertools

    return itertools.product(*(game.grounder._by_type.get(t, []) for _, t in params))


def _goal_plans(goal: tuple, grounder: Grounder) -> Any:
    """The goal as join plans (one per disjunct), or the formula itself if it has a universal quantifier."""
    try:
        return [_Plan(extra, lits, grounder) for extra, lits in dnf(nnf(goal))]
    except CorruptDataError:
        return goal


_SHARED: weakref.WeakValueDictionary[tuple, _Game] = weakref.WeakValueDictionary()


def _shared_game(game_file: str) -> _Game:
    """The parsed game, shared by every engine of the process that holds it (a GRPO group's envs, a value
    oracle's private engine): what a ``_Game`` keeps besides the parse is caches keyed by state content. Keyed by
    the file's path, size and modification time, so a rewritten file is parsed again."""
    try:
        st = os.stat(game_file)
        key: tuple | None = (game_file, st.st_size, st.st_mtime_ns)
    except OSError:
        key = None  # _prepare says what is wrong with it
    game = _SHARED.get(key) if key is not None else None
    if game is None:
        game = _prepare(game_file)
        if key is not None:
            _SHARED[key] = game
    return game


def clear_shared_state_caches() -> None:
    """Forget the per-state answers of every parsed game alive in the process (benchmarks: time states seen
    first, whichever engine saw them before)."""
    for game in list(_SHARED.values()):
        if game.options_cache is not None:
            game.options_cache.clear()
        game.grounder.clear_state_cache()


def _prepare(game_file: str) -> _Game:
    try:
        with open(game_file, "rb") as f:
            data = json.loads(f.read())
        domain = _domain(data["pddl_domain"])
        problem = parse_problem(data["pddl_problem"])
        grammar = parse_grammar(data["grammar"])
    except (OSError, ValueError, KeyError, TypeError, IndexError) as exc:
        raise CorruptDataError(
            f"ALFWorld game file {game_file} could not be read by the native engine ({type(exc).__name__}: {exc}). "
            "Re-download the data with `stepgym download alfworld`."
        ) from exc
    grounder = Grounder(domain, problem)
    init_tw = tuple(dict.fromkeys(problem.init))
    ids = sorted(set(chain.from_iterable(map(atom_args, init_tw))))
    names = demangled_names(ids)
    entities = {i: Entity(i, problem.objects.get(i, "object"), names[i]) for i in ids}
    fluent_tw = frozenset(domain.fluents | {"not_" + p for p in domain.fluents})
    # nonterminals already known to read no fluent (shared by the templates' checks)
    checked: set[str] = set()
    return _Game(
        walkthrough=list(data.get("walkthrough") or []),
        grounder=grounder,
        grammar=grammar,
        entities=entities,
        fluent_tw=fluent_tw,
        init_true={p: frozenset(ts) for p, ts in grounder.initial.items()},
        init_tw=init_tw,
        goal=_goal_plans(problem.goal, grounder),
        facts_of={},
        commands={},
        options_cache={}
        if all(_reads_only(a.template, grammar, fluent_tw, checked) for a in grammar.actions.values())
        else None,
    )
