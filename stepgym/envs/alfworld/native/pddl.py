"""PDDL for the native ALFWorld engine: parsing, grounding and the effect rules of Fast Downward's translator.

TextWorld plays a ``game.tw-pddl`` by translating it with Fast Downward (FD) into a SAS task and stepping FD's
state. What a player sees depends on details of that translation, so this module reproduces them instead of
plain PDDL semantics:

* Tokens are read the way FD's lisp parser reads them (``;`` comments, lower case, whitespace-separated), so a
  typed list like ``(?l - location, ?r - receptacle)`` gives ``?l`` the type ``location,`` (no object has it),
  exactly as FD does.
* Preconditions are put in disjunctive normal form with existential variables as extra parameters, and an
  operator's name is the action with its declared parameters only (so the split parts share one name).
* The SAS effects of an operator follow FD's ``translate_strips_operator``: a delete effect of an atom that is
  never reachable (relaxed exploration) is dropped, an effect whose value the precondition already fixes is
  dropped (so an operator may vanish), "add wins" over a delete under the same condition, and for conditional
  effects the delete gets the guard "no add effect fires". TextWorld then records *every* SAS effect of the
  applied operator in its fact list, conditional or not, in FD's canonical order; FD's own state applies only
  those whose condition holds. Both views are kept (see :mod:`stepgym.envs.alfworld.native.engine`).
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

from stepgym.errors import CorruptDataError

Atom = tuple  # (predicate, arg, arg, ...)
atom_args = itemgetter(slice(1, None))  # atom_args(atom) == atom[1:], as a C-level callable for map()


_COMMENT = re.compile(r";[^\n]*")
_LISTS = (list, tuple)  # what tokenize() makes of a "(...)"


def tokenize(text: str) -> list[Any] | tuple[str, ...]:
    """The nested lists of ``text``, tokenised like FD's ``lisp_parser`` (lower case, ``;`` comments); a list
    without sub-lists (an atom) is a tuple, so it can be kept and hashed as it is.

    The text is cut at each ``(`` and each piece at its ``)``, so the words between two parentheses come from one
    ``str.split`` (str.split and re's ``\\s`` agree on what is space) instead of a Python step per word: a problem
    file has ~450 atoms and ~2,500 words."""
    if ";" in text:
        text = _COMMENT.sub("", text)
    pieces = text.replace("?", " ?").lower().split("(")
    if len(pieces) < 2 or (pieces[0] and not pieces[0].isspace()):
        raise CorruptDataError("PDDL text does not start with '('")
    stack: list[list[Any]] = []
    top: list[Any] = []
    root = top
    for piece in pieces[1:]:  # a list opens before each piece
        words, close, rest = piece.partition(")")
        if not close:  # it has sub-lists: its first words, then the sub-lists in the next pieces
            stack.append(top)
            top.append(top := words.split())
            continue
        top.append(tuple(words.split()))
        while (
            rest and not rest.isspace()
        ):  # words after a ")" belong to the enclosing list, which a ")" closes
            words, close, rest = rest.partition(")")
            top += words.split()
            if close:
                if not stack:
                    raise CorruptDataError("unbalanced ')' in PDDL text")
                top = stack.pop()
    if stack or len(root) != 1:
        raise CorruptDataError("unbalanced '(' in PDDL text")
    return root[0]


def typed_list(items: list[str], default: str = "object") -> list[tuple[str, str]]:
    """``[?a ?b - t ?c - u]`` → ``[(?a, t), (?b, t), (?c, u)]`` (FD's ``parse_typed_list``)."""
    names, dashes, types = items[0::3], items[1::3], items[2::3]
    if len(items) % 3 == 0 and dashes.count("-") == len(dashes) and "-" not in names:
        return list(zip(names, types, strict=True))  # one name per type, as objects are listed: read at once
    out: list[tuple[str, str]] = []
    start, n = 0, len(items)
    while start < n:
        try:
            i = items.index("-", start)
        except ValueError:
            out += [(name, default) for name in items[start:]]
            break
        typ = items[i + 1]
        out += [(name, typ) for name in items[start:i]]
        start = i + 2
    return out


# -- formulas -------------------------------------------------------------------------------------------------
# ("atom", pred, args) | ("not", f) | ("and", [f]) | ("or", [f]) | ("exists"/"forall", [(var, type)], f)


def parse_formula(node: Any) -> tuple:
    if not isinstance(node, _LISTS):
        raise CorruptDataError(f"unexpected PDDL token {node!r} in a condition")
    if not node:
        return ("and", [])
    tag = node[0]
    if tag in ("and", "or"):
        return (tag, [parse_formula(n) for n in node[1:]])
    if tag == "not":
        return ("not", parse_formula(node[1]))
    if tag == "imply":
        return ("or", [("not", parse_formula(node[1])), parse_formula(node[2])])
    if tag in ("exists", "forall"):
        return (tag, typed_list(node[1]), parse_formula(node[2]))
    return ("atom", tag, tuple(node[1:]))


def nnf(f: tuple, negated: bool = False) -> tuple:
    kind = f[0]
    if kind == "atom":
        return ("lit", negated, f[1], f[2])
    if kind == "not":
        return nnf(f[1], not negated)
    if kind in ("and", "or"):
        flip = {"and": "or", "or": "and"}[kind] if negated else kind
        return (flip, [nnf(p, negated) for p in f[1]])
    flip = {"exists": "forall", "forall": "exists"}[kind] if negated else kind
    return (flip, f[1], nnf(f[2], negated))


_fresh = itertools.count()


def dnf(f: tuple) -> list[tuple[list[tuple[str, str]], list[tuple]]]:
    """Disjuncts ``(extra parameters, literals)`` of an NNF formula; existential variables become parameters."""
    kind = f[0]
    if kind == "lit":
        return [([], [f[1:]])]
    if kind == "or":
        return [d for p in f[1] for d in dnf(p)]
    if kind == "and":
        out: list[tuple[list, list]] = [([], [])]
        for p in f[1]:
            out = [(a[0] + b[0], a[1] + b[1]) for a in out for b in dnf(p)]
        return out
    if kind == "exists":
        rename = {v: f"{v}@{next(_fresh)}" for v, _ in f[1]}
        body = _rename(f[2], rename)
        return [([(rename[v], t) for v, t in f[1]] + ps, lits) for ps, lits in dnf(body)]
    raise CorruptDataError("universal quantifiers in action preconditions are not supported")


def _rename(f: tuple, rename: dict[str, str]) -> tuple:
    kind = f[0]
    if kind == "lit":
        return ("lit", f[1], f[2], tuple(rename.get(a, a) for a in f[3]))
    if kind in ("and", "or"):
        return (kind, [_rename(p, rename) for p in f[1]])
    inner = {k: v for k, v in rename.items() if k not in {x for x, _ in f[1]}}
    return (kind, f[1], _rename(f[2], inner))


# -- domain and problem ---------------------------------------------------------------------------------------


@dataclass
class Effect:
    condition: list[tuple]  # literals (negated, pred, args)
    negated: bool
    pred: str
    args: tuple[str, ...]


@dataclass
class Schema:
    """One PDDL action: parameters, its precondition in DNF, its effects."""

    name: str
    params: list[tuple[str, str]]
    disjuncts: list[tuple[list[tuple[str, str]], list[tuple]]]
    effects: list[Effect]


@dataclass
class Domain:
    types: dict[str, str | None]  # type -> supertype
    schemas: list[Schema]
    fluents: frozenset[str] = field(default_factory=frozenset)
    _subtypes: dict[str, frozenset[str]] = field(default_factory=dict, repr=False, compare=False)

    def subtypes(self, typ: str) -> frozenset[str]:
        """``typ`` and the types below it (worked out once per type: every game shares the domain)."""
        known = self._subtypes.get(typ)
        if known is not None:
            return known
        out = {typ}
        changed = True
        while changed:
            changed = False
            for t, sup in self.types.items():
                if sup in out and t not in out:
                    out.add(t)
                    changed = True
        known = self._subtypes[typ] = frozenset(out)
        return known


def _parse_effects(node: Any, out: list[Effect], cond: list[tuple]) -> None:
    if not node:
        return
    tag = node[0]
    if tag == "and":
        for n in node[1:]:
            _parse_effects(n, out, cond)
    elif tag == "when":
        disj = dnf(nnf(parse_formula(node[1])))
        if len(disj) != 1 or disj[0][0]:
            raise CorruptDataError("only conjunctive effect conditions are supported")
        _parse_effects(node[2], out, cond + disj[0][1])
    elif tag in ("increase", "decrease", "assign", "scale-up", "scale-down"):
        return
    elif tag == "not":
        out.append(Effect(cond, True, node[1][0], tuple(node[1][1:])))
    elif tag == "forall":
        raise CorruptDataError("universal effects are not supported")
    else:
        out.append(Effect(cond, False, tag, tuple(node)[1:]))


def parse_domain(text: str) -> Domain:
    tree = tokenize(text)
    types: dict[str, str | None] = {"object": None}
    schemas: list[Schema] = []
    for part in tree[2:]:
        if not isinstance(part, _LISTS) or not part:
            continue
        if part[0] == ":types":
            for name, sup in typed_list(part[1:]):
                if name != "object":
                    types[name] = sup
        elif part[0] == ":action":
            fields = dict(zip(part[2::2], part[3::2], strict=False))
            params = typed_list(fields.get(":parameters", []))
            pre = fields.get(":precondition", [])
            disjuncts = dnf(nnf(parse_formula(pre)))
            effects: list[Effect] = []
            _parse_effects(fields.get(":effect", []), effects, [])
            schemas.append(Schema(part[1], params, disjuncts, effects))
    fluents = frozenset(e.pred for s in schemas for e in s.effects)
    return Domain(types, schemas, fluents)


@dataclass
class Problem:
    objects: dict[str, str]  # name -> type
    init: list[Atom]
    goal: tuple


def parse_problem(text: str) -> Problem:
    tree = tokenize(text)
    objects: dict[str, str] = {}
    init: list[Atom] = []
    goal: tuple = ("and", [])
    for part in tree[2:]:
        if not isinstance(part, _LISTS) or not part:
            continue
        if part[0] == ":objects":
            objects.update(typed_list(part[1:]))
        elif part[0] == ":init":
            # function values (total-cost, distances) and negated atoms are left out
            atoms = [atom for atom in part[1:] if atom[0] != "=" and atom[0] != "not"]
            if set(map(type, atoms)) - {tuple}:  # a sub-list or a bare word
                raise CorruptDataError(f"the :init of the PDDL problem holds a non-atom: {atoms!r:.200}")
            init += atoms
        elif part[0] == ":goal":
            goal = parse_formula(part[1])
    return Problem(objects, init, goal)
