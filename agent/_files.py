"""Reading the files the command line is given: model files (YAML, ``-`` for standard input)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

from robotctl.model import Costs, InputError, QueueModel, costs_from_dict, model_from_dict


def read_text(path: str) -> str:
    """The text of ``path``, or of standard input for ``-``."""
    if path == "-":
        return sys.stdin.read()
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise InputError(path, "no such file", "check the path") from exc
    except OSError as exc:
        raise InputError(path, f"cannot be read ({exc.strerror})", "check the path and permissions") from exc


def load_yaml(path: str) -> Any:
    text = read_text(path)
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise InputError(path, f"is not valid YAML{where}", "fix the syntax (indentation, brackets, colons)") from exc


def load_model_file(path: str) -> tuple[QueueModel, Costs]:
    """A model file as in DESIGN.md: ``model:`` and ``costs:`` (costs default to all zero)."""
    doc = load_yaml(path)
    if not isinstance(doc, dict) or "model" not in doc:
        raise InputError(f"{path}: model", "is missing", "a model file has a top-level `model:` mapping "
                         "(see config/paper-example.yaml)")
    unknown = sorted(set(doc) - {"model", "costs", "report"})
    if unknown:
        raise InputError(f"{path}: {unknown[0]}", "is not a known top-level key", "use model: and costs:")
    try:
        model = model_from_dict(doc["model"])
        costs = costs_from_dict(doc.get("costs") or {})
    except InputError as exc:
        raise InputError(f"{path}: {exc.field}", exc.problem, exc.hint) from exc
    return model, costs
