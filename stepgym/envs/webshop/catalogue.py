# Over 400 lines: both on-disk catalogue forms and WebShop's product processing, reproduced step by step.
"""The WebShop product catalogue: loading, validation and WebShop's product processing.

Two on-disk forms are accepted, both produced by upstream WebShop (princeton-nlp/WebShop):

* the **search-document file** (``items_shuffle_1000.documents.jsonl``, what
  ``search_engine/convert_product_file_format.py`` writes): one JSON object a line,
  ``{"id": asin, "contents": lowercased search text, "product": processed record}``;
* the **raw scrape** (``items_shuffle_1000.json`` / ``items_shuffle.json`` from the official download): one JSON
  array of scraped records, which :func:`process_raw_product` turns into the processed record exactly as
  upstream ``engine.load_products`` does (same keys, same order, same price parsing), and
  :func:`document_contents` into the search text exactly as the converter does.

Every record is validated on load; a truncated or foreign file raises :class:`CorruptDataError` naming the path,
the line (or byte offset) and the fix. The raw array is parsed incrementally, so the 5 GB full catalogue never has
to fit in memory as one string.

Prices. Upstream draws the price of a product whose listing gives a range (``$a to $b``) with ``random.uniform``
each time the server starts, so the same goal can be won in one worker and lost in another. Here the draw is a
pure function of the ASIN (:func:`product_price`): ``a + (b - a) * u`` with ``u`` taken from
``sha256("stepgym/webshop/v0/price/<ASIN>")``; the distribution is upstream's, the value never changes.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from stepgym.errors import CorruptDataError

__all__ = [
    "DOCUMENTS_FILE",
    "Catalogue",
    "attributes_file_for",
    "document_contents",
    "iter_json_array",
    "load_catalogue",
    "process_raw_product",
    "product_price",
]

DOCUMENTS_FILE = "items_shuffle_1000.documents.jsonl"
RAW_FILE = "items_shuffle_1000.json"
ATTR_FILE = "items_ins_v2_1000.json"
HUMAN_INS_FILE = "items_human_ins.json"
FIX = "run `stepgym download webshop` to fetch fresh copies, or point $STEPGYM_DATA at a good data folder"

# Keys upstream's ``clean_product_keys`` drops from raw records.
_DROPPED_KEYS = (
    "product_information",
    "brand",
    "brand_url",
    "list_price",
    "availability_quantity",
    "availability_status",
    "total_reviews",
    "total_answered_questions",
    "seller_id",
    "seller_name",
    "fulfilled_by_amazon",
    "fast_track_message",
    "aplus_present",
    "small_description_old",
)
# What the env needs from a processed record, with the type it must have.
_REQUIRED: dict[str, type | tuple[type, ...]] = {
    "asin": str,
    "Title": str,
    "name": str,
    "Description": str,
    "BulletPoints": list,
    "Price": str,
    "pricing": list,
    "options": dict,
    "Attributes": list,
    "Rating": (str, int, float),
    "Reviews": list,
    "query": str,
    "category": str,
    "product_category": str,
}


@dataclass
class Catalogue:
    """The products in catalogue (file) order, by ASIN, with the search text and a content hash."""

    path: Path
    products: list[dict[str, Any]]
    contents: list[str]
    by_asin: dict[str, dict[str, Any]] = field(init=False)
    index_of: dict[str, int] = field(init=False)
    sha256: str = field(init=False)

    def __post_init__(self) -> None:
        self.by_asin = {p["asin"]: p for p in self.products}
        self.index_of = {p["asin"]: i for i, p in enumerate(self.products)}
        h = hashlib.sha256()
        for p, c in zip(self.products, self.contents, strict=True):
            h.update(p["asin"].encode())
            h.update(b"\t")
            h.update(c.encode())
            h.update(b"\n")
        self.sha256 = h.hexdigest()  # what the search text depends on: keys the index cache

    def __len__(self) -> int:
        return len(self.products)

    def price(self, asin: str) -> float:
        return product_price(self.by_asin[asin])


def product_price(product: dict[str, Any]) -> float:
    """The fixed price used by goals and the reward (see the module docstring)."""
    pricing = product.get("pricing") or [100.0]
    if len(pricing) == 1:
        return float(pricing[0])
    lo, hi = float(pricing[0]), float(pricing[1])
    digest = hashlib.sha256(f"stepgym/webshop/v0/price/{product['asin']}".encode()).digest()
    u = int.from_bytes(digest[:8], "big") / 2**64
    return lo + (hi - lo) * u


# ---------------------------------------------------------------------------------------------------------------
# Upstream's product processing, re-implemented
# ---------------------------------------------------------------------------------------------------------------
def _parse_pricing(raw: Any) -> tuple[list[float], str]:
    if raw is None or not raw:
        return [100.0], "$100.0"
    if isinstance(raw, list):  # already processed
        values = [float(x) for x in raw]
    else:
        values = [float(Decimal(re.sub(r"[^\d.]", "", part))) for part in str(raw).split("$")[1:]]
    if not values:
        return [100.0], "$100.0"
    if len(values) == 1:
        return values, f"${values[0]}"
    return values[:2], f"${values[0]} to ${values[1]}"


def process_raw_product(
    raw: dict[str, Any],
    attributes: dict[str, Any] | None = None,
    human_instructions: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One raw scraped record -> the processed record upstream's ``load_products`` makes (human-goal variant).

    ``attributes`` is ``items_ins_v2*.json`` (ASIN -> {"attributes": [...], ...}); ``human_instructions`` is
    ``items_human_ins.json`` (ASIN -> list of instruction records), attached as ``instructions`` like upstream.
    """
    p = {k: v for k, v in raw.items() if k not in _DROPPED_KEYS}
    asin = p["asin"]
    p["Title"] = p["name"]
    p["Description"] = p["full_description"]
    p["Reviews"] = []
    p["Rating"] = "N.A."
    small = p["small_description"]
    p["BulletPoints"] = small if isinstance(small, list) else [small]
    pricing, price_tag = _parse_pricing(p.get("pricing"))
    p["pricing"] = pricing
    p["Price"] = price_tag
    options: dict[str, list[str]] = {}
    option_to_image: dict[str, Any] = {}
    for name, contents in (p.get("customization_options") or {}).items():
        if contents is None:
            continue
        values = []
        for content in contents:
            value = content["value"].strip().replace("/", " | ").lower()
            values.append(value)
            option_to_image[value] = content.get("image", None)
        options[name.lower()] = values
    p["options"] = options
    p["option_to_image"] = option_to_image
    entry = (attributes or {}).get(asin)
    p["Attributes"] = entry["attributes"] if entry and "attributes" in entry else ["DUMMY_ATTR"]
    if human_instructions and asin in human_instructions:
        p["instructions"] = human_instructions[asin]
    p["MainImage"] = p["images"][0]
    p["query"] = p["query"].lower().strip()
    return p


def document_contents(product: dict[str, Any]) -> str:
    """The search text of a processed record, as upstream's ``convert_product_file_format.py`` builds it."""
    option_texts = [f"{name}: {', '.join(values)}" for name, values in product.get("options", {}).items()]
    bullets = product["BulletPoints"]
    first_bullet = bullets[0] if bullets else ""
    return " ".join(
        [product["Title"], product["Description"], first_bullet, ", and ".join(option_texts)]
    ).lower()


# ---------------------------------------------------------------------------------------------------------------
# Reading and validating
# ---------------------------------------------------------------------------------------------------------------
def _check_product(p: Any, where: str) -> None:
    if not isinstance(p, dict):
        raise CorruptDataError(
            f"{where}: a product record must be a JSON object, got {type(p).__name__}. Fix: {FIX}."
        )
    for key, typ in _REQUIRED.items():
        if key not in p:
            raise CorruptDataError(f"{where}: product record lacks {key!r}. Fix: {FIX}.")
        if not isinstance(p[key], typ):
            raise CorruptDataError(
                f"{where}: product field {key!r} has type {type(p[key]).__name__}. Fix: {FIX}."
            )
    if not all(isinstance(x, int | float) for x in p["pricing"]) or not p["pricing"]:
        raise CorruptDataError(f"{where}: product 'pricing' must be a non-empty list of numbers. Fix: {FIX}.")
    for name, values in p["options"].items():
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise CorruptDataError(f"{where}: option {name!r} must be a list of strings. Fix: {FIX}.")


def _read_documents(path: Path) -> tuple[list[dict[str, Any]], list[str]]:
    products: list[dict[str, Any]] = []
    contents: list[str] = []
    seen: set[str] = set()
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                doc = json.loads(line)
            except json.JSONDecodeError as exc:
                raise CorruptDataError(
                    f"{where}: not valid JSON ({exc.msg}); the file looks truncated or corrupt. Fix: {FIX}."
                ) from exc
            if (
                not isinstance(doc, dict)
                or not isinstance(doc.get("id"), str)
                or not isinstance(doc.get("contents"), str)
            ):
                raise CorruptDataError(
                    f"{where}: expected {{'id': str, 'contents': str, 'product': {{...}}}}. Fix: {FIX}."
                )
            product = doc.get("product")
            _check_product(product, where)
            if product["asin"] != doc["id"]:
                raise CorruptDataError(
                    f"{where}: id {doc['id']!r} != product asin {product['asin']!r}. Fix: {FIX}."
                )
            if doc["id"] in seen:
                continue  # upstream keeps the first record of a repeated ASIN
            seen.add(doc["id"])
            products.append(product)
            contents.append(doc["contents"])
    return products, contents


def iter_json_array(path: str | os.PathLike[str], *, chunk_chars: int = 1 << 20) -> Iterator[Any]:
    """Yield the elements of a top-level JSON array one at a time (the full catalogue is ~5 GB).

    Raises :class:`CorruptDataError` with the character offset when the file is not one well-formed array.
    """
    decoder = json.JSONDecoder()
    with open(path, encoding="utf-8") as f:
        text = _ChunkedText(f, chunk_chars)
        text.fill()
        text.skip_ws()
        if text.peek() != "[":
            raise CorruptDataError(
                f"{path}: expected a JSON array of products at character {text.at()}. Fix: {FIX}."
            )
        text.pos += 1
        expect_value = True
        first = True
        while True:
            text.skip_ws()
            ch = text.peek()
            if not ch:
                raise CorruptDataError(
                    f"{path}: the JSON array ends early at character {text.at()} (truncated file). Fix: {FIX}."
                )
            if ch == "]" and (first or not expect_value):
                text.pos += 1
                break
            if not expect_value:
                if ch != ",":
                    raise CorruptDataError(
                        f"{path}: expected ',' or ']' at character {text.at()}. Fix: {FIX}."
                    )
                text.pos += 1
                expect_value = True
                continue
            yield text.decode(decoder, path)
            first = False
            expect_value = False
        text.skip_ws()
        if text.peek():
            raise CorruptDataError(
                f"{path}: unexpected data after the product array at character {text.at()}. Fix: {FIX}."
            )


_NUMBER_TAIL = re.compile(r"[0-9eE.+-]*")  # what may still follow the part of a number decoded so far


def _number_may_go_on(value: Any, buf: str, end: int) -> bool:
    """Whether ``value``, decoded from ``buf`` up to ``end``, is a number that more text could still extend."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return False
    tail = _NUMBER_TAIL.match(buf, end)
    return tail is not None and tail.end() == len(buf)


class _ChunkedText:
    """A text file read ``chunk_chars`` at a time, with a cursor: ``buf[pos:]`` is not consumed yet and
    ``offset`` is the file position (in characters) of ``buf[0]``, so errors can name where they are."""

    def __init__(self, f: Any, chunk_chars: int) -> None:
        self.f, self.chunk_chars = f, chunk_chars
        self.buf, self.pos, self.offset, self.eof = "", 0, 0, False

    def at(self) -> int:
        return self.offset + self.pos

    def peek(self) -> str:
        """The next character, or "" at the end of the file."""
        return self.buf[self.pos] if self.pos < len(self.buf) else ""

    def fill(self) -> bool:
        """Append the next chunk, dropping what is consumed; False at the end of the file."""
        block = self.f.read(self.chunk_chars)
        if not block:
            self.eof = True
            return False
        self.offset += self.pos
        self.buf = self.buf[self.pos :] + block
        self.pos = 0
        return True

    def skip_ws(self) -> None:
        while True:
            while self.pos < len(self.buf) and self.buf[self.pos] in " \t\r\n":
                self.pos += 1
            if self.pos < len(self.buf) or not self.fill():
                return

    def decode(self, decoder: json.JSONDecoder, path: Any) -> Any:
        """The JSON value at the cursor, reading more chunks until it is whole.

        A number followed only by characters a number may hold (``12`` | ``3``, ``12.`` | ``5``) may go on in the
        next chunk, so it is decoded again with more text before it counts; other values end with their last
        character."""
        while True:
            try:
                value, end = decoder.raw_decode(self.buf, self.pos)
                if not _number_may_go_on(value, self.buf, end) or self.eof or not self.fill():
                    self.pos = end
                    return value
            except json.JSONDecodeError as exc:
                if self.eof or not self.fill():
                    raise CorruptDataError(
                        f"{path}: invalid or truncated JSON at character {self.at()} ({exc.msg}). Fix: {FIX}."
                    ) from exc


def _read_json(path: Path) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except json.JSONDecodeError as exc:
        raise CorruptDataError(
            f"{path}: not valid JSON ({exc.msg} at line {exc.lineno}); the file looks truncated "
            f"or corrupt. Fix: {FIX}."
        ) from exc
    except UnicodeDecodeError as exc:
        raise CorruptDataError(f"{path}: not UTF-8 text. Fix: {FIX}.") from exc


def _read_raw(
    path: Path, attr_path: Path | None, human_path: Path | None
) -> tuple[list[dict[str, Any]], list[str]]:
    attributes = _read_json(attr_path) if attr_path is not None and attr_path.exists() else None
    human = _read_json(human_path) if human_path is not None and human_path.exists() else None
    products: list[dict[str, Any]] = []
    contents: list[str] = []
    seen: set[str] = set()
    for i, raw in enumerate(iter_json_array(path)):
        where = f"{path}: product #{i}"
        if not isinstance(raw, dict) or not isinstance(raw.get("asin"), str):
            raise CorruptDataError(f"{where}: not a product record with an 'asin'. Fix: {FIX}.")
        asin = raw["asin"]
        if asin == "nan" or len(asin) > 10 or asin in seen:  # upstream's filter
            continue
        try:
            product = process_raw_product(raw, attributes, human)
        except (KeyError, IndexError, TypeError, AttributeError, InvalidOperation, ValueError) as exc:
            raise CorruptDataError(
                f"{where} ({asin}): cannot be processed ({type(exc).__name__}: {exc}). Fix: {FIX}."
            ) from exc
        _check_product(product, where)
        seen.add(asin)
        products.append(product)
        contents.append(document_contents(product))
    return products, contents


def attributes_file_for(catalogue_path: Path) -> Path:
    """``items_ins_v2_1000.json`` next to ``items_shuffle_1000[.documents.jsonl|.json]`` (``items_ins_v2.json`` for
    the full catalogue)."""
    stem = (
        catalogue_path.name.removeprefix("items_shuffle")
        .removesuffix(".documents.jsonl")
        .removesuffix(".json")
    )
    return catalogue_path.with_name(f"items_ins_v2{stem}.json")


def load_catalogue(path: str | os.PathLike[str]) -> Catalogue:
    """Load a catalogue file (``*.jsonl`` search documents or a raw ``*.json`` array) with validation."""
    p = Path(path)
    if not p.is_file():
        raise CorruptDataError(f"{p}: catalogue file is missing. Fix: {FIX}.")
    if p.suffix == ".jsonl":
        products, contents = _read_documents(p)
    else:
        products, contents = _read_raw(p, attributes_file_for(p), p.with_name(HUMAN_INS_FILE))
    if not products:
        raise CorruptDataError(f"{p}: the catalogue holds no products. Fix: {FIX}.")
    return Catalogue(path=p, products=products, contents=contents)
