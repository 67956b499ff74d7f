"""Measurements behind docs/webshop.md, shared by the CLI, the tests and ``benchmarks/webshop_bench.py``.

* :func:`target_hits`: how often a backend lists a goal's target product in its top 10 (and top 50) for the
  oracle's query (the goal's instruction without its price clause);
* :func:`backend_agreement`: top-10 agreement between two backends on the same queries;
* :func:`run_oracle`: the oracle policy over goals (reward distribution, exact purchases);
* :func:`noun_effect`: the effect of the dependency-free title-noun heuristic against spaCy's tagger on the
  reward of realistic purchases (the target, and each top-10 result of the oracle's query, bought with the goal's
  option values where the product has them).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from stepgym import schema
from stepgym.envs.webshop.catalogue import Catalogue
from stepgym.envs.webshop.goals import Goal
from stepgym.envs.webshop.reward import compute_reward
from stepgym.envs.webshop.search import SearchBackend

__all__ = ["backend_agreement", "compare_backends", "goal_query", "noun_effect", "run_oracle", "target_hits"]


def goal_query(goal: Goal) -> str:
    """The query the oracle tries first: the instruction without its price clause, lowercased."""
    return goal.instruction_text.split(", and price lower than")[0].lower()


def _hit_rates(goals: list[Goal], hits: list[list[str]]) -> dict[str, Any]:
    """How often each goal's target is in its search's top 10 and top 50 (``hits[i]``: goal ``i``'s results)."""
    top10 = sum(g.asin in h[:10] for g, h in zip(goals, hits, strict=True))
    top50 = sum(g.asin in h for g, h in zip(goals, hits, strict=True))
    n = max(1, len(goals))
    return {
        "goals": len(goals),
        "top10": top10,
        "top50": top50,
        "top10_rate": top10 / n,
        "top50_rate": top50 / n,
    }


def target_hits(backend: SearchBackend, goals: Iterable[Goal]) -> dict[str, Any]:
    goals = list(goals)
    return _hit_rates(goals, [backend.search(goal_query(g), 50) for g in goals])


def compare_backends(
    a: SearchBackend, b: SearchBackend, goals: Iterable[Goal], k: int = 10
) -> dict[str, Any]:
    """Target hits of both backends and their top-k agreement, searching each distinct query once per backend."""
    goals = list(goals)
    queries = list(dict.fromkeys(goal_query(g) for g in goals))
    ra = {q: a.search(q, 50) for q in queries}
    rb = {q: b.search(q, 50) for q in queries}

    def hits(res: dict[str, list[str]]) -> dict[str, Any]:
        return _hit_rates(goals, [res[goal_query(g)] for g in goals])

    agreement = _agreement([(ra[q][:k], rb[q][:k]) for q in queries], k)
    return {
        a.name: hits(ra),
        b.name: hits(rb),
        "agreement": {"queries": len(queries), "k": k, **agreement},
    }


def _agreement(pairs: list[tuple[list[str], list[str]]], k: int) -> dict[str, float]:
    """Over the (A, B) top-k pairs: mean overlap |A ∩ B| / k and Jaccard, share of identical top-1 and lists."""
    overlap = jaccard = same1 = same_list = 0.0
    for la, lb in pairs:
        sa, sb = set(la), set(lb)
        overlap += len(sa & sb) / k
        jaccard += len(sa & sb) / len(sa | sb) if sa | sb else 1.0
        same1 += la[:1] == lb[:1]
        same_list += la == lb
    n = max(1, len(pairs))
    return {
        "overlap": overlap / n,
        "jaccard": jaccard / n,
        "same_top1": same1 / n,
        "same_list": same_list / n,
    }


def backend_agreement(
    a: SearchBackend, b: SearchBackend, queries: Iterable[str], k: int = 10
) -> dict[str, Any]:
    """Mean overlap |A ∩ B| / k and Jaccard of the top-k lists, share of identical top-1 and identical lists."""
    queries = list(dict.fromkeys(queries))
    return {"queries": len(queries), **_agreement([(a.search(q, k), b.search(q, k)) for q in queries], k)}


def run_oracle(env: Any, task_ids: Iterable[str]) -> dict[str, Any]:
    """Play the env's expert action until the episode ends, for each task id."""
    n = won = exact = steps = 0
    rewards: list[float] = []
    for tid in task_ids:
        _, info = env.reset(options={"task_id": tid})
        while True:
            _, r, term, trunc, info = env.step(info[schema.EXPERT_ACTION])
            steps += 1
            if term or trunc:
                break
        n += 1
        rewards.append(float(r))
        won += bool(info[schema.WON])
        ri = info[schema.REWARD_INFO]
        goal = ri["goal"]
        opts = goal["goal_options"]
        exact += ri["bought_asin"] == goal["asin"] and (
            not isinstance(opts, dict) or ri["bought_options"] == opts
        )
    return {
        "episodes": n,
        "won": won,
        "exact_purchases": exact,
        "mean_reward": sum(rewards) / max(1, n),
        "steps": steps,
        "rewards": rewards,
    }


def noun_effect(
    catalogue: Catalogue, goals: Iterable[Goal], results: Any, *, option_match: str = "upstream"
) -> dict[str, Any]:
    """Reward with ``title_nouns='heuristic'`` vs ``'spacy'`` on purchases (needs spaCy's en_core_web_sm).

    ``results(query) -> list[asin]`` is the search used to pick the wrong products.
    """
    n = differ = r_type_differ = won_differ = 0
    abs_diff = 0.0
    seen: set[tuple[str, str]] = set()
    for g in goals:
        for asin in [g.asin, *results(goal_query(g))[:10]]:
            if (g.task_id, asin) in seen:
                continue
            seen.add((g.task_id, asin))
            product = catalogue.by_asin[asin]
            wanted = g.goal_options if isinstance(g.goal_options, dict) else {}
            options = {k: v for k, v in wanted.items() if v in product["options"].get(k, [])}
            price = catalogue.price(asin)
            rh, ih = compute_reward(
                product,
                g.as_reward_goal(),
                price,
                options,
                title_nouns="heuristic",
                option_match=option_match,
            )
            rs, is_ = compute_reward(
                product, g.as_reward_goal(), price, options, title_nouns="spacy", option_match=option_match
            )
            n += 1
            differ += rh != rs
            abs_diff += abs(rh - rs)
            r_type_differ += ih["r_type"] != is_["r_type"]
            won_differ += (rh == 1.0) != (rs == 1.0)
    d = max(1, n)
    return {
        "purchases": n,
        "reward_differs": differ,
        "reward_differs_rate": differ / d,
        "mean_abs_diff": abs_diff / d,
        "r_type_differs": r_type_differ,
        "won_differs": won_differ,
    }
