"""``StepGym/SearchQA-v0``: Search-R1's search-and-answer protocol over a real retriever, with step annotations.

Observation after ``reset``: Search-R1's prompt with the question (:func:`~stepgym.envs.searchqa.protocol.make_prompt`).
Action: the model's whole turn, e.g. ``"<think>…</think><search>first nobel prize physics</search>"``. A search is
answered with Search-R1's ``<information>Doc 1(Title: …) …</information>`` block of the top-``topk`` passages; an
answer ends the episode with reward = exact match (Search-R1's normalisation, any gold answer); anything else (no
tag, both tags, two searches, an unclosed tag, an empty query) is answered with Search-R1's invalid-action
sentence, and ``info[schema.INVALID_REASON]`` says exactly what was wrong. Nothing a model writes raises.

Turn budget (Search-R1's ``max_turns``): ``max_turns`` turns may search, and one more turn is allowed to answer,
so an episode lasts at most ``max_turns + 1`` turns. That total is the env's ``max_steps`` (the step-limit keyword
every stepgym env takes): ``SearchQAEnv(max_steps=5)`` is ``SearchQAEnv(max_turns=4)``. A search on that final turn is not executed (Search-R1's last
rollout runs with ``do_search=False``) and the episode is truncated with reward 0.

Ground truth in ``info`` (keys from :mod:`stepgym.schema`):

* every step: ``TASK_ID`` (``<dataset>/<id>``), ``TASK_TYPE`` (the dataset), ``GOAL`` (the question), ``WON``,
  ``FEEDBACK``, ``FORMAT_VALID``, ``ADMISSIBLE`` (format-valid), ``EFFECTIVE`` (the state key changed),
  ``INVALID_REASON``, ``PARSED_ACTION`` (``"search: q"`` / ``"answer: a"``), ``RETRIEVED_IDS`` (this turn's passage
  ids), ``SEARCH_PRODUCTIVE`` (one of them holds a gold answer as a whole-token span);
* ``STATE_KEY``: the gold-answer-bearing passages seen so far (sorted ids), for HotpotQA the supporting-fact pages
  seen, and whether/how the question was answered — equal across trajectories exactly when they have gathered the
  same evidence, which is what ProAS's graph and GiGPO's step groups compare; ``SUBGOAL_KEY`` its coarse reading
  (``searching`` / ``evidence`` / ``support1/2`` / ``answered:correct``);
* ``EXPERT_ACTION``: the oracle's next turn. It answers the first gold answer once a gold-bearing passage was seen
  (or on the last turn, or when no query finds one); before that it searches the first of these queries whose top-k
  brings an unseen gold-bearing passage: the question itself, the unseen HotpotQA supporting-fact titles, the titles
  of corpus passages that hold a gold answer. It knows the answer, so it is a hint for analyzers, not a baseline;
* at the end (answer or truncation): ``EXACT_MATCH``, ``F1`` and ``REWARD_INFO``.

Retrieval errors are not the model's fault: a dead server raises :class:`~stepgym.errors.ServiceUnavailableError`
from ``step`` once the client's deadline has passed (see :mod:`stepgym.envs.searchqa.client`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from stepgym import schema
from stepgym.envs.base import TextEnv, read_text_action
from stepgym.envs.options import env_config
from stepgym.envs.searchqa.corpus import Corpus
from stepgym.envs.searchqa.datasets import QARecord, load_questions, load_questions_file
from stepgym.envs.searchqa.factory import is_url, make_retriever, resolve_corpus
from stepgym.envs.searchqa.protocol import (
    INVALID_FEEDBACK,
    ParsedTurn,
    exact_match,
    f1_score,
    has_answer,
    make_prompt,
    parse_turn,
    render_information,
)
from stepgym.envs.searchqa.retrievers import MAX_QUERY_CHARS, Hit, Retriever
from stepgym.errors import DataNotFoundError, InvalidArgumentError

__all__ = ["MAX_TURN_CHARS", "SearchQAConfig", "SearchQAEnv", "read_turn"]

#: A Search-R1 turn is at most 500 tokens (~2-3k characters); longer text is junk, not a turn.
MAX_TURN_CHARS = 20_000
_EMPTY_INFORMATION = render_information([])


def read_turn(action: Any) -> tuple[str, str]:
    """``(turn, problem)``: the model's turn exactly as written (UTF-8 bytes decoded), or why it is unusable.

    Nothing is removed or replaced: Search-R1 parses, scores and searches the decoded text as generated, so an
    invisible character inside a tag or an answer changes the outcome here as it does upstream. The only guards
    are the type and :data:`MAX_TURN_CHARS`, which no turn of Search-R1's 500-token generator reaches.
    """
    return read_text_action(action, MAX_TURN_CHARS, noun="turn")


def step_budget(max_turns: int | None, max_steps: int | None) -> int:
    """Search-R1's ``max_turns`` from either keyword: ``max_steps`` counts the forced answer turn, so it is one more."""
    if max_steps is not None:
        if int(max_steps) < 1:
            raise InvalidArgumentError(f"max_steps must be >= 1 (the answer turn), got {max_steps}")
        if max_turns is not None and int(max_turns) != int(max_steps) - 1:
            raise InvalidArgumentError(
                f"max_turns={max_turns} contradicts max_steps={max_steps}: max_steps counts every turn, the "
                f"forced answer turn included (max_steps = max_turns + 1); pass one of them"
            )
        return int(max_steps) - 1
    turns = 4 if max_turns is None else int(max_turns)
    if turns < 0:
        raise InvalidArgumentError(f"max_turns must be >= 0, got {max_turns}")
    return turns


@dataclass(frozen=True)
class SearchQAConfig:
    """:class:`SearchQAEnv`'s less common settings (its docstring describes each); any of them may also be passed to
    the env by name."""

    corpus: str | os.PathLike[str] | Corpus | None = None
    data_root: str | os.PathLike[str] | None = None
    encoder: str = "minilm"
    index: str = "flat"
    retriever_options: dict[str, Any] | None = None
    timeout: float = 10.0
    deadline: float = 30.0
    questions: Sequence[QARecord] | str | os.PathLike[str] | None = None
    strict_format: bool = False
    expert: bool = True


class SearchQAEnv(TextEnv):
    """Search-QA as a Gymnasium env. See the module docstring for the contract.

    Args:
        dataset: a dataset name (``nq``, ``triviaqa``, ``popqa``, ``hotpotqa``, ``2wikimultihopqa``, ``musique``,
            ``bamboogle``) or several (``("nq", "hotpotqa")``: Search-R1's training mix).
        split: ``"train"`` or ``"test"`` (see :mod:`stepgym.envs.searchqa.datasets` for the fixed splits).
        retriever: ``"bm25"`` (default), ``"lucene"``, ``"dense"``, a server URL, or a :class:`Retriever`.
        topk: passages per search (3 in Search-R1).
        max_turns: turns that may search (Search-R1's ``max_turns``, default 4; one more turn may answer).
        max_steps: the step limit every stepgym env takes: all turns, the forced answer turn included, so
            ``max_steps = max_turns + 1`` (default 5). Pass either; both must agree.
        config: a :class:`SearchQAConfig` with the settings below (default: its defaults). Each of its fields may
            also be passed by name (``gym.make("StepGym/SearchQA-v0", corpus=..., expert=False)``, as presets and
            the command line do); a keyword wins over ``config``, an unknown name is one ``InvalidArgumentError``.

    :class:`SearchQAConfig` fields:
        corpus: the passage jsonl (default: the searchqa data root's ``wiki18_subset/corpus.jsonl``).
        data_root: the searchqa data folder (default: ``$STEPGYM_DATA/searchqa`` or the user cache).
        encoder, index, retriever_options: for ``retriever="dense"`` etc., see :func:`make_retriever`.
        timeout, deadline: for a server URL, the per-attempt timeout and the per-search deadline (seconds).
        questions: use these rows (a list of :class:`QARecord`, or a ``.jsonl``/``.json``/``.parquet`` file)
            instead of ``dataset``/``split``.
        strict_format: ``False`` (default) is Search-R1's rule exactly (cut at the first ``</search>``, else
            ``</answer>``; the first block wins); ``True`` is stepgym's stricter one-action-per-turn rule (a turn
            with two action tags, none, or an unclosed one is invalid; see docs/searchqa.md).
        expert: compute ``EXPERT_ACTION`` (costs a few retrievals per step, cached within the episode).

    Example (needs the Search-QA data, ``stepgym download searchqa``)::

        >>> import gymnasium as gym
        >>> import stepgym
        >>> from stepgym import schema
        >>> env = gym.make("StepGym/SearchQA-v0", split="test")
        >>> obs, info = env.reset(seed=0)
        >>> obs, reward, terminated, truncated, info = env.step("<think>Look it up.</think><search>Mehboob Khan</search>")
        >>> "<information>" in obs, reward, terminated
        (True, 0.0, False)
        >>> reply = f"<think>Found it.</think>{info[schema.EXPERT_ACTION]}"
        >>> reward, terminated = env.step(reply)[1:3]
        >>> reward, terminated
        (1.0, True)
    """

    options_class = SearchQAConfig

    def __init__(
        self,
        dataset: str | Sequence[str] = "nq",
        split: str = "test",
        retriever: str | Retriever = "bm25",
        topk: int = 3,
        max_turns: int | None = None,
        *,
        max_steps: int | None = None,
        render_mode: str | None = None,
        config: SearchQAConfig | None = None,
        **options: Any,
    ):
        cfg = env_config(SearchQAConfig, config, options, type(self))
        self.config = cfg
        corpus, data_root, questions = cfg.corpus, cfg.data_root, cfg.questions
        max_turns = step_budget(max_turns, max_steps)
        if not 1 <= int(topk) <= 100:
            raise ValueError(f"topk must be between 1 and 100, got {topk}")
        super().__init__(max_steps=max_turns + 1, render_mode=render_mode)
        if questions is None:
            tasks = load_questions(dataset, split, data_root)
        elif isinstance(questions, str | os.PathLike):
            tasks = load_questions_file(questions)
        else:
            tasks = list(questions)
        if not tasks:
            raise ValueError("no questions to play")
        self.tasks: tuple[QARecord, ...] = tuple(tasks)
        self._by_id = {t.task_id: t for t in self.tasks}
        self.dataset, self.split = dataset, split
        self.topk = int(topk)
        self.strict_format, self.use_expert = bool(cfg.strict_format), bool(cfg.expert)
        self.corpus: Corpus | None
        try:
            self.corpus = resolve_corpus(corpus, data_root)
        except DataNotFoundError:
            if not is_url(retriever) or corpus is not None:
                raise
            self.corpus = None  # a server holds the corpus; the oracle then skips its corpus-title queries
        self.retriever = make_retriever(
            retriever,
            corpus=self.corpus,
            encoder=cfg.encoder,
            index=cfg.index,
            timeout=cfg.timeout,
            deadline=cfg.deadline,
            **(cfg.retriever_options or {}),
        )
        self._owns_retriever = is_url(retriever)
        self._task: QARecord | None = None
        self._reset_episode()

    # -- public helpers -------------------------------------------------------------------------------------------
    @property
    def task_ids(self) -> list[str]:
        """Every task id, in the fixed evaluation order."""
        return [t.task_id for t in self.tasks]

    @property
    def task(self) -> QARecord | None:
        return self._task

    @property
    def max_turns(self) -> int:
        """Turns that may search (Search-R1's ``max_turns``): every turn but the forced answer turn."""
        return self.max_steps - 1

    # -- TextEnv hooks --------------------------------------------------------------------------------------------
    def step(self, action: Any) -> tuple[str, float, bool, bool, dict[str, Any]]:
        # The base class sanitises actions as commands (control characters dropped, whitespace collapsed, 1,000
        # characters); a Search-R1 turn is parsed, scored and searched exactly as written, so _step_action reads
        # the raw turn instead (see read_turn).
        self._raw_action = action
        return super().step(action)

    def _reset_episode(self) -> None:
        self._gold_seen: set[str] = set()
        self._support_seen: set[str] = set()
        self._answer: str | None = None
        self._em = 0.0
        self._expert_cache: dict[str, list[Hit]] = {}
        self._raw_action: Any = None

    def _reset_task(self, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        self._task = self._task_record(self.tasks, self._by_id, options)
        self._reset_episode()
        info = self._info(turn=None, hits=[], feedback="", final=False)
        return make_prompt(self._task.question), info

    def _step_action(self, action: str, problem: str) -> tuple[str, float, bool, dict[str, Any]]:
        assert self._task is not None
        text, problem = read_turn(self._raw_action)
        turn = (
            ParsedTurn("invalid", reason=problem) if problem else parse_turn(text, strict=self.strict_format)
        )
        if turn.kind == "search" and len(turn.content) > MAX_QUERY_CHARS:
            turn = ParsedTurn(
                "invalid",
                reason=f"the query is {len(turn.content)} characters long (the limit is {MAX_QUERY_CHARS})",
            )
        final = self._steps + 1 >= self.max_steps
        hits: list[Hit] = []
        reward, terminated = 0.0, False
        if turn.kind == "invalid":
            obs = INVALID_FEEDBACK
        elif turn.kind == "answer":
            self._answer = turn.content
            self._em = exact_match(turn.content, self._task.golden_answers)
            reward, terminated, obs = self._em, True, ""
        elif final:
            obs = _EMPTY_INFORMATION  # Search-R1's last turn does not search
        else:
            hits = self.retriever.search([turn.content], self.topk)[0]
            obs = render_information([h.contents for h in hits])
        info = self._info(turn=turn, hits=hits, feedback=obs, final=final or terminated)
        return obs, reward, terminated, info

    # -- annotations ----------------------------------------------------------------------------------------------
    def _gold_hits(self, hits: Sequence[Hit]) -> list[str]:
        assert self._task is not None
        return [h.id for h in hits if has_answer(h.contents, self._task.golden_answers)]

    def _state_key(self) -> str:
        assert self._task is not None
        answer = "none" if self._answer is None else ("correct" if self._em == 1.0 else "wrong")
        parts = [f"gold=[{','.join(sorted(self._gold_seen))}]"]
        if self._task.supporting_titles:
            parts.append(f"support=[{'|'.join(sorted(self._support_seen))}]")
        parts.append(f"answer={answer}")
        return ";".join(parts)

    def _subgoal_key(self) -> str:
        assert self._task is not None
        if self._answer is not None:
            return f"answered:{'correct' if self._em == 1.0 else 'wrong'}"
        parts = ["evidence" if self._gold_seen else "searching"]
        if self._task.supporting_titles:
            parts.append(f"support{len(self._support_seen)}/{len(self._task.supporting_titles)}")
        return "|".join(parts)

    def _info(
        self, *, turn: ParsedTurn | None, hits: Sequence[Hit], feedback: str, final: bool
    ) -> dict[str, Any]:
        task = self._task
        assert task is not None
        before = self._state_key()
        gold_ids = self._gold_hits(hits)
        self._gold_seen.update(gold_ids)
        support = set(task.supporting_titles)
        self._support_seen.update(
            t for t in (h.contents.partition("\n")[0].strip('"') for h in hits) if t in support
        )
        after = self._state_key()
        info: dict[str, Any] = {
            schema.TASK_ID: task.task_id,
            schema.TASK_TYPE: task.dataset,
            schema.GOAL: task.question,
            schema.WON: self._em == 1.0,
            schema.FEEDBACK: feedback,
            schema.STATE_KEY: after,
            schema.SUBGOAL_KEY: self._subgoal_key(),
            schema.RETRIEVED_IDS: [h.id for h in hits],
            schema.SEARCH_PRODUCTIVE: bool(gold_ids),
            schema.EXPERT_ACTION: self._expert_action(final) if self.use_expert else None,
        }
        if turn is not None:
            info.update(
                {
                    schema.FORMAT_VALID: turn.valid,
                    schema.ADMISSIBLE: turn.valid,
                    schema.EFFECTIVE: after != before,
                    schema.INVALID_REASON: turn.reason,
                    schema.PARSED_ACTION: f"{turn.kind}: {turn.content}" if turn.valid else None,
                }
            )
        if final:
            info[schema.EXACT_MATCH] = self._em
            info[schema.F1] = f1_score(self._answer, task.golden_answers) if self._answer is not None else 0.0
            info[schema.REWARD_INFO] = {
                "exact_match": self._em,
                "f1": info[schema.F1],
                "answer": self._answer,
                "golden_answers": list(task.golden_answers),
                "gold_passages_seen": sorted(self._gold_seen),
            }
        return info

    # -- the oracle -----------------------------------------------------------------------------------------------
    def _expert_action(self, final: bool) -> str | None:
        task = self._task
        assert task is not None
        if final or self._answer is not None:
            return None
        answer = f"<answer>{task.golden_answers[0]}</answer>"
        if self._gold_seen or self._steps + 1 >= self.max_steps:
            return answer
        for query in self._expert_queries():
            hits = self._expert_cache.get(query)
            if hits is None:
                hits = self._expert_cache[query] = self.retriever.search([query], self.topk)[0]
            titles = {h.contents.partition("\n")[0].strip('"') for h in hits}
            new_support = (titles & set(task.supporting_titles)) - self._support_seen
            if set(self._gold_hits(hits)) - self._gold_seen or new_support:
                return f"<search>{query}</search>"
        return answer

    def _expert_queries(self) -> list[str]:
        task = self._task
        assert task is not None
        queries = [task.question]
        queries += [t for t in task.supporting_titles if t not in self._support_seen]
        if self.corpus is not None and len(self.corpus) <= 1_000_000:
            for i in self.corpus.answer_passages(task.golden_answers, limit=3):
                if self.corpus.ids[i] not in self._gold_seen:
                    queries.append(self.corpus.title(i).strip('"'))
        return list(dict.fromkeys(q for q in queries if q.strip()))

    def close(self) -> None:
        if self._owns_retriever:
            self.retriever.close()
        super().close()
