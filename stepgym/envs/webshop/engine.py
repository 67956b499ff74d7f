# Over 400 lines: WebShop's whole page state machine, shared by the text env and the site.
"""The WebShop page state machine, shared by the text env and the web site.

A shopping session is a :class:`ShopState` (which page, the search keywords, the results page number, the open
product, the chosen options, the open sub page). :meth:`ShopEngine.page` turns a state into a :class:`Page`: an
ordered list of :class:`Element` s from which both the text observation (:meth:`Page.text`) and the HTML
(``pages_html.render_html``) are made, so the two cannot drift apart. :meth:`ShopEngine.transition` applies an
action.

The pages, their visible text and the click semantics follow upstream WebShop (``web_agent_site/templates/*.html``
and ``envs/web_agent_text_env.py``), whose text observation mode joins the page's visible text nodes with
``" [SEP] "``:

* search: ``WebShop [SEP] Instruction: [SEP] <goal> [SEP] Search``;
* results (top 50 hits, 10 a page): ``Instruction: [SEP] <goal> [SEP] Back to Search [SEP] Page 1 (Total
  results: 50) [SEP] Next > [SEP] <ASIN> [SEP] <title> [SEP] <price> ...`` (``< Prev`` before ``Next >`` after
  page 1; ``Next >`` is always shown, as upstream does);
* item: ``... [SEP] Back to Search [SEP] < Prev [SEP] <option name> [SEP] <value> ... [SEP] <title> [SEP]
  Price: <price> [SEP] Rating: <rating> [SEP] Description [SEP] Features [SEP] Reviews [SEP] Buy Now``;
* Description / Features / Reviews sub pages with ``Back to Search`` and ``< Prev`` (back to the item).

Clicks are matched like upstream: ``click[x]`` lowercases ``x`` and looks it up among the page's buttons and
product links (by lowercased text) and option values; for an option value that two option groups share, the
later group wins. ``< Prev`` goes from an item back to its results page (options cleared), from a sub page back
to the item (options kept). Actions are parsed with upstream's pattern ``(.+)\\[(.+)\\]``.

Deliberate differences (each documented in docs/webshop.md):

* ``search[...]`` is only accepted where the page has a search bar (the search page), as on the real site;
  upstream's *text* env also accepts it on every page. ``search_anywhere=True`` restores that.
* The page after ``Buy Now`` reads ``Thank you for shopping with us! [SEP] Your score (min 0.0, max 1.0)
  [SEP] <reward>`` (upstream's also prints an MTurk code and hidden debugging fields).
* A query that is only whitespace is rejected (upstream runs it and shows an empty results page).
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from typing import Any

from stepgym.envs.base import lru_get
from stepgym.envs.webshop.catalogue import Catalogue
from stepgym.envs.webshop.goals import Goal
from stepgym.envs.webshop.reward import MATCH_THRESHOLD, compute_reward, normalize_color, token_set_ratio
from stepgym.envs.webshop.search import SEARCH_RETURN_N, SearchBackend
from stepgym.text_utils import normalize_action

__all__ = [
    "BACK_TO_SEARCH",
    "BUY_NOW",
    "NEXT_PAGE",
    "PREV_PAGE",
    "SUB_PAGES",
    "Element",
    "Page",
    "ShopEngine",
    "ShopState",
    "click_key",
    "parse_shop_action",
    "text_segment",
]

PRODUCT_WINDOW = 10
BUY_NOW = "Buy Now"
NEXT_PAGE = "Next >"
PREV_PAGE = "< Prev"
BACK_TO_SEARCH = "Back to Search"
SUB_PAGES = ("Description", "Features", "Reviews")
_ACTION = re.compile(r"(.+)\[(.+)\]", re.DOTALL)
_ASCII_SPACES = frozenset(" \n\t\x0c\r")


def click_key(text: str) -> str:
    """The key ``click[...]`` matches for a clickable with this text: lowercased, white space collapsed (the
    env's action sanitiser collapses white space, so a value holding a no-break space must still be clickable)."""
    return normalize_action(text)


def _not_clickable(key: str) -> str:
    return f"{key!r} is not a button, product or option on this page"


def parse_shop_action(action: str) -> tuple[str, str | None]:
    """Upstream's ``parse_action``: ``re.match(r"(.+)\\[(.+)\\]")`` -> ``(name, argument)`` or ``(action, None)``."""
    m = _ACTION.match(action)
    if m is None:
        return action, None
    return m.group(1), m.group(2)


def text_segment(raw: str) -> str | None:
    """The observation segment one HTML text node yields, or None (WebShop's text mode via BeautifulSoup).

    BeautifulSoup collapses a node made only of ASCII white space to ``"\\n"`` (if it holds a newline) or ``" "``;
    the text mode drops ``"\\n"`` nodes and strips the rest, so a lone-space node gives an empty segment. Browsers
    turn ``\\r\\n`` / ``\\r`` into ``\\n`` when they parse a page; that is applied here too so the text env reads
    exactly what the site shows.
    """
    if not raw:
        return None
    raw = raw.replace("\r\n", "\n").replace("\r", "\n").replace("\x00", "\ufffd")
    if all(ch in _ASCII_SPACES for ch in raw):
        return None if "\n" in raw else ""
    return raw.strip()


@dataclass(frozen=True)
class ShopState:
    """Where a session is. ``options`` are (name, value) pairs sorted by name."""

    page: str = "search"  # search | results | item | item_sub | done
    query: str = ""
    page_num: int = 1
    asin: str = ""
    options: tuple[tuple[str, str], ...] = ()
    sub: str = ""

    def key(self) -> str:
        """Comparable symbolic key (schema.STATE_KEY)."""
        parts = [self.page]
        if self.page != "search":
            if self.page != "done":
                parts += [f"q={self.query}", f"p={self.page_num}"]
            if self.asin:
                parts.append(f"asin={self.asin}")
                parts.append("opts=" + ";".join(f"{k}={v}" for k, v in self.options))
            if self.sub:
                parts.append(f"sub={self.sub}")
        return "|".join(parts)

    @property
    def options_dict(self) -> dict[str, str]:
        return dict(self.options)


@dataclass
class Element:
    """One piece of a page. ``kind``: heading | text | button | link | option | search | image | json."""

    kind: str
    text: str = ""
    key: str = ""  # the click key (lowercased text or option value) for clickables
    tag: str = "div"
    target: ShopState | None = None  # the state a click leads to (site links); None for search/buy
    attrs: dict[str, Any] = field(default_factory=dict)


@dataclass
class Page:
    state: ShopState
    elements: list[Element]
    has_search_bar: bool
    clickables: OrderedDict[str, Element]  # upstream order: buttons, product links, then options
    reward: float | None = None
    reward_info: dict[str, Any] | None = None

    def segments(self) -> list[str]:
        out: list[str] = []
        for el in self.elements:
            if el.kind in ("image", "json"):
                continue  # no visible text
            for raw in el.attrs.get("texts", [el.text]):
                seg = text_segment(raw)
                if seg is not None:
                    out.append(seg)
        return out

    def text(self) -> str:
        return " [SEP] ".join(self.segments())

    def available_actions(self) -> dict[str, Any]:
        """Upstream's ``get_available_actions``: ``{"has_search_bar": bool, "clickables": [...]}``."""
        return {"has_search_bar": self.has_search_bar, "clickables": list(self.clickables)}


class _PageParts:
    """The elements of a page being built and its clickables, in upstream's order (buttons are added as they
    appear; product links and options are added after the buttons by the page builders)."""

    def __init__(self) -> None:
        self.els: list[Element] = []
        self.clickables: OrderedDict[str, Element] = OrderedDict()

    def button(self, text: str, target: ShopState | None, **attrs: Any) -> Element:
        el = Element("button", text=text, key=click_key(text), tag="button", target=target, attrs=attrs)
        self.els.append(el)
        self.clickables[el.key] = el
        return el


def _done_page(state: ShopState, reward: tuple[float, dict[str, Any]] | None) -> Page:
    """The page after ``Buy Now``: the score, and the reward's breakdown for the site's scripts (no clickables)."""
    r, info = reward if reward is not None else (0.0, {})
    data = {"reward": r, "reward_info": info, "asin": state.asin, "options": state.options_dict}
    els = [
        Element("heading", text="Thank you for shopping with us!", tag="h1"),
        Element("heading", tag="h3", attrs={"texts": ["Your score (min 0.0, max 1.0)", str(r)]}),
        Element("json", tag="script", attrs={"data": data}),
    ]
    return Page(state, els, False, OrderedDict(), reward=r, reward_info=info)


class ShopEngine:
    """Pages and transitions for one catalogue and search backend; one engine serves many sessions."""

    def __init__(
        self,
        catalogue: Catalogue,
        search: SearchBackend,
        *,
        title_nouns: str = "heuristic",
        option_match: str = "upstream",
        search_anywhere: bool = False,
        cache_size: int = 4096,
    ) -> None:
        self.catalogue = catalogue
        self.search_backend = search
        self.title_nouns = title_nouns
        self.option_match = option_match
        self.search_anywhere = search_anywhere
        self._cache: OrderedDict[str, list[str]] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.RLock()

    # -- search ------------------------------------------------------------------------------------------------
    def results(self, query: str) -> list[str]:
        """Top ``SEARCH_RETURN_N`` ASINs for ``query`` (memoised; search is deterministic)."""
        with self._lock:  # the site serves requests from several threads; backends are not all thread-safe
            return lru_get(self._cache, query, lambda: self._search(query), self._cache_size)

    def _search(self, query: str) -> list[str]:
        return [a for a in self.search_backend.search(query, SEARCH_RETURN_N) if a in self.catalogue.by_asin]

    def page_products(self, state: ShopState) -> list[str]:
        res = self.results(state.query)
        return res[(state.page_num - 1) * PRODUCT_WINDOW : state.page_num * PRODUCT_WINDOW]

    # -- pages -------------------------------------------------------------------------------------------------
    def page(
        self, state: ShopState, goal: Goal, *, reward: tuple[float, dict[str, Any]] | None = None
    ) -> Page:
        """The page ``state`` shows for ``goal``; the ``done`` page shows ``reward`` (the score and breakdown)."""
        if state.page == "done":
            return _done_page(state, reward)
        build = {
            "search": self._search_page,
            "results": self._results_page,
            "item": self._item_page,
            "item_sub": self._sub_page,
        }.get(state.page)
        if build is None:  # pragma: no cover - states are built by this module only
            raise ValueError(f"unknown page {state.page!r}")
        instr = Element("heading", tag="h4", attrs={"texts": ["Instruction:", goal.instruction_text]})
        parts = _PageParts()
        build(state, instr, parts)
        return Page(state, parts.els, state.page == "search", parts.clickables)

    def _search_page(self, state: ShopState, instr: Element, parts: _PageParts) -> None:
        parts.els += [Element("heading", text="WebShop", tag="h2"), instr]
        search = Element("search", text="Search", key="search", tag="button")
        parts.els.append(search)
        parts.clickables["search"] = search  # upstream lists it; click[search] is refused

    def _results_page(self, state: ShopState, instr: Element, parts: _PageParts) -> None:
        parts.els.append(instr)
        parts.button(BACK_TO_SEARCH, ShopState())
        total = len(self.results(state.query))
        parts.els.append(Element("heading", text=f"Page {state.page_num} (Total results: {total})", tag="h3"))
        if state.page_num > 1:
            parts.button(PREV_PAGE, replace(state, page_num=state.page_num - 1))
        parts.button(NEXT_PAGE, replace(state, page_num=state.page_num + 1))
        links: list[Element] = []
        for asin in self.page_products(state):
            p = self.catalogue.by_asin[asin]
            target = ShopState("item", state.query, state.page_num, asin, ())
            attrs = {"title": p["Title"], "price": p["Price"], "image": p.get("MainImage", "")}
            links.append(Element("link", text=asin, key=click_key(asin), tag="a", target=target, attrs=attrs))
            parts.els.append(links[-1])
            parts.els.append(Element("heading", text=p["Title"], tag="h4"))
            parts.els.append(Element("text", text=p["Price"], tag="h5"))
        for el in links:  # product links come after the buttons in upstream's clickable order
            parts.clickables[el.key] = el

    def _item_page(self, state: ShopState, instr: Element, parts: _PageParts) -> None:
        p = self.catalogue.by_asin[state.asin]
        els = parts.els
        els.append(instr)
        parts.button(BACK_TO_SEARCH, ShopState())
        parts.button(PREV_PAGE, ShopState("results", state.query, state.page_num))
        els.append(Element("image", tag="img", attrs={"src": p.get("MainImage", "")}))
        chosen = state.options_dict
        options: list[Element] = []
        for name, values in p["options"].items():
            els.append(Element("heading", text=name, tag="h4"))
            for i, value in enumerate(values):
                new = dict(chosen)
                new[name] = value
                target = replace(state, options=tuple(sorted(new.items())))
                el = Element(
                    "option",
                    text=value,
                    key=click_key(value),
                    tag="label",
                    target=target,
                    attrs={"group": name, "index": i, "checked": value in chosen.values()},
                )
                els.append(el)
                options.append(el)
        els.append(Element("heading", text=p["Title"], tag="h2"))
        els.append(Element("heading", text=f"Price: {p['Price']}", tag="h4"))
        els.append(Element("heading", text=f"Rating: {p['Rating']}", tag="h4"))
        for sub in SUB_PAGES:
            parts.button(sub, replace(state, page="item_sub", sub=sub))
        parts.button(BUY_NOW, None, purchase=True)
        for el in options:  # options after buttons; a value shared by two groups: the later group wins
            parts.clickables[el.key] = el

    def _sub_page(self, state: ShopState, instr: Element, parts: _PageParts) -> None:
        p = self.catalogue.by_asin[state.asin]
        parts.els.append(instr)
        parts.button(BACK_TO_SEARCH, ShopState())
        parts.button(PREV_PAGE, replace(state, page="item", sub=""))
        if state.sub == "Description":
            parts.els.append(Element("text", text=p["Description"], tag="p"))
        elif state.sub == "Features":
            parts.els += [Element("text", text=f" {bullet}", tag="li") for bullet in p["BulletPoints"]]
        else:
            for review in p["Reviews"]:
                texts = [
                    f'"{review.get("title", "")}"',
                    str(review.get("score", "")),
                    str(review.get("body", "")),
                ]
                parts.els.append(Element("text", tag="div", attrs={"texts": texts}))

    # -- transitions -------------------------------------------------------------------------------------------
    def transition(self, state: ShopState, action: str) -> tuple[ShopState, str]:
        """Apply ``action``; returns ``(new_state, problem)`` with ``problem`` '' when the action was valid.

        Buying returns the ``done`` state; the caller computes the reward with :meth:`reward`.
        """
        if state.page == "done":
            return state, "the episode is over"
        name, arg = parse_shop_action(action)
        if arg is None:
            return state, "expected search[keywords] or click[element]"
        if name == "search":
            arg = arg.lower()
            if not (state.page == "search" or self.search_anywhere):
                return state, "there is no search bar on this page (click 'Back to Search' first)"
            query = arg if arg.strip() else ""
            if not query:
                return state, "the search query is empty"
            self.results(query)
            return ShopState("results", query, 1), ""
        if name != "click":
            return state, f"unknown action {name!r} (expected search[...] or click[...])"
        key = click_key(arg)
        if key == "search":
            return state, "use search[keywords] to search"
        return self._click(state, key)

    def _click(self, state: ShopState, key: str) -> tuple[ShopState, str]:
        if state.page == "search":
            return state, f"{key!r} is not clickable here; this page only has the search bar"
        # The clickables of each page, resolved without rendering the whole page.
        if key == BACK_TO_SEARCH.lower():
            return ShopState(), ""
        if state.page == "results":
            if key == NEXT_PAGE.lower():
                return replace(state, page_num=state.page_num + 1), ""
            if key == PREV_PAGE.lower() and state.page_num > 1:
                return replace(state, page_num=state.page_num - 1), ""
            shown = {click_key(a): a for a in self.page_products(state)}
            if key in shown:
                return ShopState("item", state.query, state.page_num, shown[key], ()), ""
            return state, _not_clickable(key)
        if state.page == "item_sub":
            if key == PREV_PAGE.lower():
                return replace(state, page="item", sub=""), ""
            return state, _not_clickable(key)
        # item page
        if key == PREV_PAGE.lower():
            return ShopState("results", state.query, state.page_num), ""
        if key == BUY_NOW.lower():
            return replace(state, page="done", query="", page_num=1), ""
        for sub in SUB_PAGES:
            if key == sub.lower():
                return replace(state, page="item_sub", sub=sub), ""
        group = None
        chosen_value = ""
        for name, values in self.catalogue.by_asin[state.asin]["options"].items():
            for value in values:
                if click_key(value) == key:
                    group, chosen_value = (
                        name,
                        value,
                    )  # keep looping: the later group wins, like upstream's dict
        if group is not None:
            new = dict(state.options)
            new[group] = chosen_value
            return replace(state, options=tuple(sorted(new.items()))), ""
        return state, _not_clickable(key)

    def reward(self, state: ShopState, goal: Goal) -> tuple[float, dict[str, Any]]:
        product = self.catalogue.by_asin[state.asin]
        return compute_reward(
            product,
            goal.as_reward_goal(),
            self.catalogue.price(state.asin),
            state.options_dict,
            title_nouns=self.title_nouns,
            option_match=self.option_match,
        )

    # -- ground truth for annotations --------------------------------------------------------------------------
    def target_options(self, goal: Goal) -> dict[str, str]:
        """The option (name -> value) choices that satisfy the goal on its target product."""
        product = self.catalogue.by_asin[goal.asin]
        if isinstance(goal.goal_options, dict):
            return {k: v for k, v in goal.goal_options.items() if v in product["options"].get(k, [])}
        out: dict[str, str] = {}
        for wanted in goal.goal_options:  # human goals: best fuzzy match among the product's option values
            g = normalize_color(wanted)
            best: tuple[int, str, str] | None = None
            for name, values in product["options"].items():
                for value in values:
                    score = token_set_ratio(normalize_color(value), g)
                    if score > MATCH_THRESHOLD and (best is None or score > best[0]):
                        best = (score, name, value)
            if best is not None and best[1] not in out:
                out[best[1]] = best[2]
        return out

    def expert_query(self, goal: Goal) -> str:
        """The oracle's search: the instruction without its price clause, or the target's title if that
        query does not list the target in its top 50."""
        query = goal.instruction_text.split(", and price lower than")[0].lower()
        if goal.asin in self.results(query):
            return query
        return goal.name.lower()

    def expert_action(self, state: ShopState, goal: Goal) -> str | None:
        """The oracle's next action: search, page to and open the target, choose the goal's options, buy."""
        if state.page == "done":
            return None
        if state.page == "search":
            return f"search[{self.expert_query(goal)}]"
        if state.page == "results":
            res = self.results(state.query)
            if goal.asin not in res:
                return f"click[{BACK_TO_SEARCH.lower()}]"
            target_page = res.index(goal.asin) // PRODUCT_WINDOW + 1
            if target_page == state.page_num:
                return f"click[{goal.asin.lower()}]"
            return (
                f"click[{NEXT_PAGE.lower()}]"
                if target_page > state.page_num
                else f"click[{PREV_PAGE.lower()}]"
            )
        if state.asin != goal.asin:
            return f"click[{PREV_PAGE.lower()}]"
        if state.page == "item_sub":
            return f"click[{PREV_PAGE.lower()}]"
        chosen = state.options_dict
        for name, value in sorted(self.target_options(goal).items()):
            if chosen.get(name) != value:
                return f"click[{click_key(value)}]"
        return f"click[{BUY_NOW.lower()}]"

    def subgoal(self, state: ShopState, goal: Goal, won: bool = False) -> str:
        """Goal-relevant progress (schema.SUBGOAL_KEY)."""
        if state.page == "search":
            return "search"
        if state.page == "results":
            res = self.results(state.query)
            if goal.asin in self.page_products(state):
                return "results:target_on_page"
            return "results:target_listed" if goal.asin in res else "results:target_missing"
        if state.page == "done":
            return "bought:won" if won else ("bought:target" if state.asin == goal.asin else "bought:other")
        if state.asin != goal.asin:
            return "other_item"
        wanted = self.target_options(goal)
        chosen = state.options_dict
        done = sum(1 for k, v in wanted.items() if chosen.get(k) == v)
        return f"target_item:{done}/{len(wanted)}"
