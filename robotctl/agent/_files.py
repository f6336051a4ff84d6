"""Reading the files the command line is given: model files (YAML, ``-`` for standard input)."""

from __future__ import annotations

import re
import sys
from typing import Any

import yaml

from robotctl.model import Costs, InputError, QueueModel, costs_from_dict, model_from_dict

#: Largest file read as a model, configuration or cost file (they are a few kilobytes).
MAX_FILE_BYTES = 16 << 20
#: Most YAML aliases (``*name``) in one document: a handful in a real file; a chain of aliases that refer
#: to aliases ("billion laughs") builds a structure far larger than its text.
MAX_YAML_ALIASES = 100


def read_text(path: str) -> str:
    """The text of ``path``, or of standard input for ``-`` (UTF-8, at most :data:`MAX_FILE_BYTES`)."""
    if path == "-":
        data = sys.stdin.buffer.read(MAX_FILE_BYTES + 1) if hasattr(sys.stdin, "buffer") else \
            sys.stdin.read(MAX_FILE_BYTES + 1).encode("utf-8", "surrogateescape")
    else:
        try:
            with open(path, "rb") as fh:
                data = fh.read(MAX_FILE_BYTES + 1)
        except FileNotFoundError as exc:
            raise InputError(path, "no such file", "check the path") from exc
        except OSError as exc:
            raise InputError(path, f"cannot be read ({exc.strerror})", "check the path and permissions") from exc
    if len(data) > MAX_FILE_BYTES:
        raise InputError(path, f"is larger than {MAX_FILE_BYTES >> 20} MiB", "is it the right file?")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise InputError(path, f"is not UTF-8 text (byte {exc.start + 1}, line {line})",
                         "give a YAML text file") from exc


class _Loader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses documents with more than :data:`MAX_YAML_ALIASES` aliases and
    mappings that repeat a key (YAML keeps the last silently), and reads ``2e6`` as a number (YAML 1.1 wants
    a dot, ``2.0e6``; the hints of this project write ``2e6``)."""

    aliases = 0

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, Any] = {}
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.setdefault(key, key_node)
                except TypeError:
                    continue  # an unhashable key: the base class says so
                if first is not key_node:
                    raise yaml.constructor.ConstructorError(
                        "while reading a mapping", node.start_mark,
                        f"the key {key!r} appears twice (first at line {first.start_mark.line + 1}); "
                        "YAML would keep the last silently", key_node.start_mark)
        return super().construct_mapping(node, deep=deep)

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            self.aliases += 1
            if self.aliases > MAX_YAML_ALIASES:
                mark = self.peek_event().start_mark
                raise yaml.YAMLError(f"more than {MAX_YAML_ALIASES} aliases (at line {mark.line + 1})")
        return super().compose_node(parent, index)


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"))


def load_yaml(path: str) -> Any:
    """The YAML document in ``path``; every problem is an :class:`InputError` of one line."""
    return load_yaml_text(read_text(path), path)


def load_yaml_text(text: str, path: str) -> Any:
    """The YAML document ``text`` (from ``path``, named in errors); see :func:`load_yaml`."""
    if "\x00" in text:
        raise InputError(path, "holds a NUL character, so it is not a text file", "give a YAML text file")
    loader = _Loader(text)
    try:
        return loader.get_single_data()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        problem = " ".join(str(problem).split())
        hint = ("keep one of them" if "appears twice" in problem
                else "fix the syntax (indentation, brackets, colons)")
        raise InputError(path, f"is not valid YAML{where}: {problem}", hint) from exc
    except RecursionError as exc:
        raise InputError(path, "nests too deeply", "write a flat YAML mapping") from exc
    except ValueError as exc:  # an integer past Python's 4,300 digits
        raise InputError(path, "holds a number with more than 4,300 digits", "no size is that large") from exc
    finally:
        loader.dispose()


def load_model_file(path: str) -> tuple[QueueModel, Costs]:
    """A model file (docs/ARCHITECTURE.md, "Model file"): ``model:`` and ``costs:`` (costs default to all zero)."""
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
