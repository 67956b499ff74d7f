"""TextWorld's context-sensitive text grammar (``textworld.envs.pddl.textgen``), parsed once and derived natively.

A game's ``grammar`` field holds JSON production rules (``"rhs"`` with an optional ``"condition"`` query) and one
``action`` block per PDDL action (command template, feedback rule). An ``rhs`` mixes literal text, ``#symbol#``
(replaced by the first rule whose condition has a match), ``{expr | query}`` (``expr`` once per match of the
query, in TextWorld's order: facts sorted, placeholders bound left to right, no two placeholders on one object)
and ``[...]`` (those items joined with ``list_separator``/``list_last_separator``, or ``list_empty``).

The tokenisation follows TatSu's reading of TextWorld's ``textgen.ebnf`` (leading whitespace and tabs between
tokens are skipped, ``"`` quotes a literal); ``tests/test_alfworld_native.py`` checks the parse of every string
in the data against TextWorld's own parser.
"""

from __future__ import annotations

import functools
import json
import re
import textwrap
from dataclasses import dataclass

from stepgym.errors import CorruptDataError

# Symbols: ("t", text) | ("nt", name) | ("cond", expr, query or None) | ("list", cond) ; expr: ("nt", name) |
# ("eval", code object, source).
_LITERAL = re.compile(r'[^;|"<>\[\]#{}]*')
_TAG = re.compile(r"[\w()/!<>\-\s,.]+")
_STATEMENT = re.compile(r"[^|\[\]{}\n<>]+")
_GIVEN = re.compile(r"[^;|{}\n\[\]#]+")
_BAR = re.compile(r"\s*\|\s*")
_LEAD = re.compile(r"(//.*|\s*)\n?")
_QUERY_PRED = re.compile(r"\s*([\w/-]+)\s*\(([^)]*)\)\s*")


class _Reader:
    def __init__(self, text: str):
        self.text = text
        self.pos = 0

    def skip(self) -> None:
        while True:
            start = self.pos
            if self.pos == 0:
                self.pos = _LEAD.match(self.text, 0).end()
            while self.pos < len(self.text) and self.text[self.pos] == "\t":
                self.pos += 1
            if self.pos == start:
                return

    def peek(self, s: str) -> bool:
        return self.text.startswith(s, self.pos)

    def regex(self, pattern: re.Pattern[str]) -> str | None:
        m = pattern.match(self.text, self.pos)
        if m is None:
            return None
        self.pos = m.end()
        return m.group(0)


@functools.lru_cache(maxsize=4096)
def parse_symbols(text: str) -> list[tuple]:
    """The symbols of one ``rhs``/template string (cached: games share almost all their strings; the result is
    never mutated)."""
    r = _Reader(text)
    out: list[tuple] = []
    while True:
        r.skip()
        if r.pos >= len(text):
            break
        start = r.pos
        sym = _symbol(r)
        if sym is None or r.pos == start:
            break
        out.append(sym)
    return out


def _symbol(r: _Reader) -> tuple | None:
    if r.peek("["):
        save = r.pos
        r.pos += 1
        r.skip()
        cond = _conditional(r)
        r.skip()
        if cond is not None and r.peek("]"):
            r.pos += 1
            return ("list", cond)
        r.pos = save
        return None
    if r.peek("{"):
        return _conditional(r)
    if r.peek("#"):
        return _nonterminal(r)
    if r.peek('"'):
        save = r.pos
        r.pos += 1
        lit = r.regex(_LITERAL)
        if r.peek('"'):
            r.pos += 1
            return ("t", lit)
        r.pos = save
        return None
    lit = r.regex(_LITERAL)
    return ("t", lit) if lit else None


def _nonterminal(r: _Reader) -> tuple | None:
    save = r.pos
    r.pos += 1
    tag = r.regex(_TAG)
    if tag is None or not r.peek("#"):
        r.pos = save
        return None
    r.pos += 1
    return ("nt", tag)


def _conditional(r: _Reader) -> tuple | None:
    if not r.peek("{"):
        return None
    save = r.pos
    r.pos += 1
    r.skip()
    expr: tuple | None = _nonterminal(r) if r.peek("#") else None
    if expr is None:
        stmt = r.regex(_STATEMENT)
        if stmt is None:
            r.pos = save
            return None
        expr = ("eval", compile(stmt, "<grammar>", "eval"), stmt)
    given = None
    bar_at = r.pos
    if r.regex(_BAR) is not None:
        given = r.regex(_GIVEN)
        if given is None:
            r.pos = bar_at
    r.skip()
    if not r.peek("}"):
        r.pos = save
        return None
    r.pos += 1
    return ("cond", expr, parse_query(given) if given is not None else None)


@dataclass(frozen=True)
class Query:
    """A conjunctive query ``p(x:t, y:u) & q(…)``: predicates with typed placeholders."""

    source: str
    preds: tuple[tuple[str, tuple[tuple[str, str], ...]], ...]


@functools.lru_cache(maxsize=4096)
def parse_query(text: str) -> Query:
    preds = []
    for part in text.split("&"):
        m = _QUERY_PRED.fullmatch(part)
        if m is None:
            raise CorruptDataError(f"cannot parse grammar condition {text!r}")
        args = []
        for arg in m.group(2).split(","):
            if not arg.strip():
                continue
            name, _, typ = arg.partition(":")
            args.append((name.strip(), typ.strip()))
        preds.append((m.group(1), tuple(args)))
    return Query(text, tuple(preds))


@dataclass
class Rule:
    symbols: list[tuple]
    condition: Query | None


@dataclass
class ActionText:
    template: list[tuple]
    feedback: list[tuple]


@dataclass
class Grammar:
    rules: dict[str, list[Rule]]
    actions: dict[str, ActionText]


_BLOCK = re.compile(r'"""((?:.|\n)*?)"""')
_STR = re.compile(r'"([^"]*)"')


_SPACE_AND_COMMENTS = re.compile(r"\s*(?:#[^\n]*\n?)*\s*")
_ACTION = re.compile(r"action\s+([\w/-]+)\s*\{")
_FIELD = re.compile(r"(\w+)\s*::\s*")
_FIELD_END = re.compile(r"\s*;")
_GRAMMAR_FIELD = re.compile(r'grammar\s*::\s*"""((?:.|\n)*?)"""\s*;')


def parse_grammar(text: str) -> Grammar:
    """A game's ``grammar`` field (TextWorld's ``.twl2`` logic format with JSON rule blocks)."""
    rules: dict[str, list[Rule]] = {}
    actions: dict[str, ActionText] = {}
    pos = 0
    token = _SPACE_AND_COMMENTS
    while True:
        pos = token.match(text, pos).end()
        if pos >= len(text):
            break
        if text.startswith("grammar", pos):
            code, pos = _field_block(text, pos)
            rules.update(_rule_block(textwrap.dedent(code)))
        elif text.startswith("action", pos):
            m = _ACTION.match(text, pos)
            if m is None:
                raise CorruptDataError("malformed action block in the game grammar")
            name, pos = m.group(1), m.end()
            fields: dict[str, str] = {}
            while True:
                pos = token.match(text, pos).end()
                if text.startswith("}", pos):
                    pos += 1
                    break
                key = _FIELD.match(text, pos)
                if key is None:
                    raise CorruptDataError(f"malformed field in action {name} of the game grammar")
                pos = key.end()
                if text.startswith('"""', pos):
                    m2 = _BLOCK.match(text, pos)
                    value = textwrap.dedent(m2.group(1))
                else:
                    m2 = _STR.match(text, pos)
                    value = m2.group(1)
                pos = _FIELD_END.match(text, m2.end()).end()
                fields[key.group(1)] = value
            if "grammar" in fields:
                data = "\n".join(
                    ln for ln in fields["grammar"].split("\n") if not ln.lstrip().startswith("#")
                )
                rules.update(_rule_block(data))
            actions[name.lower()] = ActionText(
                parse_symbols(fields.get("template", "")), parse_symbols(fields.get("feedback", ""))
            )
        else:
            raise CorruptDataError(f"unexpected text in the game grammar at offset {pos}")
    return Grammar(rules, actions)


@functools.lru_cache(maxsize=4096)
def _rule_block(code: str) -> dict[str, list[Rule]]:
    """The rules of one JSON rule block; games share most blocks, so each is parsed once (keyed by its text).
    Callers only read the result."""
    return {
        name: [
            Rule(parse_symbols(r["rhs"]), parse_query(r["condition"]) if r.get("condition") else None)
            for r in rs
        ]
        for name, rs in json.loads(code).items()
    }


def _field_block(text: str, pos: int) -> tuple[str, int]:
    m = _GRAMMAR_FIELD.match(text, pos)
    if m is None:
        raise CorruptDataError("malformed grammar block in the game grammar")
    return m.group(1), m.end()
