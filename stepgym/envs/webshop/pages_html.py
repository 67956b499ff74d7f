"""HTML for the WebShop site, and WebShop's text observation read back from HTML.

:func:`render_html` writes a :class:`~stepgym.envs.webshop.engine.Page` as a small self-contained HTML document
(no external scripts, styles or images are loaded: product image URLs are kept in ``data-src`` so a headless
browser never reaches for the network). Every product string goes through :func:`html.escape`, so a title holding
``<script>`` renders as text. Clickables carry ``data-key`` (what ``click[...]`` matches) and plain links or
forms, so the site works with or without JavaScript except for option radios, which navigate on click like
upstream's.

:func:`html_to_text` is WebShop's text observation mode (upstream ``convert_html_to_text(simple=True)``:
BeautifulSoup's visible text nodes, outside ``style/script/head/title/meta``, joined with ``" [SEP] "``)
implemented on the standard library's :class:`html.parser.HTMLParser`, including BeautifulSoup's collapsing of
white-space-only nodes. The site env applies it to the browser's rendered DOM; the text env builds the same string
directly from the page model, and tests check the two agree.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from html import escape
from html.parser import HTMLParser
from typing import Any

from stepgym.envs.webshop.engine import Element, Page, ShopState, text_segment

__all__ = ["html_to_text", "render_html"]

_IGNORED_PARENTS = frozenset({"style", "script", "head", "title", "meta"})
_VOID = frozenset(
    {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}
)
_STYLE = """
body{font-family:sans-serif;max-width:60em;margin:1em auto;padding:0 1em}
.btn{display:inline-block;margin:.2em;padding:.3em .8em;border:1px solid #888;border-radius:4px;
text-decoration:none;color:#000;background:#eee;cursor:pointer;font:inherit}
.product{border-top:1px solid #ddd;padding:.3em 0}.radio-toolbar label{margin-right:1em}
"""


def _a(s: Any) -> str:
    return escape(str(s), quote=True)


def _texts_html(el: Element) -> str:
    texts = el.attrs.get("texts")
    if texts is None:
        return _a(el.text)
    return "<br>".join(_a(t) for t in texts)


def render_html(
    page: Page,
    url_for: Callable[[ShopState], str],
    *,
    search_action: str,
    buy_action: str,
    title: str = "WebShop",
) -> str:
    """The page as HTML. ``url_for(state)`` gives a link target; ``search_action``/``buy_action`` the POST urls."""
    lines = [
        "<!DOCTYPE html>",
        "<html>",
        "<head>",
        '<meta charset="utf-8">',
        f"<title>{_a(title)}</title>",
        f"<style>{_STYLE}</style>",
        "</head>",
        f'<body data-page="{_a(page.state.page)}">',
    ]
    option_n = 0
    for el in page.elements:
        if el.kind == "heading" or el.kind == "text":
            tag = el.tag if el.tag in ("h1", "h2", "h3", "h4", "h5", "p", "li", "div") else "div"
            cls = ' class="product-title"' if el.tag == "h4" and page.state.page == "results" else ""
            lines.append(f"<{tag}{cls}>{_texts_html(el)}</{tag}>")
        elif el.kind == "search":
            lines.append(f'<form id="search-form" method="post" action="{_a(search_action)}">')
            lines.append(
                '<input id="search_input" type="text" name="search_query" placeholder="Search..." required>'
            )
            lines.append(f'<button class="btn" type="submit" data-key="search">{_a(el.text)}</button>')
            lines.append("</form>")
        elif el.kind == "button" and el.attrs.get("purchase"):
            lines.append(f'<form method="post" action="{_a(buy_action)}">')
            lines.append(
                f'<button class="btn purchase" type="submit" data-key="{_a(el.key)}">{_a(el.text)}</button>'
            )
            lines.append("</form>")
        elif el.kind == "button":
            assert el.target is not None
            lines.append(
                f'<a class="btn" data-key="{_a(el.key)}" href="{_a(url_for(el.target))}">{_a(el.text)}</a>'
            )
        elif el.kind == "link":
            assert el.target is not None
            lines.append(
                f'<div class="product"><a class="product-link" data-key="{_a(el.key)}" '
                f'href="{_a(url_for(el.target))}">{_a(el.text)}</a></div>'
            )
        elif el.kind == "option":
            assert el.target is not None
            oid = f"opt{option_n}"
            option_n += 1
            checked = " checked" if el.attrs.get("checked") else ""
            lines.append(
                f'<input type="radio" id="{oid}" name="{_a(el.attrs["group"])}" value="{_a(el.text)}" '
                f'data-key="{_a(el.key)}" data-url="{_a(url_for(el.target))}"{checked} '
                f'onclick="window.location.href=this.dataset.url">'
            )
            lines.append(f'<label for="{oid}">{_a(el.text)}</label>')
        elif el.kind == "image":
            lines.append(f'<img id="product-image" alt="" data-src="{_a(el.attrs.get("src", ""))}">')
        elif el.kind == "json":
            payload = json.dumps(el.attrs["data"], sort_keys=True).replace("<", "\\u003c")
            lines.append(f'<script type="application/json" id="reward-info">{payload}</script>')
    lines += ["</body>", "</html>", ""]
    return "\n".join(lines)


class _TextExtractor(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.buf: list[str] = []
        self.segments: list[str] = []

    def _flush(self) -> None:
        if not self.buf:
            return
        raw = "".join(self.buf)
        self.buf = []
        parent = self.stack[-1] if self.stack else "[document]"
        if parent in _IGNORED_PARENTS or parent == "[document]":
            return
        seg = text_segment(raw)
        if seg is not None:
            self.segments.append(seg)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._flush()
        if tag not in _VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._flush()

    def handle_endtag(self, tag: str) -> None:
        self._flush()
        if tag in self.stack:
            while self.stack:
                if self.stack.pop() == tag:
                    break

    def handle_data(self, data: str) -> None:
        self.buf.append(data)

    def handle_comment(self, data: str) -> None:
        self._flush()

    def handle_decl(self, decl: str) -> None:
        self._flush()


def html_segments(html_text: str) -> list[str]:
    parser = _TextExtractor()
    parser.feed(html_text)
    parser.close()
    parser._flush()
    return parser.segments


def html_to_text(html_text: str) -> str:
    """WebShop's ``text`` observation of an HTML page."""
    return " [SEP] ".join(html_segments(html_text))
