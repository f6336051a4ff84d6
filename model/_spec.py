"""The model file format of DESIGN.md, as plain dicts (parsing YAML text is the caller's job).

``model_from_dict`` turns the ``model:`` mapping into a :class:`QueueModel`, ``costs_from_dict`` the
``costs:`` mapping into :class:`Costs`; ``model_to_dict`` goes back. Unknown keys are errors: a typo
must never fall back silently to a default.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from robotctl._errors import InputError

from ._arrivals import ModeArrivals
from ._bmap import BMAP
from ._model import Admission, Costs, QueueModel
from ._ph import PH


def _mapping(field: str, value: Any) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise InputError(field, f"must be a mapping, got {type(value).__name__}", "write it as key: value lines")
    return value


def _reject_unknown(field: str, d: Mapping[str, Any], allowed: set[str]) -> None:
    unknown = sorted(str(k) for k in d if k not in allowed)
    if unknown:
        raise InputError(f"{field}.{unknown[0]}", "is not a known key",
                         f"allowed keys here: {', '.join(sorted(allowed))}")


def _require(field: str, d: Mapping[str, Any], key: str, hint: str) -> Any:
    if key not in d:
        raise InputError(f"{field}.{key}", "is missing", hint)
    return d[key]


def ph_from_dict(field: str, value: Any, *, vector: str = "beta", matrix: str = "S") -> PH:
    """``{rate: x}`` or ``{<vector>: [...], <matrix>: [[...]]}``."""
    d = _mapping(field, value)
    if "rate" in d:
        _reject_unknown(field, d, {"rate"})
        rate = d["rate"]
        if isinstance(rate, bool) or not isinstance(rate, int | float):
            raise InputError(f"{field}.rate", f"must be a number, got {rate!r}", "e.g. rate: 1.5")
        return PH.exponential(float(rate), field=field)
    if "mean" in d:
        _reject_unknown(field, d, {"mean"})
        mean = d["mean"]
        if isinstance(mean, bool) or not isinstance(mean, int | float) or not mean > 0:
            raise InputError(f"{field}.mean", f"must be a positive number of seconds, got {mean!r}", "e.g. mean: 5")
        return PH.exponential(1.0 / float(mean), field=field)
    _reject_unknown(field, d, {vector, matrix})
    v = _require(field, d, vector, f"give {vector}: [...] and {matrix}: [[...]], or rate: x for an exponential law")
    M = _require(field, d, matrix, f"give {matrix}: [[...]] next to {vector}")
    try:
        return PH(np.asarray(v, dtype=float), np.asarray(M, dtype=float), field)
    except InputError as exc:
        raise InputError(exc.field.replace(f"{field}.beta", f"{field}.{vector}").replace(
            f"{field}.S", f"{field}.{matrix}"), exc.problem, exc.hint) from exc
    except (TypeError, ValueError) as exc:
        raise InputError(field, f"is not numeric ({exc})", "use lists of numbers") from exc


def _bmap(field: str, value: Any) -> BMAP:
    if not isinstance(value, list | tuple):
        raise InputError(field, f"must be a list of matrices [D_0, D_1, ...], got {type(value).__name__}",
                         "write [[[...], ...], [[...], ...]]")
    try:
        mats = tuple(np.asarray(m, dtype=float) for m in value)
    except (TypeError, ValueError) as exc:
        raise InputError(field, f"is not a list of numeric matrices ({exc})", "check the brackets") from exc
    return BMAP(mats, field)


def _mode_key(field: str, key: Any) -> int:
    try:
        mode = int(key)
    except (TypeError, ValueError) as exc:
        raise InputError(f"{field}.{key}", "is not a number of robots", "use keys 1, 2, 3, ...") from exc
    if str(mode) != str(key).strip() or mode < 0:
        raise InputError(f"{field}.{key}", "is not a whole number of robots >= 0", "use keys 1, 2, 3, ...")
    return mode


def arrivals_from_dict(field: str, value: Any) -> ModeArrivals:
    d = _mapping(field, value)
    if "per_mode" in d:
        _reject_unknown(field, d, {"per_mode"})
        pm = _mapping(f"{field}.per_mode", d["per_mode"])
        return ModeArrivals.per_mode(
            {_mode_key(f"{field}.per_mode", k): _bmap(f"{field}.per_mode.{k}", v) for k, v in pm.items()})
    rule = d.get("rule")
    if rule == "linear":
        _reject_unknown(field, d, {"rule", "base", "modes", "base_mode"})
        base = _bmap(f"{field}.base", _require(field, d, "base", "give base: [D_0, D_1, ...]"))
        modes = _require(field, d, "modes", "give modes: [1, 2, 3, 4]")
        if not isinstance(modes, list) or not modes:
            raise InputError(f"{field}.modes", "must be a non-empty list of robot counts", "e.g. modes: [1, 2, 3, 4]")
        return ModeArrivals.linear(base, [_mode_key(f"{field}.modes", m) for m in modes],
                                   base_mode=int(d.get("base_mode", 1)))
    if rule == "thinning":
        _reject_unknown(field, d, {"rule", "base", "q"})
        base = _bmap(f"{field}.base", _require(field, d, "base", "give base: [D_0, D_1, ...]"))
        return ModeArrivals.thinning(base, _require(field, d, "q", "give q: [q_1, ..., 1]"))
    if rule == "independent":
        _reject_unknown(field, d, {"rule", "robots"})
        robots = _require(field, d, "robots", "give robots: [BMAP of robot 1, BMAP of robot 2, ...]")
        return ModeArrivals.independent([_bmap(f"{field}.robots[{j}]", b) for j, b in enumerate(robots)])
    if rule == "marked":
        _reject_unknown(field, d, {"rule", "D0", "robots"})
        D0 = np.asarray(_require(field, d, "D0", "give D0: [[...]]"), dtype=float)
        robots = _require(field, d, "robots", "give robots: [[D_1 of robot 1, D_2 of robot 1], ...]")
        return ModeArrivals.marked(D0, [[np.asarray(m, dtype=float) for m in r] for r in robots])
    raise InputError(f"{field}.rule" if "rule" in d else f"{field}.per_mode",
                     "is missing or unknown" if "rule" in d else "is missing",
                     "give per_mode: {1: [D_0, D_1, ...], ...}, or base: [...] with rule: linear|thinning, "
                     "or rule: independent|marked")


_MODEL_KEYS = {"capacity", "admission", "arrivals", "service", "obsolescence"}


def model_from_dict(value: Any, *, field: str = "model") -> QueueModel:
    """Build a :class:`QueueModel` from the ``model:`` mapping of a model file."""
    d = _mapping(field, value)
    _reject_unknown(field, d, _MODEL_KEYS)
    capacity = _require(field, d, "capacity", "give capacity: K (pages in the system, the one in service included)")
    if isinstance(capacity, bool) or not isinstance(capacity, int):
        raise InputError(f"{field}.capacity", f"must be a whole number >= 1, got {capacity!r}", "e.g. capacity: 5")
    adm_text = d.get("admission", "partial")
    try:
        admission = Admission(adm_text)
    except ValueError as exc:
        raise InputError(f"{field}.admission", f"is {adm_text!r}", "use partial or reject-batch") from exc
    arrivals = arrivals_from_dict(f"{field}.arrivals", _require(field, d, "arrivals", "give arrivals: per_mode: ..."))
    service = ph_from_dict(f"{field}.service", _require(field, d, "service", "give service: {rate: x} or {beta, S}"))
    obs_raw = d.get("obsolescence")
    obsolescence = None if obs_raw is None else ph_from_dict(f"{field}.obsolescence", obs_raw,
                                                             vector="gamma", matrix="Gamma")
    return QueueModel(capacity, arrivals, service, obsolescence, admission)


def costs_from_dict(value: Any, *, field: str = "costs") -> Costs:
    d = _mapping(field, value)
    allowed = {"loss", "obsolescence", "response", "robot", "starvation"}
    _reject_unknown(field, d, allowed)
    return Costs(**{k: d[k] for k in allowed if k in d})


def model_to_dict(model: QueueModel) -> dict[str, Any]:
    """The ``model:`` mapping of a model file (round-trips through :func:`model_from_dict`)."""
    out: dict[str, Any] = {
        "capacity": model.capacity,
        "admission": model.admission.value,
        "arrivals": model.arrivals.to_dict(),
        "service": model.service.to_dict(),
    }
    if model.obsolescence is not None:
        ob = model.obsolescence
        out["obsolescence"] = {"rate": float(-ob.S[0, 0])} if ob.order == 1 else {
            "gamma": ob.beta.tolist(), "Gamma": ob.S.tolist()}
    return out
