"""Search-QA's value oracle: has a gold answer been gathered, and did the final answer score exact match?

Search-QA has no meaningful action count to success (a model may answer at once), so its value is a *stage*:

* 2.0 — no passage retrieved so far in the episode holds a gold answer;
* 1.0 — one does (the answer is available: one answer turn from success);
* 0.0 — answered with exact match (won); a wrong answer makes success unreachable (best reward 0.0).

The gain is the sign of the stage change (``unit_gain``): +1.0 on the search that first retrieves an
answer-bearing passage and on an answer that scores EM, -1.0 on a wrong answer (success made unreachable, whether or
not the answer was available), 0.0 on everything else (another search, an invalid turn). The turn budget is not
part of the value (as for every env): the truncating turn is neutral.

The oracle reads only the turn's retrieved passage ids (``RETRIEVED_IDS``, looked up in the env's corpus), the
parsed answer (``PARSED_ACTION``) and the task's gold answers, and scores them itself (``has_answer``,
``exact_match``); it never reads the env's own flags. It keeps the episode's evidence, so it runs on every step (a
dictionary lookup and a string scan per retrieved passage) instead of being cached by state key.
"""

from __future__ import annotations

from typing import Any

from stepgym import schema
from stepgym.envs.oracle import Remember, Value
from stepgym.envs.searchqa.protocol import exact_match, has_answer
from stepgym.errors import ValueOracleError

__all__ = ["SearchQAOracle"]

_ANSWER = "answer: "


class SearchQAOracle:
    """See the module docstring (``budget`` is not needed and ignored)."""

    unit_gain = True
    cacheable = False

    def __init__(self, env: Any, budget: int = 0):
        if env.corpus is None:
            raise ValueOracleError(
                "ValueWrapper on Search-QA reads the retrieved passages from the corpus: pass corpus= (the jsonl "
                "the retriever server indexes) when the retriever is a URL"
            )
        self.env = env
        self._row = {pid: i for i, pid in enumerate(env.corpus.ids)}
        self._gold = False

    def value(self, info: dict[str, Any], remember: Remember) -> Value:
        golds = self.env.task.golden_answers
        if info[schema.STEP_INDEX] == 0:
            self._gold = False
        contents = self.env.corpus.contents
        for pid in info.get(schema.RETRIEVED_IDS, ()):
            if not self._gold and has_answer(contents[self._row[pid]], golds):
                self._gold = True
        parsed = info.get(schema.PARSED_ACTION) or ""
        if parsed.startswith(_ANSWER):
            if exact_match(parsed[len(_ANSWER) :], golds):
                return Value.won()
            return Value.unreachable()
        return Value(1.0 if self._gold else 2.0, True, True, 1.0)
