"""A Gymnasium space of free-form Unicode text.

Gymnasium's ``Text`` space only admits its charset (``[a-zA-Z0-9]`` by default, so ``"go to desk 1"`` is not in
``Text(100)``) and has ``min_length=1``. Text envs need observations and actions that are arbitrary strings,
including the empty string an LLM can emit. ``UnicodeText`` contains every ``str`` up to ``max_length`` characters
and samples printable ASCII mixed with a few non-ASCII code points, so ``check_env`` and fuzzers exercise the
env's parser with realistic junk.
"""

from __future__ import annotations

from typing import Any

from gymnasium.spaces import Space

_SAMPLE_ALPHABET = [chr(c) for c in range(32, 127)] + list("éüß漢字кирилица🙂\t\n") + ["\x00", "\u200b"]


class UnicodeText(Space[str]):
    """Any Python ``str`` of at most ``max_length`` characters (``min_length`` at least)."""

    def __init__(self, max_length: int = 100_000, min_length: int = 0, seed: int | None = None):
        if min_length < 0 or max_length < min_length:
            raise ValueError(f"need 0 <= min_length <= max_length, got {min_length}, {max_length}")
        self.max_length = int(max_length)
        self.min_length = int(min_length)
        super().__init__(shape=None, dtype=str, seed=seed)

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        if mask is not None or probability is not None:
            raise NotImplementedError("UnicodeText.sample takes no mask or probability")
        hi = min(self.max_length, max(self.min_length, 64))
        length = int(self.np_random.integers(self.min_length, hi + 1))
        idx = self.np_random.integers(0, len(_SAMPLE_ALPHABET), size=length)
        return "".join(_SAMPLE_ALPHABET[i] for i in idx)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length

    def __repr__(self) -> str:
        return f"UnicodeText(max_length={self.max_length}, min_length={self.min_length})"

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, UnicodeText)
            and other.max_length == self.max_length
            and other.min_length == self.min_length
        )

    def __hash__(self) -> int:
        return hash((UnicodeText, self.max_length, self.min_length))

    def to_jsonable(self, sample_n: Any) -> list[str]:
        return list(sample_n)

    def from_jsonable(self, sample_n: list[str]) -> list[str]:
        return list(sample_n)
