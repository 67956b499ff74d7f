"""The native ALFWorld engine plays TextWorld's games byte for byte (a CI-sized sample; the script
``scripts/alfworld_native_equality.py`` checks every game), parses the grammar as TextWorld does, and restores
snapshots exactly."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest

import stepgym  # noqa: F401
from stepgym import schema
from stepgym.envs.alfworld.games import TASK_TYPES, list_games
from stepgym.envs.alfworld.native import NativeEngine
from stepgym.envs.alfworld.native.equality import compare_game, make_pair
from stepgym.envs.alfworld.native.grammar import parse_symbols
from stepgym.errors import CorruptDataError

pytestmark = pytest.mark.usefixtures("data_dir")


def _one_per_task_type(split: str) -> list[str]:
    games = list_games(split)
    return [next(g.task_id for g in games if g.task_type == t) for t in TASK_TYPES]


@pytest.mark.slow
def test_native_equals_textworld_on_a_sample_of_games():
    """Walkthrough + a random episode with junk, to the step limit, on one game per task type and split."""
    compared = 0
    for split, pick in (
        ("valid_unseen", slice(None)),
        ("valid_seen", slice(0, None, 2)),
        ("train", slice(1, None, 2)),
    ):
        native, reference = make_pair(split, max_steps=30)
        for i, task_id in enumerate(_one_per_task_type(split)[pick]):
            report = compare_game(native, reference, task_id, seeds=(100 + i,))
            assert report.differences == [], report.differences[:3]
            compared += report.steps
        native.close()
        reference.close()
    assert compared > 300


def test_won_walkthrough_and_info_keys_match_the_reference():
    native, reference = make_pair("valid_unseen")
    task_id = _one_per_task_type("valid_unseen")[1]
    report = compare_game(native, reference, task_id, seeds=())
    assert report.differences == []
    native.reset(options={"task_id": task_id})
    for action in native.walkthrough:
        _, reward, terminated, _, info = native.step(action)
    assert reward == 1.0 and terminated and info[schema.WON]


def _textworld_parse(text: str) -> list[tuple]:
    """TextWorld's own parse of a grammar string, in the native engine's symbol shapes."""
    from textworld.envs.pddl.textgen import (
        ConditionalSymbol,
        EvalSymbol,
        ListSymbol,
        NonterminalSymbol,
        TerminalSymbol,
        _parse_and_convert,
    )

    def conv(sym):
        if isinstance(sym, TerminalSymbol):
            return ("t", sym.symbol)
        if isinstance(sym, NonterminalSymbol):
            return ("nt", sym.symbol)
        if isinstance(sym, EvalSymbol):
            return ("eval", sym.expression)
        if isinstance(sym, ConditionalSymbol):
            return ("cond", conv(sym.expression), sym.given)
        if isinstance(sym, ListSymbol):
            return ("list", conv(sym.symbol))
        raise AssertionError(sym)

    return [s for s in map(conv, _parse_and_convert(text, rule_name="symbols")) if s != ("t", "")]


def _native_shape(sym: tuple) -> tuple:
    if sym[0] == "cond":
        expr = ("nt", sym[1][1]) if sym[1][0] == "nt" else ("eval", sym[1][2])
        return ("cond", expr, sym[2].source if sym[2] is not None else None)
    if sym[0] == "list":
        return ("list", _native_shape(sym[1]))
    return sym


def test_grammar_strings_parse_as_textworld_parses_them():
    from textworld.envs.pddl.logic import GameLogic

    texts = {"#intro#", "", " ", "\tx", '"quoted" text', "  //c\nb", "a{o.name}  b"}
    for game in list_games("valid_seen")[::10]:
        data = json.loads(game.game_file.read_text())
        logic = GameLogic(domain=data["pddl_domain"], grammar=data["grammar"])
        for action in logic.actions.values():
            texts.update((action.template, action.feedback_rule))
        for block in data["grammar"].split('"""')[1::2]:
            lines = [ln for ln in block.split("\n") if not ln.lstrip().startswith("#")]
            texts.update(r["rhs"] for rs in json.loads("\n".join(lines)).values() for r in rs)
    assert len(texts) > 60
    for text in texts:
        native = [_native_shape(s) for s in parse_symbols(text) if s != ("t", "")]
        assert native == _textworld_parse(text), text


def _play(engine: NativeEngine, rng: np.random.Generator, n: int) -> list[str]:
    actions = []
    state = engine._state
    for _ in range(n):
        cmds = state["admissible_commands"]
        action = cmds[int(rng.integers(len(cmds)))]
        state = engine.step(action)
        actions.append(action)
    return actions


def _view(state: dict) -> tuple:
    return (
        state["feedback"],
        state["admissible_commands"],
        state["won"],
        sorted(str(f) for f in state["facts"]),
    )


def test_snapshot_restore_equals_replaying_the_actions():
    games = list_games("valid_unseen")
    engine = NativeEngine()
    rng = np.random.default_rng(3)
    for game in games[::40]:
        engine.load(game.game_file)
        engine.reset()
        prefix = _play(engine, rng, 8)
        snap = engine.get_state()
        at_snap = _view(engine._state)
        suffix = _play(engine, rng, 8)
        end = _view(engine._state)
        restored = engine.set_state(snap)  # jump back mid-episode
        assert _view(restored) == at_snap
        for action in suffix:
            state = engine.step(action)
        assert _view(state) == end
        replay = NativeEngine()  # the same actions from a fresh reset
        replay.load(game.game_file)
        replay.reset()
        for action in prefix + suffix:
            state = replay.step(action)
        assert _view(state) == end
        other = games[-1]  # a snapshot also restores after another game was loaded
        engine.load(other.game_file)
        engine.reset()
        assert _view(engine.set_state(snap)) == at_snap


def test_engine_level_unknown_command_is_nothing_happens_like_textworld():
    from stepgym.envs.alfworld.engine import AlfredEngine

    game = list_games("valid_unseen")[0]
    native, reference = NativeEngine(), AlfredEngine()
    for engine in (native, reference):
        engine.load(game.game_file)
        engine.reset()
    a, b = native.step("fly to the moon"), reference.step("fly to the moon")
    assert a["feedback"] == b["feedback"] == "Nothing happens."
    assert a["admissible_commands"] == b["admissible_commands"]


def test_native_engine_plays_without_importing_textworld():
    import subprocess
    import sys

    game = list_games("valid_unseen")[0].game_file
    code = (
        "import sys\n"
        "from stepgym.envs.alfworld.native import NativeEngine\n"
        f"e = NativeEngine(); e.load({str(game)!r}); s = e.reset()\n"
        "s = e.step(s['admissible_commands'][0])\n"
        "heavy = [m for m in sys.modules if m.split('.')[0] in ('textworld', 'tatsu', 'fast_downward', 'alfworld')]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_engine_choice_is_validated(tmp_path):
    with pytest.raises(ValueError, match="unknown ALFWorld engine"):
        gym.make("StepGym/ALFWorld-v0", split="valid_unseen", engine="fast")
    bad = tmp_path / "game.tw-pddl"
    bad.write_text('{"pddl_domain": "(define", "grammar": "", "pddl_problem": ""}')
    engine = NativeEngine()
    with pytest.raises(CorruptDataError):
        engine.load(bad)
    with pytest.raises(RuntimeError, match="load"):
        NativeEngine().reset()


def test_env_snapshot_restore_equals_replaying_the_actions():
    """Env-level snapshots include the step counter, the expert's memory and the env's generator: restoring one
    (in the same env, or in a fresh env) and playing on gives every step exactly as the uninterrupted episode."""
    from stepgym.envs.alfworld.env import ALFWorldEnv

    env = ALFWorldEnv(split="valid_unseen", max_steps=20)
    rng = np.random.default_rng(3)
    for task_id in env.task_ids[:3]:
        _, info = env.reset(seed=7, options={"task_id": task_id})
        for _ in range(6):
            info = env.step(_pick(rng, info))[-1]
        snap = env.get_state()
        actions, played = [], []
        for _ in range(14):
            actions.append(_pick(rng, info))
            out = env.step(actions[-1])
            played.append(out)
            info = out[-1]
            if out[2] or out[3]:
                break
        for target in (env, ALFWorldEnv(split="valid_unseen", max_steps=20)):
            target.set_state(snap)
            assert [target.step(a) for a in actions] == played


def _pick(rng: np.random.Generator, info: dict) -> str:
    admissible = info["stepgym/admissible_actions"]
    return "jump" if rng.random() < 0.2 else admissible[int(rng.integers(len(admissible)))]


def test_env_snapshots_need_the_native_engine():
    from stepgym.envs.alfworld.env import ALFWorldEnv

    env = ALFWorldEnv(split="valid_unseen", engine="textworld", expert=False)
    env.reset(options={"task_index": 0})
    with pytest.raises(NotImplementedError, match="native"):
        env.get_state()


def _grounder_in_play(task_id: str, steps: int):
    """A fresh engine's grounder and its true atoms after ``steps`` walkthrough steps of ``task_id``."""
    engine, _ = _engine_in_play(task_id, steps)
    return engine._game.grounder, engine._true


def test_reachability_from_a_played_state_equals_the_full_exploration():
    """``Grounder.reaches`` derives the asked atom on demand, from the current state; it must answer like FD's
    full exploration from the initial state, for reachable and unreachable atoms."""
    games = list_games("valid_seen")
    task_ids = [
        next(g.task_id for g in games if g.task_type == t) for t in ("pick_heat_then_place_in_recep",)
    ]
    task_ids.append(_one_per_task_type("valid_unseen")[3])
    checked = {True: 0, False: 0}
    for task_id in task_ids:
        reference, _ = _grounder_in_play(task_id, 0)
        grounder, state = _grounder_in_play(task_id, 4)
        for pred in ("ishot", "iscool", "isclean", "holds", "objectatlocation", "inreceptacle"):
            full = reference.reachable(pred)
            atoms = sorted(a for a in full if a[0] == pred)[:12]
            # unreachable candidates: the reachable atoms' arguments shifted onto other objects
            objects = sorted({x for a in atoms for x in a[1:]})
            atoms += [(pred, *objects[i : i + len(a) - 1]) for i, a in enumerate(atoms[:12])]
            for atom in atoms:
                grounder._reach_memo.clear()  # every question is derived again
                assert grounder.reaches(atom, state) == (atom in full), atom
                checked[atom in full] += 1
    assert checked[True] > 20 and checked[False] > 20, checked


# -- the engine's fast paths against their plain definitions ---------------------------------------------------


def _brute_force(grounder, params, literals, facts, init):
    """Every binding of ``params`` (by type) satisfying ``literals``, by trying them all: the definition the
    generated joins must meet (as a set: the join's order is its own)."""
    import itertools

    from stepgym.envs.alfworld.native.ground import Tables

    assert isinstance(facts, Tables)
    free = [(p, t) for p, t in params if p not in init]
    out = set()
    for objs in itertools.product(*(grounder._by_type.get(t, []) for _, t in free)):
        b = {**init, **dict(zip([p for p, _ in free], objs, strict=True))}
        ok = True
        for negated, pred, args in literals:
            vals = tuple(b.get(a, a) for a in args)
            if pred == "=":
                holds = vals[0] == vals[1]
            else:
                table = (
                    facts.data.get(pred, ()) if pred in grounder.fluents else grounder.static.get(pred, ())
                )
                holds = vals in table
            if holds == negated:
                ok = False
                break
        if ok:
            out.add(tuple(sorted(b.items())))
    return out


def test_generated_joins_equal_brute_force_enumeration():
    """Repeated variables, constants, pre-bound variables, equality and negated literals, and ``limit``."""
    from stepgym.envs.alfworld.native.ground import _Plan

    engine, _ = _engine_in_play(_one_per_task_type("valid_seen")[0], 3)
    grounder, true = engine._game.grounder, engine._true
    agent = grounder._by_type["agent"][0]
    rec, loc = sorted(grounder.static["receptacleatlocation"])[0]
    cases = [
        ([("?a", "agent"), ("?l", "location")], [(False, "atlocation", ("?a", "?l"))], {}),
        # a variable twice in one literal: bound by its first occurrence, compared at its second
        ([("?x", "object")], [(False, "atlocation", ("?x", "?x"))], {}),
        ([("?x", "object")], [(False, "receptacleatlocation", ("?x", "?x"))], {}),
        (
            [("?r", "receptacle"), ("?l", "location"), ("?r2", "receptacle")],
            [
                (False, "receptacleatlocation", ("?r", "?l")),
                (False, "receptacleatlocation", ("?r2", "?l")),
                (True, "=", ("?r", "?r2")),
                (True, "opened", ("?r",)),
            ],
            {},
        ),
        (
            [("?o", "object"), ("?r", "receptacle")],
            [(False, "inreceptacle", ("?o", "?r")), (False, "receptacleatlocation", ("?r", loc))],
            {},
        ),
        (
            [("?l", "location"), ("?r", "receptacle")],
            [(False, "receptacleatlocation", ("?r", "?l"))],
            {"?r": rec},
        ),
        ([("?a", "agent"), ("?o", "object")], [(True, "holds", ("?a", "?o"))], {"?a": agent}),
    ]
    for params, literals, init in cases:
        plan = _Plan(params, literals, grounder, tuple(init))
        got = grounder.assignments(plan, true, dict(init))
        assert len({tuple(sorted(b.items())) for b in got}) == len(got)  # no duplicates
        assert {tuple(sorted(b.items())) for b in got} == _brute_force(grounder, params, literals, true, init)
        if len(got) > 1:
            assert grounder.assignments(plan, true, dict(init), limit=1) == got[:1]


def _engine_in_play(task_id: str, steps: int) -> tuple[NativeEngine, list[str]]:
    game = next(g for g in list_games(task_id.split("/")[0]) if g.task_id == task_id)
    engine = NativeEngine()
    engine.load(game.game_file)
    engine.reset()
    for action in engine.walkthrough[:steps]:
        engine.step(action)
    return engine, engine.walkthrough


def test_noop_probe_effects_and_cached_command_texts_equal_their_definitions():
    """``applicable`` leaves out noops by a probe, not by the SAS effects; actions without conditional effects
    get their SAS effects by a short rule; command texts are cached by the parameters their template reads. On
    every state of two walkthroughs, each must equal the general rule: FD's effect translation; the text
    derived from the template."""
    from stepgym.envs.alfworld.native.ground import Grounder

    checked = {True: 0, False: 0}
    # the lettuce game: cooling lettuce would delete ishot(lettuce), which no action can reach (kept out)
    lettuce = "valid_seen/pick_clean_then_place_in_recep-Lettuce-None-Fridge-19/trial_T20190908_100138_446072"
    for task_id in [*_one_per_task_type("valid_unseen")[2:4], lettuce]:
        engine, walkthrough = _engine_in_play(task_id, 0)
        for action in [*walkthrough, None]:
            game = engine._game
            grounder, true = game.grounder, engine._true
            for si, di, plan, *_ in grounder._action_plans:
                for name, b in grounder.assignments(plan, true):
                    op = (name, si, b, di)
                    fresh = Grounder(grounder.domain, _problem_of(engine))
                    general = fresh._sas_effects_general(op, true)
                    assert grounder._sas_effects_unconditional(op, true) == general, name
                    expected = bool(general)
                    probe = grounder._probes[si][di]
                    assert (probe is True or grounder._changes_something(op, probe, true)) == expected, name
                    checked[expected] += 1
            for op in engine._ops:
                schema = grounder.domain.schemas[op[1]]
                mapping = {(p.lstrip("?"), t): op[2][p] for p, t in schema.params}
                template = game.grammar.actions[schema.name].template
                assert engine._command(op) == engine._derive(template, mapping)
                if schema.name == "gotolocation":  # its guard (the receptacle is at the goal) made to fail
                    b = {**op[2], "?lend": op[2]["?lstart"]}
                    mapping = {(p.lstrip("?"), t): b[p] for p, t in schema.params}
                    got = engine._derive_command(game.templates[op[1]], b)
                    assert got == engine._derive(template, mapping) == "go to nothing", got
            if action is not None:
                engine.step(action)
    assert checked[True] > 100 and checked[False] > 3, checked


def _problem_of(engine: NativeEngine):
    from stepgym.envs.alfworld.native.pddl import parse_problem

    with open(engine.game_file, encoding="utf-8") as f:
        return parse_problem(json.load(f)["pddl_problem"])


def test_grammar_expressions_read_like_eval():
    from stepgym.envs.alfworld.native.engine import Entity, _expression

    ents = [Entity("apple_bar_1", "object", "apple 1"), Entity("desk_bar_2", "receptacle", "desk 2")]
    for source in ("o", "o.name ", "o.indefinite + ' ' + o.name", "r.name.upper() + str(len(o.name))"):
        expected = eval(source, {}, {"o": ents[0], "r": ents[1]})
        assert _expression(source, ("o", "r"))(*ents) == expected
    # a placeholder that is no Python name (PDDL allows "l-start") cannot be read, but must not break the rest
    assert _expression("o.name", ("l-start", "o"))(ents[1], ents[0]) == "apple 1"


def _keys_of(key_facts, targets) -> tuple:
    return (*key_facts.keys(targets), key_facts.world(), key_facts.location(), key_facts.progress(targets))


def test_key_facts_kept_step_by_step_equal_the_keys_of_the_whole_fact_list():
    """The native engine updates what the keys read from each step's added and removed facts; that must give the
    keys of the whole fact list after every step, after snapshots are restored, and after a new reset (which
    also equals the first one: playing never changes the game's kept initial state)."""
    from stepgym.envs.alfworld.state import KeyFacts, TaskTargets, fact_texts

    games = list_games("valid_seen")
    engine = NativeEngine()
    rng = np.random.default_rng(11)
    seen_progress = 0
    for game in games[::35]:
        targets = TaskTargets(game.task_params())
        engine.load(game.game_file)
        first = None
        for _ in range(3):  # later resets start from copies of the game's kept initial views
            state = engine.reset()
            first = first or _view(state)
            assert _view(state) == first
            snaps = []
            for _ in range(25):
                whole = _keys_of(KeyFacts(map(fact_texts, state["facts"])), targets)
                assert _keys_of(engine.key_facts(), targets) == whole
                seen_progress += bool(whole[-1])
                snaps.append((engine.get_state(), whole))
                cmds = state["admissible_commands"]
                state = engine.step(cmds[int(rng.integers(len(cmds)))])
            for snap, whole in snaps[::6]:
                engine.set_state(snap)
                assert _keys_of(engine.key_facts(), targets) == whole
    assert seen_progress > 10


def test_key_facts_are_a_multiset_of_facts():
    """Adding a fact twice and discarding it once keeps it; discarding it again restores the keys before."""
    from stepgym.envs.alfworld.state import KeyFacts, TaskTargets, describe_fact

    targets = TaskTargets({"object_target": "Apple", "parent_target": "Fridge"})
    facts = [
        describe_fact("atlocation", ["agent1 ", "loc 3"]),
        describe_fact("receptacleatlocation", ["fridge 1", "loc 3"]),
        describe_fact("inreceptacle", ["apple 1", "fridge 1"]),
    ]
    keys = KeyFacts(facts)
    before = _keys_of(keys.copy(), targets)
    assert before[1] == "at(fridge 1); in(apple 1, fridge 1)"
    opened = describe_fact("opened", ["fridge 1"])
    keys.add(opened)
    keys.add(opened)
    keys.add(facts[2])
    keys.discard(opened)
    keys.discard(facts[2])
    assert keys.subgoal_key(targets) == "at(fridge 1 (open)); in(apple 1, fridge 1)"
    keys.discard(opened)
    assert _keys_of(keys, targets) == before


def _lisp_reference(text: str) -> list:
    """FD's ``lisp_parser`` word by word: the reading ``pddl.tokenize`` must give (it cuts the text in bulk and
    makes a list without sub-lists a tuple)."""
    import re

    words = (
        re.sub(r";[^\n]*", "", text)
        .replace("?", " ?")
        .lower()
        .replace("(", " ( ")
        .replace(")", " ) ")
        .split()
    )
    if not words or words[0] != "(":
        raise CorruptDataError("no (")
    stack: list[list] = [[]]
    for word in words:
        if word == "(":
            stack.append([])
        elif word == ")":
            if len(stack) < 2:
                raise CorruptDataError("unbalanced )")
            done = stack.pop()
            stack[-1].append(done if any(isinstance(x, (list, tuple)) for x in done) else tuple(done))
        else:
            stack[-1].append(word)
    if len(stack) != 1 or len(stack[0]) != 1:
        raise CorruptDataError("unbalanced (")
    return stack[0][0]


def test_pddl_reading_equals_a_word_by_word_reading_and_rejects_unbalanced_text():
    from stepgym.envs.alfworld.native.pddl import parse_problem, tokenize, typed_list

    texts = ["(a)", "()", "(())", "( a (B ?x)() c ;note (\n d)", " (a(b)c(d)e)\n", "(a\t(b\n))  "]
    texts += [json.loads(g.game_file.read_text())["pddl_problem"] for g in list_games("valid_unseen")[::40]]
    for text in texts:
        assert tokenize(text) == _lisp_reference(text), text[:80]
    for bad in ["", "a (b)", "(a", "(a))", "(a) (b)", "(a) b", ")", "((a)"]:
        with pytest.raises(CorruptDataError):
            _lisp_reference(bad)
        with pytest.raises(CorruptDataError, match="PDDL text"):
            tokenize(bad)
    problem = parse_problem("(define (problem p) (:objects a - t) (:init (P a) (= (f a) 2) (not (q a))))")
    assert problem.init == [("p", "a")] and problem.objects == {"a": "t"}
    with pytest.raises(CorruptDataError, match="non-atom"):
        parse_problem("(define (problem p) (:init (p a) (q (a))))")
    # FD's typed lists: a type covers the names before it; names after the last type get the default
    assert typed_list(["a", "-", "t", "b", "-", "u"]) == [("a", "t"), ("b", "u")]
    assert typed_list(["a", "b", "-", "t", "c"]) == [("a", "t"), ("b", "t"), ("c", "object")]
    assert typed_list(["a", "-", "t", "b", "c", "d"]) == [
        ("a", "t"),
        ("b", "object"),
        ("c", "object"),
        ("d", "object"),
    ]
    assert typed_list(["a", "-", "-", "b"]) == [("a", "-"), ("b", "object")]


def test_grammar_parts_shared_by_games_are_parsed_once_and_a_broken_grammar_is_an_error():
    from stepgym.envs.alfworld.native.grammar import parse_grammar

    games = [g for g in list_games("valid_unseen") if g.task_type == "pick_and_place_simple"][:2]
    first, second = (parse_grammar(json.loads(g.game_file.read_text())["grammar"]) for g in games)
    assert first.rules["task"][0].symbols != second.rules["task"][0].symbols  # each game's own task
    assert first.rules["examineObject.feedback"] == second.rules["examineObject.feedback"]
    assert first.rules["look.feedback"][0] is second.rules["look.feedback"][0]  # shared, parsed once
    assert first.actions["gotolocation"] is second.actions["gotolocation"]

    text = (
        '# a comment\ngrammar :: """\n  {"intro": [{"rhs": "#hello#"}], "hello": [{"rhs": "hi {o.name}"}]}\n""";\n'
        'action Look {\n  template :: "look";\n  # about the feedback\n  feedback :: """\n    #hello#\n  """;\n'
        '  grammar :: """\n  # not a rule\n  {"bye": [{"condition": "at(o:object)", "rhs": "bye"}]}\n  """;\n}\n'
    )
    grammar = parse_grammar(text)
    assert list(grammar.rules) == ["intro", "hello", "bye"] and list(grammar.actions) == ["look"]
    assert grammar.actions["look"].template == [("t", "look")]
    assert grammar.actions["look"].feedback == parse_symbols("#hello#\n")
    assert grammar.rules["bye"][0].condition.preds == (("at", (("o", "object"),)),)
    # an action block without its "}", an unterminated """ string, a stray word, a field without its ";"
    broken = [
        text[: text.rindex("}")],
        text[: text.rindex('"""')],
        text + "actions X {}",
        text.replace('look";', "look"),
    ]
    for bad in broken:
        with pytest.raises(CorruptDataError, match="malformed game grammar"):
            parse_grammar(bad)
