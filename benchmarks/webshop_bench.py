"""WebShop speed and search quality: text env, search backends, site env, index builds, in one run.

Measured (1000-product catalogue, synthetic goals):
* index build time per backend (into a fresh temporary cache) and catalogue/goal load time;
* search latency per backend on the goals' oracle queries (each distinct query once), and the share of goals whose
  target is in the top 10 / top 50, and the two backends' top-10 agreement;
* text env: steps/s and resets/s playing the oracle (search, paging, options, buy) and a random-clickable policy;
* site env (real HTTP server + headless Chromium): steps/s playing the oracle, and the ratio to the text env;
* with ``--upstream PATH`` (a princeton-nlp/WebShop checkout; needs flask and beautifulsoup4): the cost of
  producing one observation the upstream way (Flask/Jinja template render + BeautifulSoup text extraction, what
  upstream's ``SimServer``/``WebAgentTextEnv`` do on every step) against stepgym's page model, on the same pages.

Run: ``STEPGYM_DATA=../shared/data python benchmarks/webshop_bench.py [--no-lucene] [--no-browser] [--upstream DIR]``
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import tempfile
import time
from pathlib import Path

import gymnasium as gym
import numpy as np

import stepgym  # noqa: F401 - registers the envs
from stepgym import schema
from stepgym.envs.webshop.analysis import compare_backends, goal_query
from stepgym.envs.webshop.catalogue import load_catalogue
from stepgym.envs.webshop.core import find_catalogue, shared_core
from stepgym.envs.webshop.goals import build_synthetic_goals
from stepgym.envs.webshop.search import make_backend


def _latency(backend, queries: list[str]) -> dict[str, float]:
    times = []
    for q in queries:
        t0 = time.perf_counter()
        backend.search(q, 50)
        times.append(time.perf_counter() - t0)
    ms = np.array(times) * 1000
    return {
        "mean_ms": float(ms.mean()),
        "median_ms": float(np.median(ms)),
        "p95_ms": float(np.percentile(ms, 95)),
        "queries_per_s": float(len(ms) / (ms.sum() / 1000)),
    }


def bench_search(use_lucene: bool) -> dict:
    root = Path(os.environ.get("STEPGYM_DATA", "../shared/data")) / "webshop"
    t0 = time.perf_counter()
    catalogue = load_catalogue(find_catalogue(root))
    t_cat = time.perf_counter() - t0
    t0 = time.perf_counter()
    goals = build_synthetic_goals(catalogue, root / "data" / "items_ins_v2_1000.json")
    t_goals = time.perf_counter() - t0
    out: dict = {"catalogue_load_s": t_cat, "goals_build_s": t_goals, "n_goals": len(goals)}
    queries = list(dict.fromkeys(goal_query(g) for g in goals))
    backends = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in ["bm25s"] + (["lucene"] if use_lucene else []):
            t0 = time.perf_counter()
            backend = make_backend(name, catalogue, cache_root=Path(tmp) / name)
            out[f"{name}_build_s"] = backend.build_seconds
            out[f"{name}_init_s"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            make_backend(name, catalogue, cache_root=Path(tmp) / name)
            out[f"{name}_cached_init_s"] = time.perf_counter() - t0
            backend.search(queries[0])  # warm up (JIT for Lucene)
            out[f"{name}_latency"] = _latency(backend, queries)
            backends[name] = backend
        if use_lucene:
            cmp = compare_backends(backends["bm25s"], backends["lucene"], goals)
            out["hits"] = {k: v for k, v in cmp.items() if k != "agreement"}
            out["agreement@10"] = cmp["agreement"]
        else:
            from stepgym.envs.webshop.analysis import target_hits

            out["hits"] = {"bm25s": target_hits(backends["bm25s"], goals)}
    return out


def _play(env, tasks: list[str], policy: str, rng: np.random.Generator) -> tuple[int, float, float]:
    steps, t_steps, t_resets = 0, 0.0, 0.0
    for tid in tasks:
        t0 = time.perf_counter()
        _, info = env.reset(options={"task_id": tid})
        t_resets += time.perf_counter() - t0
        while True:
            if policy == "oracle":
                a = info[schema.EXPERT_ACTION]
            else:
                acts = info[schema.ADMISSIBLE_ACTIONS]
                a = acts[int(rng.integers(len(acts)))]
                if a.startswith("search["):
                    a = f"search[{goal_query(env.goal)}]"
            t0 = time.perf_counter()
            _, _, term, trunc, info = env.step(a)
            t_steps += time.perf_counter() - t0
            steps += 1
            if term or trunc:
                break
    return steps, t_steps, t_resets


def bench_envs(n_text: int, n_site: int, use_browser: bool) -> dict:
    out: dict = {}
    t0 = time.perf_counter()
    env = gym.make("StepGym/WebShop-v0", split="all").unwrapped
    out["text_env_make_s"] = time.perf_counter() - t0
    rng = np.random.default_rng(0)
    tasks = env.task_ids[:: max(1, len(env.task_ids) // n_text)][:n_text]
    for policy in ("oracle", "random"):
        steps, ts, tr = _play(env, tasks, policy, rng)
        out[f"text_{policy}"] = {
            "episodes": len(tasks),
            "steps": steps,
            "steps_per_s": steps / ts,
            "resets_per_s": len(tasks) / tr,
        }
    if use_browser:
        t0 = time.perf_counter()
        site = gym.make("StepGym/WebShopSite-v0", split="all").unwrapped
        out["site_env_make_s"] = time.perf_counter() - t0
        try:
            stasks = tasks[:n_site]
            steps, ts, tr = _play(site, stasks, "oracle", rng)
            out["site_oracle"] = {
                "episodes": len(stasks),
                "steps": steps,
                "steps_per_s": steps / ts,
                "resets_per_s": len(stasks) / tr,
            }
            out["text_over_site_speed"] = (
                out["text_oracle"]["steps_per_s"] / out["site_oracle"]["steps_per_s"]
            )
        finally:
            site.close()
    return out


def bench_upstream_render(upstream: Path, n_goals: int) -> dict:
    """Per-page observation cost: upstream's template+BeautifulSoup path vs stepgym's page model."""
    from bs4 import BeautifulSoup
    from bs4.element import Comment
    from flask import Flask, render_template_string

    from stepgym.envs.webshop.engine import SUB_PAGES, ShopState

    tdir = upstream / "web_agent_site" / "templates"
    templates = {
        name: (tdir / f"{name}.html").read_text()
        for name in (
            "search_page",
            "results_page",
            "item_page",
            "description_page",
            "features_page",
            "review_page",
        )
    }
    app = Flask("upstream_baseline")
    for rule, ep in [
        ("/<session_id>", "index"),
        ("/search_results/<session_id>/<keywords>/<page>", "search_results"),
        ("/item_page/<session_id>/<asin>/<keywords>/<page>/<options>", "item_page"),
        ("/item_sub_page/<session_id>/<asin>/<keywords>/<page>/<sub_page>/<options>", "item_sub_page"),
        ("/done/<session_id>/<asin>/<options>", "done"),
    ]:
        app.add_url_rule(rule, ep, lambda **kw: "")

    def visible(el) -> bool:
        return el.parent.name not in {
            "style",
            "script",
            "head",
            "title",
            "meta",
            "[document]",
        } and not isinstance(el, Comment)

    def upstream_text(html: str) -> str:
        soup = BeautifulSoup(html, "html.parser")
        _ = (
            soup.find_all(class_="btn"),
            soup.find_all(class_="product-link"),
            soup.select('input[type="radio"]'),
        )
        texts = BeautifulSoup(html, "html.parser").find_all(string=True)
        return " [SEP] ".join(t.strip() for t in filter(visible, texts) if t != "\n")

    core = shared_core(None, "synthetic", "bm25s")
    eng, cat = core.engine, core.catalogue
    jobs = []
    for g in core.goals[:: max(1, len(core.goals) // n_goals)][:n_goals]:
        q = eng.expert_query(g)
        res = eng.results(q)
        p = cat.by_asin[g.asin]
        common = {"session_id": "abc", "instruction_text": g.instruction_text}
        jobs.append((ShopState(), g, "search_page", common))
        jobs.append(
            (
                ShopState("results", q, 1),
                g,
                "results_page",
                {
                    **common,
                    "products": [cat.by_asin[a] for a in res[:10]],
                    "keywords": q.split(" "),
                    "page": 1,
                    "total": len(res),
                },
            )
        )
        item = {**common, "product_info": p, "keywords": q, "page": 1, "asin": g.asin, "options": {}}
        jobs.append((ShopState("item", q, 1, g.asin), g, "item_page", {**item, "show_attrs": False}))
        for sub, tpl in zip(SUB_PAGES, ("description_page", "features_page", "review_page"), strict=True):
            jobs.append((ShopState("item_sub", q, 1, g.asin, (), sub), g, tpl, item))
    same = 0
    t0 = time.perf_counter()
    ours = [eng.page(s, g).text() for s, g, _, _ in jobs]
    t_ours = time.perf_counter() - t0
    t0 = time.perf_counter()
    with app.test_request_context():
        theirs = [upstream_text(render_template_string(templates[tpl], **kw)) for _, _, tpl, kw in jobs]
    t_theirs = time.perf_counter() - t0
    same = sum(a == b for a, b in zip(ours, theirs, strict=True))
    return {
        "pages": len(jobs),
        "identical_text": same,
        "stepgym_ms_per_page": 1000 * t_ours / len(jobs),
        "upstream_ms_per_page": 1000 * t_theirs / len(jobs),
        "speedup": t_theirs / t_ours,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--no-lucene", action="store_true")
    ap.add_argument("--no-browser", action="store_true")
    ap.add_argument("--text-episodes", type=int, default=300)
    ap.add_argument("--site-episodes", type=int, default=20)
    ap.add_argument("--upstream", type=Path, default=None, help="a princeton-nlp/WebShop checkout (baseline)")
    args = ap.parse_args()
    use_lucene = not args.no_lucene and importlib.util.find_spec("pyserini") is not None
    use_browser = not args.no_browser and os.path.isfile("/usr/bin/chromium")
    report = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.platform()}, {os.cpu_count()} cpus, python {platform.python_version()}",
    }
    report["search"] = bench_search(use_lucene)
    report["envs"] = bench_envs(args.text_episodes, args.site_episodes, use_browser)
    if args.upstream is not None:
        report["observation_vs_upstream"] = bench_upstream_render(args.upstream, 200)
    print(json.dumps(report, indent=2))
    s, e = report["search"], report["envs"]
    print("\nsummary:")
    print(
        f"  text env (oracle): {e['text_oracle']['steps_per_s']:.0f} steps/s, {e['text_oracle']['resets_per_s']:.0f} resets/s;"
        f" random clicks: {e['text_random']['steps_per_s']:.0f} steps/s"
    )
    if "site_oracle" in e:
        print(
            f"  site env (oracle): {e['site_oracle']['steps_per_s']:.1f} steps/s "
            f"(text env is {e['text_over_site_speed']:.0f}x faster)"
        )
    for name in ("bm25s", "lucene"):
        if f"{name}_latency" in s:
            lat = s[f"{name}_latency"]
            print(
                f"  {name}: build {s[f'{name}_build_s']:.2f} s, cached load {s[f'{name}_cached_init_s']:.2f} s, "
                f"search {lat['mean_ms']:.2f} ms mean / {lat['p95_ms']:.2f} ms p95, "
                f"target in top 10: {s['hits'][name]['top10_rate']:.1%}"
            )
    if "agreement@10" in s:
        print(f"  top-10 overlap bm25s vs lucene: {s['agreement@10']['overlap']:.1%}")
    if "observation_vs_upstream" in report:
        u = report["observation_vs_upstream"]
        print(
            f"  observation: stepgym {u['stepgym_ms_per_page']:.3f} ms vs upstream {u['upstream_ms_per_page']:.2f} ms "
            f"per page ({u['speedup']:.0f}x), identical text on {u['identical_text']}/{u['pages']} pages"
        )


if __name__ == "__main__":
    main()
