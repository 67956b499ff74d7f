"""``stepgym view``: look at recorded episodes and their advantages in a browser (docs/viewer.md).

:func:`load_run` reads recordings (:mod:`stepgym.recording`), :class:`ViewerServer` serves the page on
127.0.0.1, :func:`export_html` writes it as one offline file. Standard library only.
"""

from __future__ import annotations

from stepgym.viewer.data import RunData, load_run
from stepgym.viewer.server import ViewerServer, export_html

__all__ = ["RunData", "ViewerServer", "export_html", "load_run"]
