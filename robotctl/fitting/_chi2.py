"""Chi-squared quantiles and tail probabilities from scipy.special, as scipy.stats computes them.

scipy.stats is not imported: its import took 1.6-5 s, which the Scrapy add-on's local agent paid before the
crawl began. ``chi2_ppf(q, df) = 2 gammaincinv(df / 2, q)`` is chi2.ppf and ``chdtrc(df, x)`` is chi2.sf
(tests/fitting/test_chi2.py compares both with scipy.stats)."""

from __future__ import annotations

from scipy.special import chdtrc, gammaincinv


def chi2_ppf(q: float, df: float) -> float:
    """The q-quantile of chi-squared with ``df`` degrees of freedom."""
    return 2.0 * float(gammaincinv(df / 2.0, q))


#: chi2.sf(x, df) as ``chi2_sf(df, x)`` (vectorised)
chi2_sf = chdtrc

__all__ = ["chi2_ppf", "chi2_sf"]
