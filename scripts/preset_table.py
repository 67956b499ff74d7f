"""Rewrite docs/trainer.md's table of every preset from ``stepgym.trainers.presets`` (between the page's
``<!-- presets:start -->`` and ``<!-- presets:end -->`` lines). Run: ``python scripts/preset_table.py``."""

from __future__ import annotations

import re
from pathlib import Path

from stepgym.trainers.presets import preset_table

PAGE = Path(__file__).resolve().parents[1] / "docs" / "trainer.md"
_BLOCK = re.compile(r"(<!-- presets:start -->\n)(?:.*?\n)?(<!-- presets:end -->)", re.S)


def main() -> int:
    text = PAGE.read_text(encoding="utf-8")
    new = _BLOCK.sub(lambda m: m.group(1) + preset_table() + "\n" + m.group(2), text)
    if new != text:
        PAGE.write_text(new, encoding="utf-8")
        print(f"written: {PAGE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
