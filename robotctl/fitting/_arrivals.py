"""Arrival arithmetic beyond one fit: a Poisson-batch BMAP written with two phases, and the arrivals of
modes a window does not observe.

:func:`fit_model` fits the modes a window observes (rescaled to their exact exposure when given
``mode_exposure_s``) and gives every other mode paper 000's linear rule D^(r) = (r / r_obs) D^(r_obs)
from the nearest observed mode. A caller that refits window after window (the agent) knows more: the
last observed BMAP of a mode the current window misses. :func:`adjust_arrivals` puts the two together.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING

import numpy as np

from robotctl.model import BMAP, ModeArrivals

if TYPE_CHECKING:
    from ._fit_types import ModelFit


def lift(b: BMAP, order: int) -> BMAP | None:
    """``b`` written with ``order`` phases without changing the process, or None when that is not done.

    Only a Poisson-batch BMAP (order 1, batches of k at rate d_k, lambda = sum_k d_k = -D_0) is lifted,
    to two phases: D_0 = [[-2 lambda, lambda], [lambda, -2 lambda]], D_k = d_k I. In either phase batches of
    k arrive at rate d_k, and the phase flips at rate lambda without an arrival, so the counting process
    is the same; the phases only let the BMAP share the order of MAP(2) modes (one ``ModeArrivals``
    needs one order).

    Examples
    --------
    >>> import numpy as np
    >>> from robotctl.model import BMAP
    >>> b = BMAP((np.array([[-3.0]]), np.array([[2.0]]), np.array([[1.0]])))
    >>> two = lift(b, 2)
    >>> two.order, round(float(two.rate), 12) == round(float(b.rate), 12)
    (2, True)
    >>> lift(two, 3) is None
    True
    """
    if b.order == order:
        return b
    if b.order != 1 or order != 2:
        return None
    lam = -float(b.D[0][0, 0])
    D0 = np.array([[-2 * lam, lam], [lam, -2 * lam]])
    return BMAP((D0, *(float(Dk[0, 0]) * np.eye(2) for Dk in b.D[1:])))


@dataclass(frozen=True, eq=False)
class ArrivalAdjustment:
    """The arrivals of every mode of a fit, with what the caller remembers beyond its window.

    Attributes
    ----------
    arrivals : ModeArrivals
        One BMAP per mode of the fit, all of the fit's order.
    sources : mapping of int to str
        Per mode: ``observed`` (fitted from this window), ``remembered`` (the caller's last observed
        BMAP of the mode), or the fit's own source for the rest (``linear``).
    """

    arrivals: ModeArrivals
    sources: Mapping[int, str]


def adjust_arrivals(fit: ModelFit, remembered: Mapping[int, BMAP] | None = None) -> ArrivalAdjustment:
    """The fitted arrivals, with modes the window does not observe taken from ``remembered``.

    Parameters
    ----------
    fit : ModelFit
        From :func:`fit_model`. Its observed modes are kept as fitted (with ``mode_exposure_s``,
        already rescaled to pages delivered in the mode / seconds spent in it).
    remembered : mapping of int to BMAP, optional
        The last observed BMAP of modes (not used after a joint fit, whose modes share one phase
        process: its arrivals are returned as they are). A mode the window does not observe takes its remembered BMAP
        when it can be written with the fit's order (:func:`lift`), else keeps the fit's linear rule
        D^(r) = (r / r_obs) D^(r_obs) from the nearest observed mode (paper 000's real-data model).

    Returns
    -------
    ArrivalAdjustment
    """
    memory = remembered or {}
    order = fit.model.arrivals.order
    if fit.joint is not None:
        # one phase process for all modes: a remembered BMAP lives on another window's phases, so the
        # modes the window misses keep the joint fit's linear rule on the rates
        seen = set(fit.joint.data.modes)
        return ArrivalAdjustment(fit.model.arrivals, MappingProxyType(
            {m: ("observed" if m in seen else "linear") for m in fit.model.arrivals.modes}))
    arrivals: dict[int, BMAP] = {}
    sources: dict[int, str] = {}
    for mf in fit.modes:
        kept = lift(memory[mf.mode], order) if mf.source != "observed" and mf.mode in memory else None
        if kept is not None:
            arrivals[mf.mode], sources[mf.mode] = kept, "remembered"
        else:
            arrivals[mf.mode], sources[mf.mode] = mf.bmap, mf.source
    return ArrivalAdjustment(ModeArrivals.per_mode(dict(sorted(arrivals.items()))),
                             MappingProxyType(dict(sorted(sources.items()))))
