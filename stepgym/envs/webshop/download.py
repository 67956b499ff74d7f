"""``stepgym download webshop``: WebShop's official data files into the user cache, converted for stepgym.

Official sources (upstream ``setup.sh`` at princeton-nlp/WebShop, which fetches them with ``gdown``):

=============================  =====================================  ==========================================
file                           Google Drive file id                   what
=============================  =====================================  ==========================================
``items_shuffle_1000.json``    ``1EgHdxQ_YxqIQlvvq5iKlCrkEKR6-j0Ib``  the 1000-product catalogue (raw scrape)
``items_ins_v2_1000.json``     ``1IduG0xl544V_A_jv3tHXC0kyFi7PnyBu``  attributes + synthetic instructions (1k)
``items_human_ins.json``       ``14Kb5SPBk_jfdLZ_CDBNitW98QLDlKR5O``  human instructions with attributes/options
``items_shuffle.json``         ``1A2whVgOO0euk5O13n2iYDM0bQRkkRduB``  the full 1.18M-product catalogue (~5 GB)
``items_ins_v2.json``          ``1s2j6NgHljiZzQNL3veZaAiyW_qDEgBNi``  attributes for the full catalogue
=============================  =====================================  ==========================================

plus ``baseline_models/data/human_goals.json`` from the WebShop GitHub repository. Drive files are fetched from
``https://drive.usercontent.google.com/download?id=<id>&export=download&confirm=t`` (the ``confirm`` flag skips
the virus-scan page Drive shows for large files). ``base_url`` replaces every source with
``<base_url>/<file name>`` (a mirror, or a local test server).

After downloading, the raw catalogue is converted into the search-document file
``items_shuffle_1000.documents.jsonl`` (``items_shuffle.documents.jsonl`` for the full one) exactly as upstream's
``convert_product_file_format.py`` writes it (human instructions attached), so the env and the search indexes
read the same format whatever the source. Every step writes to a temporary file and renames it into place.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from stepgym.atomic import atomic_path
from stepgym.data import cache_dir
from stepgym.envs.webshop.catalogue import document_contents, load_catalogue
from stepgym.fetch import fetch

__all__ = ["DRIVE_IDS", "HUMAN_GOALS_URL", "convert_to_documents", "download", "main"]

DRIVE_IDS = {
    "items_shuffle_1000.json": "1EgHdxQ_YxqIQlvvq5iKlCrkEKR6-j0Ib",
    "items_ins_v2_1000.json": "1IduG0xl544V_A_jv3tHXC0kyFi7PnyBu",
    "items_human_ins.json": "14Kb5SPBk_jfdLZ_CDBNitW98QLDlKR5O",
    "items_shuffle.json": "1A2whVgOO0euk5O13n2iYDM0bQRkkRduB",
    "items_ins_v2.json": "1s2j6NgHljiZzQNL3veZaAiyW_qDEgBNi",
}
HUMAN_GOALS_URL = (
    "https://raw.githubusercontent.com/princeton-nlp/WebShop/master/baseline_models/data/human_goals.json"
)
DRIVE_URL = "https://drive.usercontent.google.com/download?id={id}&export=download&confirm=t"
# sha256 of the 1k document file that upstream's converter produced (WillDreamer/webshop-minimal, blob c16875ec);
# a conversion of the official items_shuffle_1000.json should reproduce it byte for byte.
DOCUMENTS_1K_SHA256 = "24fb9257c435accee9cc82e570dc8ec76a218d3b188222a84fdeb7fc5937d00e"


def _url(name: str, base_url: str | None) -> str:
    if base_url is not None:
        return f"{base_url.rstrip('/')}/{name}"
    if name == "human_goals.json":
        return HUMAN_GOALS_URL
    return DRIVE_URL.format(id=DRIVE_IDS[name])


def convert_to_documents(raw_catalogue: Path, out: Path) -> Path:
    """Write upstream's search-document file for a raw catalogue (``json.dumps`` defaults, one a line)."""
    catalogue = load_catalogue(raw_catalogue)  # validates; attaches attributes and human instructions
    with atomic_path(out) as tmp, open(tmp, "w", encoding="utf-8") as f:
        for product in catalogue.products:
            f.write(
                json.dumps(
                    {"id": product["asin"], "contents": document_contents(product), "product": product}
                )
                + "\n"
            )
    return out


def download(
    dest: str | os.PathLike[str] | None = None,
    base_url: str | None = None,
    *,
    full: bool = False,
    progress: bool = True,
) -> Path:
    """Fetch the WebShop data into ``dest`` (default: the user cache's ``data/webshop``) and return it.

    ``full=True`` also fetches the 1.18M-product catalogue (~5 GB download; converting it needs several GB of
    disk). Raises ``ServiceUnavailableError`` (unreachable source) or ``CorruptDataError`` (bad file).
    """
    root = Path(dest) if dest is not None else cache_dir() / "data" / "webshop"
    data = root / "data"
    data.mkdir(parents=True, exist_ok=True)
    goals_dir = root / "baseline_models" / "data"
    goals_dir.mkdir(parents=True, exist_ok=True)
    names = ["items_shuffle_1000.json", "items_ins_v2_1000.json", "items_human_ins.json"]
    if full:
        names += ["items_shuffle.json", "items_ins_v2.json"]
    for name in names:
        fetch(_url(name, base_url), data, filename=name, progress=progress)
    fetch(_url("human_goals.json", base_url), goals_dir, filename="human_goals.json", progress=progress)
    convert_to_documents(data / "items_shuffle_1000.json", data / "items_shuffle_1000.documents.jsonl")
    if full:
        convert_to_documents(data / "items_shuffle.json", data / "items_shuffle.documents.jsonl")
    return root


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="stepgym download webshop", description=__doc__.split("\n\n")[0])
    parser.add_argument("--dest", default=None, help="target folder (default: the user cache)")
    parser.add_argument("--base-url", default=None, help="fetch every file from <base-url>/<name> instead")
    parser.add_argument("--full", action="store_true", help="also fetch the 1.18M-product catalogue (~5 GB)")
    args = parser.parse_args(argv)
    path = download(args.dest, args.base_url, full=args.full)
    print(f"WebShop data in {path}\nUse it with: export STEPGYM_DATA={path.parent}")
    return 0
