"""fitting's chi-squared functions (scipy.special, so that scipy.stats is not imported) against scipy.stats."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from robotctl.fitting._chi2 import chi2_ppf, chi2_sf


@pytest.mark.parametrize("df", [1, 2, 3, 7, 40, 401, 4000])
def test_quantiles_and_tails_equal_scipy_stats(df: int) -> None:
    for q in (1e-6, 0.005, 0.05, 0.5, 0.95, 0.995, 1 - 1e-6):
        assert chi2_ppf(q, df) == pytest.approx(stats.chi2.ppf(q, df), rel=1e-12)
    x = np.array([0.0, 0.3, 1.0, df / 2, df, 2.0 * df + 10])
    np.testing.assert_allclose(chi2_sf(df, x), stats.chi2.sf(x, df), rtol=1e-12, atol=0)
