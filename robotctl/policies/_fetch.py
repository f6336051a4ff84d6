"""The fetch-time law X of a robot's page access (paper 002, Section 2) and its Laplace transforms.

Paper 002 needs one number per page, h_i = E exp(-mu_i X), the Laplace transform of X at the page's
change rate (Section 3), and, for a page fetched again after d accesses, E exp(-mu_i (X_1 + ... + X_d)).
For independent fetch times the latter is h_i^d; for fetch durations that form a Markovian arrival
process (the intervals between fetch completions of a MAP (C, D), paper 003 Section 5.2 and Section 6)
it is

    E exp(-mu sum_{k=1}^{n} tau_k) = q [(mu I - C)^{-1} D]^n e,                              (Lemma 5.2)

with q = theta D / theta D e the phase just after a fetch completion in steady state (theta the
stationary vector of C + D). Paper 003 prints the transition matrix of the Markov renewal sequence as
F(t) = int_0^t e^{Cu} du, which drops the factor D, and writes the transform's entries as
E[e^{+mu tau}...]; the derivation F(dt) = e^{Ct} D dt gives f*(mu) = int e^{-mu t} e^{Ct} D dt =
(mu I - C)^{-1} D, which is what :meth:`FetchLaw.laplace_sum` uses (tests check it against simulated
MAP intervals).

The forms a fetch law is written in (:func:`fetch_law_from_dict`), as in the model file:

=============================================  ==================================================
``{rate: 5}`` / ``{mean: 0.2}``                exponential
``{beta: [...], S: [[...]]}``                  PH(beta, S)
``{constant: 0.2}``                            a deterministic fetch time
``{samples: [0.1, 0.25, ...]}``                the empirical law of measured fetch times
``{D0: [[...]], D1: [[...]]}``                 correlated: the intervals of a MAP (C = D0, D = D1)
``{Q: [[...]], rates: [...]}``                 correlated: the intervals of an MMPP (C = Q - L, D = L)
=============================================  ==================================================
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from robotctl.model import BMAP, PH, InputError, ph_from_dict

#: Batched linear solves are done this many pages at a time (memory: chunk x order^2 floats).
_CHUNK = 4096


class FetchKind(enum.Enum):
    """How the fetch-time law is given."""

    #: a phase-type law PH(beta, S), exponential included
    PH = "ph"
    #: a deterministic fetch time
    CONSTANT = "constant"
    #: the empirical law of measured fetch times
    SAMPLES = "samples"
    #: correlated fetch durations: the intervals between arrivals of a MAP
    MAP = "map"


def mmpp(Q: ArrayLike, rates: ArrayLike, *, field: str = "mmpp") -> BMAP:
    """The MAP of a Markov-modulated Poisson process: C = Q - Lambda, D = Lambda (paper 003, Section 5.1).

    Parameters
    ----------
    Q : array_like, shape (k, k)
        Generator of the modulating chain.
    rates : array_like, shape (k,)
        Poisson rate in each state.
    """
    lam = np.asarray(rates, dtype=float)
    Qa = np.asarray(Q, dtype=float)
    if lam.ndim != 1 or Qa.shape != (lam.size, lam.size):
        raise InputError(field, f"Q has shape {Qa.shape} and rates {lam.shape}",
                         "give a k x k generator Q and k rates")
    if np.any(lam < 0):
        raise InputError(f"{field}.rates", "has a negative rate", "Poisson rates are >= 0")
    return BMAP((Qa - np.diag(lam), np.diag(lam)), field)


def map_embedded(bmap: BMAP) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    """(q, C, D) of a MAP: q = theta D / theta D e is the phase just after an arrival (paper 003, 5.2)."""
    if bmap.max_batch != 1:
        raise InputError("map", f"has batches up to {bmap.max_batch}; a MAP has D0 and D1 only",
                         "give D0 and D1")
    C, D = np.asarray(bmap.D0), np.asarray(bmap.D1)
    q = bmap.stationary @ D
    return q / q.sum(), C, D


def map_transform(bmap: BMAP, mu: float) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """(q, P) with P = f*(mu) = (mu I - C)^{-1} D, so that E exp(-mu sum_{k<=n} tau_k) = q P^n e."""
    q, C, D = map_embedded(bmap)
    P = np.asarray(np.linalg.solve(mu * np.eye(C.shape[0]) - C, D), dtype=np.float64)
    return q, P


def map_power_sums(q: NDArray[np.float64], P: NDArray[np.float64], n: ArrayLike) -> NDArray[np.float64]:
    """q P^n e for every n in ``n`` (non-negative integers), by one pass of vector products."""
    ns = np.asarray(n, dtype=np.int64)
    out = np.empty(ns.shape)
    if ns.size == 0:
        return out
    flat = ns.ravel()
    order = np.argsort(flat, kind="stable")
    e = np.ones(P.shape[0])
    v, at = q.copy(), 0
    res = np.empty(flat.size)
    for idx in order:
        target = int(flat[idx])
        if target - at > 64:  # a long jump: square instead of stepping
            v = v @ np.linalg.matrix_power(P, target - at)
        else:
            for _ in range(target - at):
                v = v @ P
        at = target
        res[idx] = v @ e
    out[...] = res.reshape(ns.shape)
    return out


@dataclass(frozen=True, eq=False)
class FetchLaw:
    """The law of one fetch (page access) time X, in seconds.

    Attributes
    ----------
    kind : FetchKind
    mean : float
        E[X] (for a MAP: the mean interval 1 / lambda).
    ph : PH or None
        The law when ``kind`` is PH; for a MAP, the stationary marginal PH(q, C).
    value : float or None
        The fetch time when ``kind`` is CONSTANT.
    samples : ndarray or None
        The measured fetch times when ``kind`` is SAMPLES.
    map : BMAP or None
        The MAP (D0 = C, D1 = D) when ``kind`` is MAP.
    """

    kind: FetchKind
    mean: float
    ph: PH | None = None
    value: float | None = None
    samples: NDArray[np.float64] | None = None
    map: BMAP | None = None

    # -- constructors --------------------------------------------------------------------------------
    @classmethod
    def from_ph(cls, ph: PH) -> FetchLaw:
        return cls(FetchKind.PH, float(ph.mean), ph=ph)

    @classmethod
    def exponential(cls, rate: float, *, field: str = "fetch_time") -> FetchLaw:
        return cls.from_ph(PH.exponential(rate, field=field))

    @classmethod
    def constant(cls, seconds: float, *, field: str = "fetch_time.constant") -> FetchLaw:
        if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not (
                math.isfinite(seconds) and seconds > 0):
            raise InputError(field, f"must be a positive number of seconds, got {seconds!r}", "e.g. constant: 0.2")
        return cls(FetchKind.CONSTANT, float(seconds), value=float(seconds))

    @classmethod
    def from_samples(cls, samples: ArrayLike, *, field: str = "fetch_time.samples") -> FetchLaw:
        try:
            x = np.array(samples, dtype=float).ravel()
        except (TypeError, ValueError) as exc:
            raise InputError(field, f"is not a list of numbers ({exc})", "e.g. samples: [0.1, 0.3, 0.2]") from exc
        if x.size == 0:
            raise InputError(field, "is empty", "give at least one measured fetch time")
        if not np.all(np.isfinite(x)) or np.any(x < 0):
            raise InputError(field, f"holds a negative or non-finite value ({x[~(np.isfinite(x) & (x >= 0))][0]!r})",
                             "fetch times are seconds >= 0")
        if not x.mean() > 0:
            raise InputError(field, "has mean 0", "a fetch takes some time; give positive samples")
        x.flags.writeable = False
        return cls(FetchKind.SAMPLES, float(x.mean()), samples=x)

    @classmethod
    def from_map(cls, bmap: BMAP, *, field: str = "fetch_time") -> FetchLaw:
        try:
            q, C, _ = map_embedded(bmap)
        except InputError as exc:
            raise exc.within(field) from exc
        marginal = PH(q, C, f"{field}.marginal")
        return cls(FetchKind.MAP, 1.0 / bmap.rate, ph=marginal, map=bmap)

    # -- transforms ----------------------------------------------------------------------------------
    @property
    def correlated(self) -> bool:
        """True when consecutive fetch times are dependent (a MAP)."""
        return self.kind is FetchKind.MAP

    def laplace(self, mu: ArrayLike) -> NDArray[np.float64]:
        """h = E exp(-mu X) for each rate in ``mu`` (the marginal law for a MAP; paper 002, Section 3).

        For PH(beta, S): beta (mu I - S)^{-1} S_0 with S_0 = -S e; constant c: exp(-mu c); samples:
        their mean of exp(-mu x).
        """
        m = np.asarray(mu, dtype=float)
        flat = m.ravel()
        if self.kind is FetchKind.CONSTANT:
            assert self.value is not None
            out = np.exp(-flat * self.value)
        elif self.kind is FetchKind.SAMPLES:
            assert self.samples is not None
            out = np.empty(flat.size)
            step = max(1, (1 << 22) // max(1, self.samples.size))
            for a in range(0, flat.size, step):
                out[a:a + step] = np.exp(-np.outer(flat[a:a + step], self.samples)).mean(axis=1)
        else:
            assert self.ph is not None
            beta, S = np.asarray(self.ph.beta), np.asarray(self.ph.S)
            s0 = -S.sum(axis=1)
            if S.shape[0] == 1:
                out = s0[0] / (flat - S[0, 0])
            else:
                out = np.empty(flat.size)
                eye = np.eye(S.shape[0])
                for a in range(0, flat.size, _CHUNK):
                    mats = flat[a:a + _CHUNK, None, None] * eye - S
                    rhs = np.broadcast_to(s0, (mats.shape[0], S.shape[0]))[..., None]
                    out[a:a + _CHUNK] = np.linalg.solve(mats, rhs)[..., 0] @ beta
        return np.asarray(np.clip(out, 0.0, 1.0).reshape(m.shape))

    def laplace_sum(self, mu: float, n: ArrayLike) -> NDArray[np.float64]:
        """E exp(-mu (X_1 + ... + X_n)) for each n in ``n``: h^n for independent fetch times, and
        q [(mu I - C)^{-1} D]^n e for a MAP (paper 003, Lemma 5.2, with the factor D restored)."""
        ns = np.asarray(n)
        if self.kind is FetchKind.MAP:
            assert self.map is not None
            q, P = map_transform(self.map, float(mu))
            return map_power_sums(q, P, ns)
        h = float(self.laplace(np.array([mu]))[0])
        return np.asarray(np.power(h, ns, dtype=float))

    def describe(self) -> str:
        """One line for reports, e.g. ``exponential, mean 0.2 s``."""
        if self.kind is FetchKind.CONSTANT:
            return f"constant {self.mean:g} s"
        if self.kind is FetchKind.SAMPLES:
            assert self.samples is not None
            return f"{self.samples.size} samples, mean {self.mean:.4g} s"
        if self.kind is FetchKind.MAP:
            assert self.map is not None
            return (f"MAP of order {self.map.order}, mean {self.mean:.4g} s, lag-1 correlation "
                    f"{self.map.lag1_correlation:.3g}")
        assert self.ph is not None
        if self.ph.order == 1:
            return f"exponential, mean {self.mean:.4g} s"
        return f"PH of order {self.ph.order}, mean {self.mean:.4g} s, scv {self.ph.scv:.3g}"

    def to_dict(self) -> dict[str, Any]:
        """The law in the form :func:`fetch_law_from_dict` reads."""
        if self.kind is FetchKind.CONSTANT:
            return {"constant": self.value}
        if self.kind is FetchKind.SAMPLES:
            assert self.samples is not None
            return {"samples": self.samples.tolist()}
        if self.kind is FetchKind.MAP:
            assert self.map is not None
            return {"D0": self.map.D0.tolist(), "D1": self.map.D1.tolist()}
        assert self.ph is not None
        return self.ph.to_dict()


_FORMS = "{rate: x}, {mean: x}, {beta: [...], S: [[...]]}, {constant: x}, {samples: [...]}, {D0, D1} or {Q, rates}"


def map_from_dict(value: Any, *, field: str = "arrivals") -> BMAP:
    """A MAP from ``{rate: x}`` (Poisson), ``{D0: [[...]], D1: [[...]]}``, ``{Q: [[...]], rates: [...]}``
    (MMPP) or the model file's list ``[D0, D1]``."""
    if isinstance(value, list | tuple):
        if len(value) != 2:
            raise InputError(field, f"lists {len(value)} matrices", "a MAP is [D0, D1]")
        value = {"D0": value[0], "D1": value[1]}
    if not isinstance(value, Mapping):
        raise InputError(field, f"must be a mapping, got {type(value).__name__}",
                         "write {rate: x}, {D0: [[...]], D1: [[...]]} or {Q: [[...]], rates: [...]}")
    keys = set(value)
    try:
        if keys == {"rate"}:
            rate = value["rate"]
            if isinstance(rate, bool) or not isinstance(rate, int | float):
                raise InputError(f"{field}.rate", f"must be a number, got {rate!r}", "e.g. rate: 1.5")
            return BMAP.poisson(float(rate), field=field)
        if keys == {"D0", "D1"}:
            return BMAP((np.asarray(value["D0"], dtype=float), np.asarray(value["D1"], dtype=float)), field)
        if keys == {"Q", "rates"}:
            return mmpp(value["Q"], value["rates"], field=field)
    except InputError:
        raise
    except (TypeError, ValueError) as exc:
        raise InputError(field, f"is not numeric ({exc})", "write lists of numbers") from exc
    raise InputError(field, f"has keys {sorted(map(str, keys))}",
                     "write {rate: x}, {D0: [[...]], D1: [[...]]} or {Q: [[...]], rates: [...]}")


def fetch_law_from_dict(value: Any, *, field: str = "fetch_time") -> FetchLaw:
    """A :class:`FetchLaw` from one of the forms in the module docstring (a parsed YAML mapping)."""
    if not isinstance(value, Mapping):
        raise InputError(field, f"must be a mapping, got {type(value).__name__}", f"write one of {_FORMS}")
    keys = set(value)
    if keys == {"constant"}:
        return FetchLaw.constant(value["constant"], field=f"{field}.constant")
    if keys == {"samples"}:
        return FetchLaw.from_samples(value["samples"], field=f"{field}.samples")
    if keys in ({"D0", "D1"}, {"Q", "rates"}):
        return FetchLaw.from_map(map_from_dict(value, field=field), field=field)
    if keys & {"rate", "mean", "beta", "S"}:
        return FetchLaw.from_ph(ph_from_dict(field, value))
    raise InputError(field, f"has keys {sorted(map(str, keys))}", f"write one of {_FORMS}")


__all__ = ["FetchKind", "FetchLaw", "fetch_law_from_dict", "map_embedded", "map_from_dict", "map_power_sums",
           "map_transform", "mmpp"]
