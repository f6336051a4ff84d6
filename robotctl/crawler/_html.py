"""HTML reading shared by the robots (links and embedded resources) and the indexer (text and tokens).

Both use the standard library's :class:`html.parser.HTMLParser`, which tolerates the broken markup
of real sites.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from html.parser import HTMLParser
from urllib.parse import urldefrag, urljoin, urlsplit

#: (tag, attribute) pairs whose URL is a resource the browser would fetch with the page
_RESOURCE_ATTRS = {("img", "src"), ("iframe", "src"), ("frame", "src"), ("embed", "src"), ("script", "src"),
                   ("object", "data"), ("source", "src")}
_SKIP_TEXT = {"script", "style", "noscript", "template"}
_TOKEN = re.compile(r"[^\W_]{2,}")


@dataclass(frozen=True)
class Outline:
    """What a robot needs from a page.

    Attributes
    ----------
    links : tuple of str
        Absolute http(s) URLs of ``<a href>``, fragments removed, in document order, each once.
    resources : tuple of str
        Absolute URLs of embedded resources (images, frames, scripts, stylesheets, objects), each once.
    """

    links: tuple[str, ...]
    resources: tuple[str, ...]


class _OutlineParser(HTMLParser):
    def __init__(self, base: str) -> None:
        super().__init__(convert_charrefs=True)
        self.base = base
        self.links: dict[str, None] = {}
        self.resources: dict[str, None] = {}

    def _url(self, value: str | None) -> str | None:
        if not value:
            return None
        url, _ = urldefrag(urljoin(self.base, value.strip()))
        return url if urlsplit(url).scheme in ("http", "https") else None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "base" and a.get("href"):
            self.base = urljoin(self.base, a["href"] or "")
        elif tag == "a":
            url = self._url(a.get("href"))
            if url is not None and "nofollow" not in (a.get("rel") or "").lower():
                self.links.setdefault(url, None)
        elif tag == "link":
            rel = (a.get("rel") or "").lower().split()
            if "stylesheet" in rel:
                url = self._url(a.get("href"))
                if url is not None:
                    self.resources.setdefault(url, None)
        else:
            for t, attr in _RESOURCE_ATTRS:
                if t == tag:
                    url = self._url(a.get(attr))
                    if url is not None:
                        self.resources.setdefault(url, None)


def outline(html: str, base_url: str) -> Outline:
    """Links and embedded resources of a page, resolved against ``base_url``."""
    p = _OutlineParser(base_url)
    p.feed(html)
    p.close()
    return Outline(tuple(p.links), tuple(p.resources))


class _TextParser(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._skip = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _SKIP_TEXT:
            self._skip += 1
        elif tag == "img":
            alt = dict(attrs).get("alt")
            if alt:
                self.parts.append(alt)

    def handle_endtag(self, tag: str) -> None:
        if tag in _SKIP_TEXT and self._skip:
            self._skip -= 1

    def handle_data(self, data: str) -> None:
        if not self._skip:
            self.parts.append(data)


def visible_text(html: str) -> str:
    """The text a reader sees (script and style contents left out)."""
    p = _TextParser()
    p.feed(html)
    p.close()
    return " ".join(p.parts)


def term_counts(text: str) -> Counter[str]:
    """Lower-cased word tokens of at least two letters or digits, with their counts."""
    return Counter(_TOKEN.findall(text.lower()))
