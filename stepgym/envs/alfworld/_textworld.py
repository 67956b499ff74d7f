"""TextWorld subclasses behind :class:`stepgym.envs.alfworld.engine.AlfredEngine` (see that module's docstring).

This module imports TextWorld, Fast Downward and ALFWorld at import time; ``engine.py`` imports it only when an
engine is built, so ``import stepgym`` stays light.
"""

from __future__ import annotations

import contextlib
import copy
import json
from collections import Counter, OrderedDict, defaultdict
from dataclasses import dataclass
from typing import Any

import fast_downward
from alfworld.agents.utils.misc import Demangler
from textworld.core import GameState
from textworld.envs.pddl import PddlEnv
from textworld.envs.pddl.logic import Atom, GameLogic, PddlState
from textworld.envs.pddl.textgen import (
    ContextSensitiveGrammar,
    NonterminalSymbol,
    TerminalSymbol,
    _parse_and_convert,
    copy_context,
)
from textworld.logic import Proposition, Rule, Type, Variable

from stepgym.envs.base import lru_get
from stepgym.errors import CorruptDataError

__all__ = ["ReusablePddlEnv"]


@dataclass
class _LoadedGame:
    """What one game costs to prepare, kept so that the next reset of the same game is cheap."""

    data: dict[str, Any]
    logic: Any  # textworld.envs.pddl.logic.GameLogic
    entity_infos: dict[str, Any]
    template: Any  # a PddlState right after translation (never stepped)
    initial_facts: list[Any]


class _MemoGrammar(ContextSensitiveGrammar):
    """TextWorld's text grammar with its string parses memoised.

    Every step derives the command text of every applicable action, and upstream re-parses the same
    template strings (and rule conditions) with TatSu each time: most of a step's cost. Parsing is a pure
    function of the string, so the parse trees are cached and deep-copied per use; the derivation itself
    (which depends on the state) is done exactly as upstream does it. ``tests/test_alfworld_engine.py``
    checks the result against the unmodified engine.
    """

    def __init__(self, rules_from: ContextSensitiveGrammar):
        super().__init__()
        self.update(rules_from)
        self._symbols: dict[str, list[Any]] = {}
        self._queries: dict[str, Any] = {}

    def _parsed(self, text: str) -> list[Any]:
        cached = self._symbols.get(text)
        if cached is None:
            cached = self._symbols[text] = _parse_and_convert(text, rule_name="symbols")
        return copy.deepcopy(cached)

    def _query(self, condition: str) -> Any:
        rule = self._queries.get(condition)
        if rule is None:
            rule = self._queries[condition] = Rule.parse_conjunctive_query(condition)
        return rule

    def replace(self, start: Any) -> list[Any]:
        candidates = self._rules.get(str(start))
        if not candidates:
            return super().replace(start)  # raises TextWorld's own unknown-symbol error
        state, mapping = start.context.get("state"), start.context.get("mapping")
        for rule in candidates:  # the first applicable production wins, as upstream
            if not rule.condition or any(
                True for _ in state.all_assignments(self._query(rule.condition), mapping)
            ):
                symbols = copy.deepcopy(rule.rhs)
                for symbol in symbols:
                    symbol.context = copy_context(start.context)
                return symbols
        raise IndexError("no applicable production for " + str(start))

    def derive(self, start: str, context: dict | None = None) -> str:
        context = context or {}
        stack = self._parsed(start)[::-1]
        for symbol in stack:
            symbol.context = copy_context(context)
        out: list[str] = []
        while stack:
            symbol = stack.pop()
            if isinstance(symbol, TerminalSymbol):
                out.append(str(symbol))
            elif isinstance(symbol, NonterminalSymbol):
                stack.extend(self.replace(symbol)[::-1])
            else:  # conditional, eval and list symbols expand themselves against their context
                stack.extend(symbol.derive()[::-1])
        return "".join(out)


class _ReusedPddlState(PddlState):
    """A ``PddlState`` at the game's initial state, built from an already translated task.

    ``PddlState.__init__`` translates PDDL to SAS (slow) and then loads it into Fast Downward; this sets the
    same attributes from a template state and only does the load and the facts.
    """

    def __init__(self, downward_lib: Any, game: _LoadedGame):
        t = game.template
        self._facts = defaultdict(set)
        self._vars_by_name = {}
        self._vars_by_type = defaultdict(set)
        self._var_counts = Counter()
        self._logic = t._logic
        self.downward_lib = downward_lib
        self.pddl_problem = t.pddl_problem
        self.task, self.sas, self.sas_replan = t.task, t.sas, t.sas_replan
        self._actions = t._actions
        self.name2type = t.name2type
        downward_lib.load_sas(self.sas.encode("utf-8"))
        self.add_facts(game.initial_facts)


class _TranslatedPddlState(PddlState):
    """A ``PddlState`` built with one PDDL→SAS translation instead of upstream's two.

    Upstream also translates an optimised copy for Fast Downward's re-planner (``policy_commands``); stepgym
    never asks the planner (it is slow and has hung upstream), so that second translation, a third of a cold
    load, is skipped and ``replan`` is unavailable.
    """

    def __init__(self, downward_lib: Any, pddl_problem: str, logic: Any):
        self._facts = defaultdict(set)
        self._vars_by_name = {}
        self._vars_by_type = defaultdict(set)
        self._var_counts = Counter()
        self._logic = logic
        self.downward_lib = downward_lib
        self.pddl_problem = pddl_problem
        self.task, self.sas = fast_downward.pddl2sas(logic.domain, pddl_problem)
        self.sas_replan = None
        self._actions = {a.name: a for a in self.task.actions}
        for pddl_type in self.task.types:
            with contextlib.suppress(ValueError):  # already known
                logic.types.add(Type(pddl_type.name, pddl_type.supertype_names))
        downward_lib.load_sas(self.sas.encode("utf-8"))
        self.name2type = {o.name: o.type_name for o in self.task.objects}
        self.add_facts(self._initial_static_facts())
        size = downward_lib.get_state_size()
        atoms = (Atom * size)()
        downward_lib.get_state(atoms)
        self.add_facts(f for f in (a.get_fact(self.name2type) for a in atoms) if not f.is_negation)

    def _initial_static_facts(self) -> list[Any]:
        """The problem's ``:init`` atoms as propositions (minus equality, action costs and distances)."""
        out = []
        for atom in self.task.init:
            if isinstance(atom, fast_downward.translate.pddl.conditions.Atom):
                if atom.predicate != "=":
                    out.append(
                        Proposition(atom.predicate, [Variable(a, self.name2type[a]) for a in atom.args])
                    )
            elif isinstance(atom, fast_downward.translate.pddl.f_expression.Assign):
                name = str(atom.expression.value)
                if atom.fluent.symbol != "total-cost" and not name.isdigit():
                    out.append(Proposition(name, [Variable(a, self.name2type[a]) for a in atom.fluent.args]))
        return out


class ReusablePddlEnv(PddlEnv):
    """``PddlEnv`` whose ``load`` keeps translated games and whose ``reset`` reuses the translation."""

    def __init__(self, infos: Any, cache_size: int):
        super().__init__(infos)
        self._games: OrderedDict[str, _LoadedGame] = OrderedDict()
        self._cache_size = cache_size
        self._game: _LoadedGame | None = None

    def load(self, game_file: str) -> None:
        game = lru_get(self._games, game_file, lambda: self._prepare(game_file), self._cache_size)
        self._game = game
        self._game_file = game_file
        self._game_data = game.data
        self.walkthrough = game.data.get("walkthrough")
        self._logic = game.logic
        self._entity_infos = game.entity_infos

    def _prepare(self, game_file: str) -> _LoadedGame:
        try:
            with open(game_file, encoding="utf-8") as f:
                data = json.load(f)
            self._game_file, self._game_data = game_file, data
            self.walkthrough = data.get("walkthrough")
            self._logic = GameLogic(domain=data["pddl_domain"], grammar=data["grammar"])
            self._pddl_state = _TranslatedPddlState(self.downward_lib, data["pddl_problem"], self._logic)
            self._entity_infos = self._get_entity_infos()
        except Exception as exc:  # TextWorld/Fast Downward raise many types on a bad file
            raise CorruptDataError(
                f"ALFWorld game file {game_file} could not be loaded by TextWorld ({type(exc).__name__}: {exc}). "
                "Re-download the data with `stepgym download alfworld`."
            ) from exc
        self._logic.grammar = _MemoGrammar(self._logic.grammar)
        demangler = Demangler(game_infos=self._entity_infos, shuffle=False)
        for info in self._entity_infos.values():
            info.name = demangler.demangle_alfred_name(info.id)
        template = self._pddl_state
        return _LoadedGame(self._game_data, self._logic, self._entity_infos, template, list(template.facts))

    def reset(self) -> Any:
        assert self._game is not None, "load() a game before reset()"
        self._pddl_state = _ReusedPddlState(self.downward_lib, self._game)
        self.prev_state = None
        self.state = GameState()
        self._last_action = None
        self._moves = 0
        context = {
            "state": self._pddl_state,
            "facts": list(self._pddl_state.facts),
            "variables": {},
            "mapping": {},
            "entity_infos": self._entity_infos,
        }
        self.state.feedback = self._logic.grammar.derive("#intro#", context)
        self.state.raw = self.state.feedback
        self._gather_infos()
        return self.state
