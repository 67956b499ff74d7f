"""A griffe extension for the docs site: read this package's reStructuredText-flavoured docstrings as Markdown.

The docstrings use Sphinx roles (``:class:`StepBatch```, ``:func:`~stepgym.shapers.shape_advantages```) and
``Usage::`` literal blocks. mkdocstrings renders Markdown, where a role shows as its raw text; this extension
turns each role into a code span (the name as written, without a leading ``~``) and ``text::`` into ``text:``
(the indented block after it already renders as code). Loaded by mkdocs.yml (``extensions:`` of the Python
handler); it changes only what the site shows, never the package.
"""

from __future__ import annotations

import re
from typing import Any

from griffe import Extension, Object

_ROLE = re.compile(r":(?:py:)?(?:class|func|meth|mod|attr|data|exc|obj|const|ref|term):`~?([^`]+)`")
_LITERAL = re.compile(r"(\S)::$", re.M)


def markdownify(text: str) -> str:
    """The docstring with Sphinx roles as code spans and ``::`` block markers as colons."""
    return _LITERAL.sub(r"\1:", _ROLE.sub(r"`\1`", text))


class RstToMarkdown(Extension):
    def on_object(self, *, obj: Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = markdownify(obj.docstring.value)
