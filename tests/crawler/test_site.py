"""The generated site: determinism, the laws it is documented to follow, and what it serves."""

from __future__ import annotations

import math

import aiohttp
import numpy as np
import pytest
from scipy import stats

from robotctl.crawler import SiteConfig, SiteModel, run_site
from robotctl.model import InputError


def small(**kw: object) -> SiteConfig:
    base: dict[str, object] = {"hosts": 3, "pages_per_host": 1000}
    base.update(kw)
    return SiteConfig(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(("field", "value"), [
    ("hosts", 0), ("pages_per_host", -1), ("mean_bytes", 0.0), ("size_scv", float("nan")),
    ("changing_share", 1.5), ("links_per_page", (5, 2)), ("batch_probs", (0.0, 0.0)), ("latency_s", -1.0),
])
def test_invalid_config_names_the_field(field: str, value: object) -> None:
    with pytest.raises(InputError, match=rf"^site\.{field}:"):
        small(**{field: value})


def test_from_dict_rejects_unknown_keys() -> None:
    with pytest.raises(InputError, match=r"^site\.hostz: is not a known key"):
        SiteConfig.from_dict({"hostz": 3})


def test_same_seed_same_site_other_seed_other_site() -> None:
    a, b, c = SiteModel(small(seed=3)), SiteModel(small(seed=3)), SiteModel(small(seed=4))
    ia, ib, ic = (m.item(1, 17, 0, 5.0) for m in (a, b, c))
    assert ia == ib
    assert a.render(ia, lambda h, p: f"u{h}/{p}") == b.render(ib, lambda h, p: f"u{h}/{p}")
    assert (ia.size, ia.links) != (ic.size, ic.links)


def test_sizes_follow_the_truncated_lognormal() -> None:
    cfg = small()  # the default size law
    model = SiteModel(cfg)
    rng = np.random.default_rng(11)
    n = 40_000
    x = np.array([model.size_of(rng) for _ in range(n)], dtype=float)
    # exact moments of min(max(X, a), b) for the lognormal X of the configured mean and scv
    s2 = math.log1p(cfg.size_scv)
    law = stats.lognorm(s=math.sqrt(s2), scale=math.exp(math.log(cfg.mean_bytes) - s2 / 2))
    a, b = float(cfg.min_bytes), float(cfg.max_bytes)

    def clipped_moment(k: int) -> float:
        inner = law.expect(lambda v: v ** k, lb=a, ub=b)
        return a ** k * law.cdf(a) + inner + b ** k * law.sf(b)

    m1, m2 = clipped_moment(1), clipped_moment(2)
    sd = math.sqrt(m2 - m1 ** 2)
    assert abs(x.mean() - m1) < 4 * sd / math.sqrt(n)
    assert x.min() >= a and x.max() <= b
    assert (m2 - m1 ** 2) / m1 ** 2 > 10  # the documented "squared coefficient of variation in the tens"


def test_batches_follow_batch_probs() -> None:
    probs = (0.5, 0.25, 0.125, 0.125)
    model = SiteModel(small(batch_probs=probs))
    n = 1500
    k = np.array([model.resources_of(0, p) + 1 for p in range(n)])
    counts = np.bincount(k, minlength=len(probs) + 1)[1:]
    assert counts.sum() == n
    chi2 = float(((counts - n * np.array(probs)) ** 2 / (n * np.array(probs))).sum())
    assert chi2 < stats.chi2(len(probs) - 1).ppf(0.999)


def test_useful_life_is_exponential_with_the_change_interval_and_ends_at_a_change() -> None:
    cfg = small(changing_share=1.0, change_interval_s=2.0)
    model = SiteModel(cfg)
    rng = np.random.default_rng(5)
    lives = []
    for p in range(600):
        t = float(rng.uniform(0, 50))
        it = model.item(0, p, 0, t)
        assert it.changing and it.useful_life_s is not None
        lives.append(it.useful_life_s)
        # the content is the same just before the change and different just after it
        assert model.item(0, p, 0, t + it.useful_life_s - 1e-6).version == it.version
        assert model.item(0, p, 0, t + it.useful_life_s + 1e-6).version != it.version
    lv = np.array(lives)
    assert abs(lv.mean() - 2.0) < 4 * 2.0 / math.sqrt(lv.size)
    assert stats.kstest(lv, stats.expon(scale=2.0).cdf).pvalue > 1e-3


def test_stable_items_never_expire() -> None:
    model = SiteModel(small(changing_share=0.0))
    assert all(model.item(1, p, 0, 10.0).useful_life_s is None for p in range(50))


def test_latency_drifts_slowly_within_its_band() -> None:
    cfg = small(latency_s=0.05, latency_variation=0.5, latency_period_s=10.0)
    model = SiteModel(cfg)
    ts = np.linspace(0, 40, 401)
    lat = np.array([model.latency(2, t) for t in ts])
    med = model.host_latency_median[2]
    assert np.all(lat <= med * math.exp(0.5) + 1e-12) and np.all(lat >= med * math.exp(-0.5) - 1e-12)
    assert lat.max() / lat.min() > 1.5                       # it moves ...
    assert np.max(np.abs(np.diff(np.log(lat)))) < 0.05       # ... slowly (0.1 s steps)


def test_rendered_page_has_its_size_links_and_resources() -> None:
    model = SiteModel(small())
    for p in range(40):
        it = model.item(0, p, 0, 1.0)
        body = model.render(it, lambda h, p: f"http://h{h}/p/{p}").decode()
        # padded with text up to its size; a small page is as long as its markup
        markup = len(body) - len(body[body.index("<p>") + 3: body.index("</p>")])
        assert len(body) == max(markup, it.size)
    assert body.count("<iframe") == it.resources
    assert body.count("<a href") == len(it.links) + (it.private_link is not None)


async def test_served_site_answers_like_a_site() -> None:
    cfg = small(crawl_delay_s=0.25, changing_share=0.5)
    async with run_site(cfg) as site, aiohttp.ClientSession() as http:
        assert len(set(site.ports)) == cfg.hosts
        async with http.get(site.seed_urls()[0] + "robots.txt") as r:
            text = await r.text()
        assert "Disallow: /private/" in text and "Crawl-delay: 0.25" in text
        page = next(p for p in range(200) if site.model.resources_of(1, p) >= 1
                    and site.model.item(1, p, 0, None).size > 3000)
        async with http.get(site.url(1, page)) as r:
            body = await r.read()
            assert r.status == 200 and r.content_type == "text/html"
            assert "max-age=" in r.headers["Cache-Control"]
        expected = site.model.item(1, page, 0, None)
        assert len(body) == expected.size
        async with http.get(site.url(1, page).replace("/p/", "/r/") + "/1") as r:
            assert r.status == 200
        async with http.get(site.url(1, page).replace("/p/", "/r/") + f"/{expected.resources + 1}") as r:
            assert r.status == 404
        async with http.get(site.url(1, cfg.pages_per_host)) as r:
            assert r.status == 404
        async with http.get(site.seed_urls()[2] + "private/7") as r:
            assert r.status == 200
        # two page requests to one host closer than its crawl delay: counted as impolite
        async with http.get(site.url(2, 1)) as r:
            await r.read()
        async with http.get(site.url(2, 2)) as r:
            await r.read()
        s = site.stats
        assert (s.pages, s.resources, s.robots_txt, s.not_found, s.disallowed_hits, s.impolite) == (3, 1, 1, 2, 1, 1)
