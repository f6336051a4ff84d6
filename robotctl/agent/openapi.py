"""The OpenAPI 3.1 description of the agent's HTTP API, served at ``GET /v1/openapi.json``.

The document itself is ``openapi.json`` beside this module (package data), written by hand and kept
true by tests/agent/test_openapi.py: every route the app registers must have an operation there and
every operation a route, and the agent's answers (and the request examples) must match its schemas. A
new route without an entry fails that test.
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import Any

from aiohttp import web


@functools.cache
def _text() -> str:
    return resources.files("robotctl.agent").joinpath("openapi.json").read_text(encoding="utf-8")


def openapi_spec() -> dict[str, Any]:
    """The document, parsed (a fresh copy each call)."""
    spec: dict[str, Any] = json.loads(_text())
    return spec


async def openapi_handler(request: web.Request) -> web.Response:
    """``GET /v1/openapi.json``."""
    return web.Response(text=_text(), content_type="application/json")


__all__ = ["openapi_handler", "openapi_spec"]
