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


# The ``.twl2`` layout: rule blocks (``grammar :: """{json}""";``) and action blocks (``action Name { key ::
# "value"; … }``, a value quoted with ``"`` or ``"""``), with space and ``#`` comment lines around them. A
# ``"""`` string ends at the first ``"""``; it is spelled out as runs of other characters because re steps through a
# lazy ``.*?`` one character at a time. Atomic groups keep a malformed text from backtracking.
_SPACE = r"(?>\s*(?:#[^\n]*\n?)*\s*)"
_LONG = r'"""([^"]*(?:"(?!"")[^"]*)*)"""'
_FIELD = rf'(?>(\w+)\s*::\s*(?:{_LONG}|"([^"]*)")\s*;)'
_ACTION_HEAD = re.compile(r"action\s+([\w/-]+)\s*\{")
_ITEM = re.compile(
    _SPACE + rf"(?:grammar\s*::\s*{_LONG}\s*;|({_ACTION_HEAD.pattern}(?:{_SPACE}{_FIELD})*{_SPACE}\}}))",
    re.S,
)
_FIELDS = re.compile(_SPACE + _FIELD, re.S)
_SKIP = re.compile(_SPACE)
_END = re.compile(_SPACE + r"\Z")


def parse_grammar(text: str) -> Grammar:
    """A game's ``grammar`` field (TextWorld's ``.twl2`` logic format with JSON rule blocks).

    Games differ only in a few rules (the task's text), which come before the action blocks: the text from the
    first action block on is parsed once per process (keyed by that text), and so is each rule (keyed by its
    ``rhs`` and ``condition``); the rule blocks before it are decoded for every game."""
    return _parse(text, share_tail=True)


def _parse(text: str, share_tail: bool) -> Grammar:
    rules: dict[str, list[Rule]] = {}
    actions: dict[str, ActionText] = {}
    pos = 0
    while not _END.match(text, pos):
        m = _ITEM.match(text, pos)
        if m is None:
            at = _SKIP.match(text, pos).end()
            raise CorruptDataError(f"malformed game grammar at {text[at : at + 60]!r}")
        if m.group(1) is not None:
            rules.update(_rules(json.loads(m.group(1))))
        elif share_tail:
            tail = _tail(text[m.start(2) :])
            rules.update(tail.rules)
            actions.update(tail.actions)
            break
        else:
            name, action, action_rules = _action_block(m.group(2))
            rules.update(action_rules)
            actions[name] = action
        pos = m.end()
    return Grammar(rules, actions)


@functools.lru_cache(maxsize=64)
def _tail(text: str) -> Grammar:
    """The grammar from an action block to the end of the text. Callers only read the result."""
    return _parse(text, share_tail=False)


def _action_block(block: str) -> tuple[str, ActionText, dict[str, list[Rule]]]:
    """Name, template and feedback of one action block, and the rules of its ``grammar`` field (whose lines
    starting with ``#`` are comments)."""
    head = _ACTION_HEAD.match(block)
    fields: dict[str, str] = {}
    pos = head.end()
    while (m := _FIELDS.match(block, pos)) is not None:
        key, long, short = m.groups()
        fields[key] = textwrap.dedent(long) if long is not None else short
        pos = m.end()
    rules = {}
    if "grammar" in fields:
        lines = [ln for ln in fields["grammar"].split("\n") if not ln.lstrip().startswith("#")]
        rules = _rules(json.loads("\n".join(lines)))
    template, feedback = (parse_symbols(fields.get(k, "")) for k in ("template", "feedback"))
    return head.group(1).lower(), ActionText(template, feedback), rules


def _rules(block: dict) -> dict[str, list[Rule]]:
    """The rules of one decoded JSON rule block (a ``Rule`` is made once and shared by the games that have it)."""
    return {name: [_rule(r["rhs"], r.get("condition")) for r in rs] for name, rs in block.items()}


@functools.lru_cache(maxsize=4096)
def _rule(rhs: str, condition: str | None) -> Rule:
    return Rule(parse_symbols(rhs), parse_query(condition) if condition else None)
