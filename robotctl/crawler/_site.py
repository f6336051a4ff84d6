"""A large web site generated from a seed and served on 127.0.0.1, for the demo crawl.

Every property of the site is a deterministic function of the seed and, where it moves, of the site's
own clock (seconds since it started), so two runs with the same seed see the same site at the same
moments:

Hosts
    ``hosts`` virtual hosts, each its own TCP port on 127.0.0.1 (a crawler tells hosts apart by
    ``host:port``), each with ``/robots.txt`` (a ``Crawl-delay`` and a disallowed ``/private/``),
    pages ``/p/<n>`` for n < ``pages_per_host`` and ``/`` linking to the first pages.
Page sizes
    Lognormal with mean ``mean_bytes`` and squared coefficient of variation ``size_scv`` before
    truncation to ``[min_bytes, max_bytes]`` (paper 000's crawler data had content sizes with a squared
    coefficient of variation in the tens). Embedded resources draw their sizes from the same law.
Bursts
    A page embeds ``k - 1`` resources (``<iframe src=/r/<n>/<j>>``), so that a page and its resources
    are a batch of k = 1..8 items, with probabilities ``batch_probs`` (the batch structure paper 000
    found in crawler traces).
Latency
    Each answer waits ``latency(host, t) + size / bandwidth_bps``. ``latency`` has a per-host median
    (lognormal spread ``latency_spread`` around ``latency_s``) times ``exp(latency_variation * s(t))``
    with s a smooth wave of periods ``latency_period_s`` and 1.618 times that, per-host phases: the
    latency drifts slowly, so the intervals between deliveries are correlated.
Change
    A share ``changing_share`` of items change content at the epochs of a Poisson process of mean
    interval ``change_interval_s``; their answers carry ``X-Useful-Life-S`` (seconds until the next
    change, exponential by memorylessness) and ``Cache-Control: max-age``. The other items never change.

The site counts what it serves (:class:`SiteStats`), including requests to disallowed paths and page
requests to one host closer together than its crawl delay, so tests can check the robots' manners.
"""

from __future__ import annotations

import asyncio
import contextlib
import html
import math
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np
from aiohttp import web

from robotctl import InputError

_TAG_ITEM, _TAG_CHANGE, _TAG_TEXT, _TAG_HOST, _TAG_VOCAB = 1, 2, 3, 4, 5
_PAGE = 0  # resource index of the page itself; resources are 1..k-1


@dataclass(frozen=True)
class SiteConfig:
    """Parameters of the generated site (``site:`` in config/demo.yaml; every key documented there).

    Attributes
    ----------
    seed : int
        Everything below is drawn from it.
    hosts : int
        Virtual hosts, one port each.
    pages_per_host : int
    links_per_page : tuple of int
        Fewest and most ``<a href>`` links per page.
    cross_host_share : float
        Share of links that point to another host.
    mean_bytes, size_scv : float
        Mean and squared coefficient of variation of the lognormal size law (before truncation).
    min_bytes, max_bytes : int
        Truncation of the sizes.
    batch_probs : tuple of float
        P(a page brings k items), k = 1..len; normalised.
    latency_s, latency_spread, latency_variation, latency_period_s : float
        See the module docstring.
    bandwidth_bps : float
        Bytes per second of one answer.
    changing_share, change_interval_s : float
        Share of items whose content changes, and the mean interval between changes.
    crawl_delay_s : float
        ``Crawl-delay`` announced in robots.txt.
    private_link_share : float
        Share of pages that also link to a disallowed ``/private/`` page.
    """

    seed: int = 1
    hosts: int = 12
    pages_per_host: int = 100_000
    links_per_page: tuple[int, int] = (4, 12)
    cross_host_share: float = 0.3
    mean_bytes: float = 6000.0
    size_scv: float = 100.0
    min_bytes: int = 300
    max_bytes: int = 300_000
    batch_probs: tuple[float, ...] = (0.3, 0.2, 0.15, 0.1, 0.08, 0.07, 0.05, 0.05)
    latency_s: float = 0.03
    latency_spread: float = 0.5
    latency_variation: float = 0.8
    latency_period_s: float = 20.0
    bandwidth_bps: float = 4e6
    changing_share: float = 0.6
    change_interval_s: float = 2.0
    crawl_delay_s: float = 0.05
    private_link_share: float = 0.05

    def __post_init__(self) -> None:
        def bad(name: str, problem: str, hint: str) -> InputError:
            return InputError(f"site.{name}", problem, hint)

        for name in ("hosts", "pages_per_host", "min_bytes", "max_bytes"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise bad(name, f"must be a whole number >= 1, got {v!r}", "write e.g. 12")
        if not isinstance(self.seed, int) or isinstance(self.seed, bool) or self.seed < 0:
            raise bad("seed", f"must be a whole number >= 0, got {self.seed!r}", "write e.g. 1")
        lo_hi = tuple(self.links_per_page)
        if len(lo_hi) != 2 or not all(isinstance(x, int) and x >= 0 for x in lo_hi) or lo_hi[0] > lo_hi[1]:
            raise bad("links_per_page", f"must be [fewest, most] with 0 <= fewest <= most, got {lo_hi!r}",
                      "write e.g. [4, 12]")
        object.__setattr__(self, "links_per_page", (int(lo_hi[0]), int(lo_hi[1])))
        for name in ("mean_bytes", "size_scv", "latency_s", "latency_period_s", "bandwidth_bps",
                     "change_interval_s"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v <= 0:
                raise bad(name, f"must be a finite number > 0, got {v!r}", "write e.g. 1.5")
            object.__setattr__(self, name, float(v))
        for name in ("latency_spread", "latency_variation", "crawl_delay_s"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
                raise bad(name, f"must be a finite number >= 0, got {v!r}", "write e.g. 0.5")
            object.__setattr__(self, name, float(v))
        for name in ("cross_host_share", "changing_share", "private_link_share"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int | float) or not 0 <= v <= 1:
                raise bad(name, f"must be a share in [0, 1], got {v!r}", "write e.g. 0.5")
            object.__setattr__(self, name, float(v))
        if self.min_bytes > self.max_bytes:
            raise bad("min_bytes", f"is {self.min_bytes} > max_bytes = {self.max_bytes}", "swap them")
        probs = tuple(float(p) for p in self.batch_probs)
        if not probs or any(not math.isfinite(p) or p < 0 for p in probs) or sum(probs) <= 0:
            raise bad("batch_probs", f"must be non-negative numbers with a positive sum, got {probs!r}",
                      "write P(k items), k = 1, 2, ..., e.g. [0.3, 0.2, 0.5]")
        total = sum(probs)
        object.__setattr__(self, "batch_probs", tuple(p / total for p in probs))

    @classmethod
    def from_dict(cls, raw: Any, *, field_prefix: str = "site") -> SiteConfig:
        """From the ``site:`` mapping; unknown keys are errors."""
        return _dataclass_from_mapping(cls, raw, field_prefix)

    def to_dict(self) -> dict[str, Any]:
        return {f.name: (list(v) if isinstance(v := getattr(self, f.name), tuple) else v) for f in fields(self)}


def _dataclass_from_mapping(cls: Any, raw: Any, prefix: str) -> Any:
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise InputError(prefix, f"must be a mapping, got {type(raw).__name__}", "write it as key: value lines")
    known = {f.name for f in fields(cls)}
    for key in raw:
        if key not in known:
            raise InputError(f"{prefix}.{key}", "is not a known key", f"keys of {prefix}: {', '.join(sorted(known))}")
    kwargs = {k: (tuple(v) if isinstance(v, list) else v) for k, v in raw.items()}
    try:
        return cls(**kwargs)
    except InputError as exc:
        if exc.field.startswith(prefix):
            raise
        raise InputError(f"{prefix}.{exc.field.split('.', 1)[-1]}", exc.problem, exc.hint) from None


@dataclass(frozen=True)
class Item:
    """What one URL of the site holds at one moment."""

    host: int
    page: int
    resource: int
    size: int
    changing: bool
    version: int
    useful_life_s: float | None
    links: tuple[tuple[int, int], ...] = ()
    resources: int = 0
    private_link: int | None = None


class SiteModel:
    """The site as pure functions of (seed, host, page, resource, time); no I/O.

    Parameters
    ----------
    config : SiteConfig
    """

    def __init__(self, config: SiteConfig) -> None:
        self.config = config
        c = config
        self._sigma2 = math.log1p(c.size_scv)
        self._mu = math.log(c.mean_bytes) - self._sigma2 / 2
        rng = np.random.default_rng([c.seed, _TAG_VOCAB])
        self.vocabulary = _vocabulary(rng, 4000)
        ranks = np.arange(1, len(self.vocabulary) + 1, dtype=float)
        weights = ranks ** -1.07
        self._word_cdf = np.cumsum(weights / weights.sum())
        self._word_len = float(np.dot(weights / weights.sum(), [len(w) + 1 for w in self.vocabulary]))
        host_rng = np.random.default_rng([c.seed, _TAG_HOST])
        z = host_rng.standard_normal(c.hosts)
        self.host_latency_median = c.latency_s * np.exp(c.latency_spread * z)
        self.host_phases = host_rng.uniform(0, 2 * math.pi, size=(c.hosts, 2))
        self._cum_batch = np.cumsum(c.batch_probs)

    # -- static properties of an item ----------------------------------------------------------------
    def _item_rng(self, host: int, page: int, resource: int) -> np.random.Generator:
        return np.random.default_rng([self.config.seed, _TAG_ITEM, host, page, resource])

    def size_of(self, rng: np.random.Generator) -> int:
        c = self.config
        x = math.exp(self._mu + math.sqrt(self._sigma2) * float(rng.standard_normal()))
        return int(min(c.max_bytes, max(c.min_bytes, round(x))))

    def resources_of(self, host: int, page: int) -> int:
        """How many resources page ``page`` of ``host`` embeds (k - 1 for a batch of k items)."""
        return self.item(host, page, _PAGE, None).resources

    def item(self, host: int, page: int, resource: int, t: float | None) -> Item:
        """The item at ``/p/<page>`` (resource 0) or ``/r/<page>/<resource>`` on ``host`` at site time t
        (``t=None``: its static properties only, version 0)."""
        c = self.config
        rng = self._item_rng(host, page, resource)
        size = self.size_of(rng)
        changing = bool(rng.random() < c.changing_share)
        links: tuple[tuple[int, int], ...] = ()
        n_res = 0
        private = None
        if resource == _PAGE:
            n_res = int(np.searchsorted(self._cum_batch, rng.random(), side="right"))
            n_res = min(n_res, len(c.batch_probs) - 1)
            n_links = int(rng.integers(c.links_per_page[0], c.links_per_page[1] + 1))
            out = []
            for _ in range(n_links):
                h = host
                if c.hosts > 1 and rng.random() < c.cross_host_share:
                    h = int((host + 1 + rng.integers(0, c.hosts - 1)) % c.hosts)
                out.append((h, int(rng.integers(0, c.pages_per_host))))
            links = tuple(out)
            if rng.random() < c.private_link_share:
                private = int(rng.integers(0, 1_000_000))
        version, life = 0, None
        if changing and t is not None:
            version, life = self._change_state(host, page, resource, t)
        return Item(host, page, resource, size, changing, version, life, links, n_res, private)

    # -- change epochs -------------------------------------------------------------------------------
    def _epochs(self, host: int, page: int, resource: int, slot: int) -> np.ndarray:
        """Change epochs in slot [slot * d, (slot + 1) * d): Poisson(1) many, uniform, sorted."""
        d = self.config.change_interval_s
        rng = np.random.default_rng([self.config.seed, _TAG_CHANGE, host, page, resource, slot])
        n = int(rng.poisson(1.0))
        return np.sort(slot * d + d * rng.random(n))

    def _change_state(self, host: int, page: int, resource: int, t: float) -> tuple[int, float | None]:
        """(version, seconds until the next change) at time t; the version counts slots and epochs."""
        d = self.config.change_interval_s
        t = max(t, 0.0)
        slot = int(t // d)
        version = 0
        for s in range(slot, max(-1, slot - 10_000), -1):
            e = self._epochs(host, page, resource, s)
            before = e[e <= t]
            if before.size:
                version = s * 16 + int(before.size)
                break
        life: float | None = None
        for s in range(slot, slot + 10_000):
            e = self._epochs(host, page, resource, s)
            after = e[e > t]
            if after.size:
                life = float(after[0] - t)
                break
        return version, life

    # -- time-varying latency ------------------------------------------------------------------------
    def latency(self, host: int, t: float) -> float:
        """Time to the first byte of an answer from ``host`` at site time t (seconds)."""
        c = self.config
        p1 = c.latency_period_s
        ph = self.host_phases[host]
        wave = 0.5 * (math.sin(2 * math.pi * t / p1 + ph[0]) + math.sin(2 * math.pi * t / (1.618 * p1) + ph[1]))
        return float(self.host_latency_median[host]) * math.exp(c.latency_variation * wave)

    # -- content -------------------------------------------------------------------------------------
    def words(self, host: int, page: int, resource: int, version: int, n_bytes: int) -> str:
        rng = np.random.default_rng([self.config.seed, _TAG_TEXT, host, page, resource, version])
        n = max(1, int(n_bytes / self._word_len) + 8)
        idx = np.searchsorted(self._word_cdf, rng.random(n), side="right")
        idx = np.minimum(idx, len(self.vocabulary) - 1)
        text = " ".join(self.vocabulary[i] for i in idx)
        return text[:n_bytes].rstrip()

    def render(self, item: Item, url_of: Callable[[int, int], str]) -> bytes:
        """The HTML of an item, padded with text to its size. ``url_of(host, page)`` makes a link."""
        h, p, r = item.host, item.page, item.resource
        title = html.escape(self.words(h, p, r, item.version, 40))
        head = f"<!doctype html><html><head><meta charset=utf-8><title>{title}</title></head><body>"
        parts = [head, f"<h1>{title}</h1>"]
        if r == _PAGE:
            nav = []
            for lh, lp in item.links:
                anchor = html.escape(self.words(lh, lp, _PAGE, 0, 24))
                nav.append(f'<a href="{url_of(lh, lp) if lh != h else f"/p/{lp}"}">{anchor}</a>')
            if item.private_link is not None:
                nav.append(f'<a href="/private/{item.private_link}">members</a>')
            parts.append("<nav>" + " ".join(nav) + "</nav>")
            parts.extend(f'<iframe src="/r/{p}/{j}"></iframe>' for j in range(1, item.resources + 1))
        tail = "</body></html>"
        used = sum(len(x) for x in parts) + len(tail) + len("<p></p>")
        text = self.words(h, p, r, item.version, max(0, item.size - used))
        parts.append("<p>" + text + " " * max(0, item.size - used - len(text)) + "</p>")
        parts.append(tail)
        return "".join(parts).encode()


def _vocabulary(rng: np.random.Generator, n: int) -> list[str]:
    onsets = ["b", "c", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "z", "br", "cl",
              "dr", "st", "tr", "ch", "sh", "th", "gr", "pl", "qu"]
    vowels = ["a", "e", "i", "o", "u", "ai", "ea", "io", "ou"]
    codas = ["", "", "n", "r", "s", "l", "m", "t", "nd", "st"]
    seen: dict[str, None] = {}
    while len(seen) < n:
        k = int(rng.integers(1, 4))
        w = "".join(onsets[rng.integers(len(onsets))] + vowels[rng.integers(len(vowels))] for _ in range(k))
        w += codas[rng.integers(len(codas))]
        seen.setdefault(w, None)
    return list(seen)


# -- serving --------------------------------------------------------------------------------------
@dataclass
class SiteStats:
    """What the site served."""

    pages: int = 0
    resources: int = 0
    robots_txt: int = 0
    bytes: int = 0
    not_found: int = 0
    disallowed_hits: int = 0
    impolite: int = 0
    changing_served: int = 0
    sizes: list[int] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in self.__dict__.items() if k != "sizes"}
        if self.sizes:
            a = np.asarray(self.sizes, dtype=float)
            d["mean_bytes"] = float(a.mean())
            d["size_scv"] = float(a.var() / a.mean() ** 2)
        return d


class Site:
    """The served site: a :class:`SiteModel`, its clock, its ports and its counters.

    Use :func:`run_site` to serve it.
    """

    #: Rendered bodies kept for answers asked again (resources of a page fetched twice, revisits).
    CACHE_BYTES = 16 << 20

    def __init__(self, config: SiteConfig, *, clock: Callable[[], float] | None = None) -> None:
        self.config = config
        self.model = SiteModel(config)
        self._clock = clock
        self._t0 = 0.0
        self.ports: list[int] = []
        self._port_host: dict[int, int] = {}
        self.stats = SiteStats()
        self._last_page: dict[int, float] = {}
        self._cache: OrderedDict[tuple[int, int, int, int], bytes] = OrderedDict()
        self._cache_bytes = 0
        self.started = False

    def start_clock(self) -> None:
        self._t0 = self._now_raw()
        self.started = True

    def _now_raw(self) -> float:
        return self._clock() if self._clock is not None else asyncio.get_running_loop().time()

    def now(self) -> float:
        """Site time: seconds since the site started."""
        return self._now_raw() - self._t0

    def url(self, host: int, page: int | None = None) -> str:
        base = f"http://127.0.0.1:{self.ports[host]}"
        return base + ("/" if page is None else f"/p/{page}")

    def seed_urls(self) -> list[str]:
        """The front page of every host."""
        return [self.url(h) for h in range(self.config.hosts)]

    def host_of(self, request: web.Request) -> int:
        port = request.url.port
        if port is None or port not in self._port_host:
            raise web.HTTPMisdirectedRequest(text="unknown host")
        return self._port_host[port]

    def set_ports(self, ports: list[int]) -> None:
        self.ports = list(ports)
        self._port_host = {p: h for h, p in enumerate(self.ports)}

    def body(self, item: Item) -> bytes:
        key = (item.host, item.page, item.resource, item.version)
        data = self._cache.get(key)
        if data is None:
            data = self.model.render(item, lambda h, p: self.url(h, p))
            self._cache[key] = data
            self._cache_bytes += len(data)
            while self._cache_bytes > self.CACHE_BYTES and len(self._cache) > 1:
                _, old = self._cache.popitem(last=False)
                self._cache_bytes -= len(old)
        else:
            self._cache.move_to_end(key)
        return data

    def note_page_request(self, host: int, t: float) -> None:
        last = self._last_page.get(host)
        if last is not None and t - last < 0.9 * self.config.crawl_delay_s:
            self.stats.impolite += 1
        self._last_page[host] = t


SITE = web.AppKey("site", Site)


async def _robots_txt(request: web.Request) -> web.Response:
    site: Site = request.app[SITE]
    site.host_of(request)
    site.stats.robots_txt += 1
    text = f"User-agent: *\nDisallow: /private/\nCrawl-delay: {site.config.crawl_delay_s:g}\n"
    return web.Response(text=text, content_type="text/plain")


async def _serve_item(request: web.Request, page: int, resource: int) -> web.Response:
    site: Site = request.app[SITE]
    host = site.host_of(request)
    c = site.config
    t = site.now()
    if not 0 <= page < c.pages_per_host:
        site.stats.not_found += 1
        raise web.HTTPNotFound(text=f"no page {page} on host {host}")
    if resource == _PAGE:
        site.note_page_request(host, t)
    if resource != _PAGE and resource > site.model.resources_of(host, page):
        site.stats.not_found += 1
        raise web.HTTPNotFound(text=f"page {page} has no resource {resource}")
    item = site.model.item(host, page, resource, t)
    body = site.body(item)
    await asyncio.sleep(site.model.latency(host, t) + len(body) / c.bandwidth_bps)
    headers = {}
    if item.useful_life_s is not None:
        headers["X-Useful-Life-S"] = f"{item.useful_life_s:.6f}"
        headers["Cache-Control"] = f"max-age={int(item.useful_life_s)}"
        site.stats.changing_served += 1
    else:
        headers["Cache-Control"] = "max-age=31536000"
    st = site.stats
    if resource == _PAGE:
        st.pages += 1
    else:
        st.resources += 1
    st.bytes += len(body)
    st.sizes.append(len(body))
    return web.Response(body=body, content_type="text/html", charset="utf-8", headers=headers)


async def _page(request: web.Request) -> web.Response:
    return await _serve_item(request, int(request.match_info["page"]), _PAGE)


async def _resource(request: web.Request) -> web.Response:
    return await _serve_item(request, int(request.match_info["page"]), int(request.match_info["res"]))


async def _front(request: web.Request) -> web.Response:
    site: Site = request.app[SITE]
    host = site.host_of(request)
    links = " ".join(f'<a href="/p/{n}">page {n}</a>' for n in range(min(20, site.config.pages_per_host)))
    text = f"<!doctype html><html><head><title>host {host}</title></head><body>{links}</body></html>"
    site.stats.pages += 1
    site.stats.bytes += len(text)
    return web.Response(text=text, content_type="text/html")


async def _private(request: web.Request) -> web.Response:
    site: Site = request.app[SITE]
    site.host_of(request)
    site.stats.disallowed_hits += 1
    return web.Response(text="<html><body>members only</body></html>", content_type="text/html")


def create_site_app(site: Site) -> web.Application:
    """The aiohttp application serving ``site`` on every port it listens on."""
    app = web.Application()
    app[SITE] = site
    app.router.add_get("/", _front)
    app.router.add_get("/robots.txt", _robots_txt)
    app.router.add_get(r"/p/{page:\d+}", _page)
    app.router.add_get(r"/r/{page:\d+}/{res:\d+}", _resource)
    app.router.add_get("/private/{rest:.*}", _private)
    return app


@contextlib.asynccontextmanager
async def run_site(config: SiteConfig, *, host: str = "127.0.0.1") -> AsyncIterator[Site]:
    """Serve the site on ``config.hosts`` free ports of ``host`` inside the running loop; its clock starts
    when it is ready."""
    site = Site(config)
    runner = web.AppRunner(create_site_app(site), handle_signals=False, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    try:
        ports = []
        for _ in range(config.hosts):
            before = len(runner.addresses)
            await web.TCPSite(runner, host, 0).start()
            ports.append(int(runner.addresses[before][1]))
        site.set_ports(ports)
        site.start_clock()
        yield site
    finally:
        await runner.cleanup()
