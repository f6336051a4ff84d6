"""The service law (issue 3, step 7): from service-time samples, or from content sizes and a processing
rate, a PH law by :func:`h2_from_moments`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from robotctl import InputError

from ._checks import float_array, positive_number, time_scale
from ._ph2 import PhFit, h2_from_moments


@dataclass(frozen=True, eq=False)
class ServiceFit:
    """The fitted service law and where it came from.

    Attributes
    ----------
    fit : PhFit
        The PH fit (``fit.law`` is the law, ``fit.status`` its rung).
    source : str
        ``service_times`` or ``sizes_bytes / processing_rate_bps``.
    n : int
        Samples used.
    mean, scv, third_moment : float
        Of the samples (seconds).
    note : str
        Anything the report should say beyond the fit's message (e.g. ignored inputs).
    """

    fit: PhFit
    source: str
    n: int
    mean: float
    scv: float
    third_moment: float
    note: str


def usable_samples(x: NDArray[np.float64]) -> tuple[NDArray[np.float64], str]:
    """The samples the moment fit can use, and why any were left out ("" when none was).

    The fit matches the first three moments, so every sample's cube must stay finite in floating point with
    ``n`` of them summed: x <= cbrt(max_float / n). A larger value is finite but absurd as a time (1e308 s
    once reached the agent) and would make every moment infinite; it is left out and the report says so.
    """
    n = int(x.size)
    if n == 0:
        return x, ""
    limit = float(np.cbrt(np.finfo(np.float64).max / n))
    keep = x <= limit
    dropped = n - int(keep.sum())
    if not dropped:
        return x, ""
    return x[keep], (f"ignored {dropped} of {n} sample(s) above {limit:.3g} s: too large for the moments the fit "
                     "matches (their cubes overflow)")


def fit_service(service_times: Any = None, sizes_bytes: Any = None, processing_rate_bps: float | None = None, *,
                min_samples: int = 10, max_order: int = 10) -> ServiceFit:
    """Fit the indexing time of one page.

    Parameters
    ----------
    service_times : array_like, optional
        Observed service times (s), >= 0. Preferred when given.
    sizes_bytes : array_like, optional
        Content sizes (bytes), >= 0; the service time of a page is its size / ``processing_rate_bps``.
    processing_rate_bps : float, optional
        Bytes indexed per second; needed with ``sizes_bytes``.
    min_samples : int
        Below this many samples only the mean is used (exponential law).
    max_order : int
        Passed to :func:`h2_from_moments`.

    Raises
    ------
    InputError
        No service information, negative or non-finite values, a missing or bad processing rate, or a
        zero mean.
    """
    note = ""
    has_times = service_times is not None and np.size(service_times) > 0
    has_sizes = sizes_bytes is not None and np.size(sizes_bytes) > 0
    if has_times:
        x = float_array("service_times", service_times, nonnegative=True)
        source = "service_times"
        if has_sizes:
            note = "service_times given, so sizes_bytes were not used"
    elif has_sizes:
        sizes = float_array("sizes_bytes", sizes_bytes, nonnegative=True)
        if processing_rate_bps is None:
            raise InputError("processing_rate_bps", "is missing, and sizes_bytes alone give no service time",
                             "give the indexer's processing rate in bytes per second (e.g. --processing-rate-bps 2e6)")
        rate = positive_number("processing_rate_bps", processing_rate_bps)
        x = sizes / rate
        source = "sizes_bytes / processing_rate_bps"
    else:
        raise InputError("service_times", "no service information: neither service_times nor sizes_bytes given",
                         "give service times (s), or content sizes with a processing rate in bytes per second")
    x, dropped = usable_samples(x)
    if dropped:
        note = (note + "; " if note else "") + dropped
    n = int(x.size)
    if n == 0:
        raise InputError(source.split(" ")[0], "no value is small enough to fit", "give service times in seconds")
    m1 = float(x.mean())
    if not m1 > 0:
        raise InputError(source.split(" ")[0], f"all {n} values are 0", "a page takes some time to index")
    time_scale(source.split(" ")[0], m1)
    y = x / m1
    m2 = float(np.dot(y, y) / n)
    m3 = float(np.dot(y * y, y) / n)
    if n < min_samples:
        fit = h2_from_moments(m1, None, None, max_order=max_order)
        note = (note + "; " if note else "") + f"only {n} sample(s) (< {min_samples}): exponential law of the mean"
    else:
        fit = h2_from_moments(m1, m2 * m1 * m1, m3 * m1**3, max_order=max_order)
    return ServiceFit(fit, source, n, m1, m2 - 1.0, m3 * m1**3, note)
