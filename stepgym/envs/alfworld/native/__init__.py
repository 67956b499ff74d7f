"""A pure-Python ALFWorld engine that plays TextWorld's games byte for byte (``engine="native"``).

See :mod:`stepgym.envs.alfworld.native.engine`. Importing it does not import TextWorld, Fast Downward or TatSu.
"""

from stepgym.envs.alfworld.native.engine import NativeEngine, NativeSnapshot

__all__ = ["NativeEngine", "NativeSnapshot"]
