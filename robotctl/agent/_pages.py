"""Reading what the revisit planner is given: page lists (CSV) and fetch-time laws (inline or YAML).

PAGES.csv has a header row and one page per line; ``#`` starts a comment line::

    page,change_rate,weight
    https://example.org/,0.002,1
    https://example.org/news,0.05,3

``change_rate`` (changes per second, > 0) is required; ``page`` (also ``url`` or ``id``; default the line
number) and ``weight`` (>= 0; default the change rate, the paper's c_i = mu_i) are optional.

A fetch-time law is a mapping in one of the forms of :mod:`robotctl.policies._fetch` (``{rate: 5}``,
``{constant: 0.2}``, ``{beta, S}``, ``{samples: [...]}``, ``{D0, D1}``, ``{Q, rates}``), given inline or as a
YAML file holding that mapping (optionally under a top-level ``fetch_time:`` key); ``{samples_file: PATH}``
reads the samples from a file of numbers (one per line, or the first column of a CSV).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from robotctl.model import InputError
from robotctl.policies import FetchLaw, fetch_law_from_dict

from ._files import load_yaml, read_text

_ID_COLUMNS = ("page", "url", "id")


@dataclass(frozen=True, eq=False)
class Pages:
    """A page list.

    Attributes
    ----------
    ids : tuple of str
    change_rates : ndarray
        mu_i, changes per second.
    weights : ndarray or None
        c_i, or None for the default c_i = mu_i.
    """

    ids: tuple[str, ...]
    change_rates: NDArray[np.float64]
    weights: NDArray[np.float64] | None

    def __post_init__(self) -> None:
        self.change_rates.flags.writeable = False
        if self.weights is not None:
            self.weights.flags.writeable = False


def _number(where: str, text: str) -> float:
    try:
        return float(text)
    except ValueError as exc:
        raise InputError(where, f"is {text!r}, not a number", "write e.g. 0.05") from exc


def parse_pages_csv(text: str, *, name: str = "pages") -> Pages:
    """:class:`Pages` from the CSV text described in the module docstring."""
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    if not lines:
        raise InputError(name, "holds no pages", "write a header line page,change_rate[,weight] and one line per page")
    reader = csv.reader(io.StringIO("\n".join(lines)))
    header = [h.strip().lower() for h in next(reader)]
    if "change_rate" not in header:
        raise InputError(f"{name}: header", f"is {','.join(header)!r} without a change_rate column",
                         "the first line names the columns, e.g. page,change_rate,weight")
    allowed = {"change_rate", "weight", *_ID_COLUMNS}
    unknown = [h for h in header if h not in allowed]
    if unknown:
        raise InputError(f"{name}: header", f"has an unknown column {unknown[0]!r}",
                         f"columns: {', '.join(sorted(allowed))}")
    id_col = next((header.index(c) for c in _ID_COLUMNS if c in header), None)
    rate_col = header.index("change_rate")
    weight_col = header.index("weight") if "weight" in header else None
    ids, rates, weights = [], [], []
    for n, row in enumerate(reader, start=2):
        if len(row) != len(header):
            raise InputError(f"{name}:{n}", f"has {len(row)} fields, the header {len(header)}", "one value per column")
        ids.append(row[id_col].strip() if id_col is not None else str(n - 1))
        rates.append(_number(f"{name}:{n}.change_rate", row[rate_col]))
        if weight_col is not None:
            weights.append(_number(f"{name}:{n}.weight", row[weight_col]))
    if len(set(ids)) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise InputError(f"{name}: page", f"lists {dup!r} twice", "list each page once")
    return Pages(tuple(ids), np.array(rates), np.array(weights) if weight_col is not None else None)


def read_pages(path: str) -> Pages:
    """:func:`parse_pages_csv` of a file (``-``: standard input)."""
    return parse_pages_csv(read_text(path), name=path)


def read_samples(path: str) -> NDArray[np.float64]:
    """Numbers from a file: one per line, or the first column of a CSV (a header line is skipped)."""
    values = []
    for n, line in enumerate(read_text(path).splitlines(), start=1):
        cell = line.split(",")[0].strip()
        if not cell or cell.startswith("#"):
            continue
        try:
            values.append(float(cell))
        except ValueError as exc:
            if not values and n == 1:
                continue  # a header
            raise InputError(f"{path}:{n}", f"is {cell!r}, not a number of seconds", "one fetch time per line") from exc
    return np.array(values)


def load_fetch_law(spec: Mapping[str, Any] | str, *, field: str = "fetch_time") -> FetchLaw:
    """A :class:`FetchLaw` from an inline mapping or a YAML file (module docstring)."""
    if isinstance(spec, str):
        doc = load_yaml(spec)
        if isinstance(doc, Mapping) and set(doc) == {"fetch_time"}:
            doc = doc["fetch_time"]
        try:
            return load_fetch_law(doc, field=field)
        except InputError as exc:
            raise exc.within(spec) from exc
    if isinstance(spec, Mapping) and set(spec) == {"samples_file"}:
        path = str(spec["samples_file"])
        return FetchLaw.from_samples(read_samples(path), field=f"{field} ({path})")
    return fetch_law_from_dict(spec, field=field)


__all__ = ["Pages", "load_fetch_law", "parse_pages_csv", "read_pages", "read_samples"]
