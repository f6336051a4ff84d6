"""Reports to an agent that runs in the caller's event loop, without HTTP.

A Python crawler that runs the agent in its own loop (:func:`agent.run_in_process`, the Scrapy add-on's
``ROBOTCTL_AGENT = local``) reports every delivery and completion; over HTTP each report costs a request
and its answer on the same loop that runs the crawl and its indexer. :class:`InProcessReports` has the
reporting methods of :class:`~agent.client.AgentClient` (``deliver_many``, ``complete_many``,
``obsolete``, ``given_up``, ``set_queue``, ``status``) and runs what the endpoints run: the same checks
(:mod:`agent.api`), the agent's same calls, the same durable write before the acknowledgement, and the
same acknowledgement, as a dict. What the endpoints answer 4xx raises
:class:`~agent.client.AgentRejectedError` (status 400, with the field, problem and hint); a delivery log
that cannot be written raises :class:`~agent.client.AgentUnavailableError`, as its 503 would. Robots'
registrations and commands still go over HTTP (a few requests a crawl, not one an item).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from aiohttp import web

from robotctl import InputError

from .api import parse_completions, parse_deliveries, parse_given_up, parse_obsolete, parse_queue
from .app import AGENT, CONFIG, REFIT
from .client import AgentRejectedError, AgentUnavailableError, summed_ack
from .log import LogWriteError

#: what a batch's acknowledgement sums over its chunks (the HTTP client's ``_post_many`` sums the same)
_DELIVERY_COUNTS = ("accepted", "pages", "admitted", "lost")
_COMPLETION_COUNTS = ("accepted", "pages", "removed", "unmatched")


class InProcessReports:
    """The reporting half of an :class:`~agent.client.AgentClient` for the agent of ``app`` (the
    application :func:`agent.run_in_process` yields), called in its event loop."""

    def __init__(self, app: web.Application) -> None:
        self.app = app

    async def deliver_many(self, deliveries: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        agent, cfg = self.app[AGENT], self.app[CONFIG]

        def one(chunk: list[Mapping[str, Any]]) -> dict[str, Any]:
            items = parse_deliveries({"deliveries": chunk}, max_batch=cfg.server.max_batch,
                                     registered=agent.robot_ids, allow_unregistered=cfg.robots.allow_unregistered)
            return dict(agent.deliver(items))

        return await self._chunks("/v1/deliveries", deliveries, one, _DELIVERY_COUNTS)

    async def complete_many(self, completions: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        agent, cfg = self.app[AGENT], self.app[CONFIG]

        def one(chunk: list[Mapping[str, Any]]) -> dict[str, Any]:
            return dict(agent.complete(parse_completions({"completions": chunk}, max_batch=cfg.server.max_batch)))

        return await self._chunks("/v1/completions", completions, one, _COMPLETION_COUNTS)

    async def obsolete(self, pages: int = 1) -> dict[str, Any]:
        agent = self.app[AGENT]
        return await self._committed("/v1/obsolete", lambda: dict(agent.obsolete(parse_obsolete({"pages": pages}))))

    async def given_up(self, pages: int = 1) -> dict[str, Any]:
        agent = self.app[AGENT]
        return await self._committed("/v1/given_up", lambda: dict(agent.given_up(parse_given_up({"pages": pages}))))

    async def set_queue(self, length: int) -> dict[str, Any]:
        agent, cfg = self.app[AGENT], self.app[CONFIG]
        return await self._committed(
            "/v1/queue", lambda: dict(agent.set_queue(parse_queue({"length": length}, capacity=cfg.capacity))))

    async def status(self) -> dict[str, Any]:
        d = dict(self.app[AGENT].status())
        d["refit"] = self.app[REFIT].record.to_dict()
        return d

    # -- the endpoints' contract -----------------------------------------------------------------
    async def _chunks(self, path: str, items: Sequence[Mapping[str, Any]],
                      one: Callable[[list[Mapping[str, Any]]], dict[str, Any]], counts: tuple[str, ...]
                      ) -> dict[str, Any]:
        """``one`` on chunks of at most ``server.max_batch`` items, each committed before the next; the
        acknowledgements' ``counts`` summed, the last one's ``t``, ``queue`` and ``active``."""
        limit = self.app[CONFIG].server.max_batch
        acks = [await self._committed(path, functools.partial(one, list(items[start:start + limit])))
                for start in range(0, len(items), limit)]
        return summed_ack(acks, counts)

    async def _committed(self, path: str, call: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """``call()``, then the agent's durable write (what the endpoint ``POST path`` awaits before it
        answers); a refusal counts as a bad request of that endpoint, as over HTTP."""
        agent = self.app[AGENT]
        try:
            ack = call()
            await agent.commit()
        except InputError as exc:  # the endpoint's 400: {"error": "field: problem; hint", "field", "hint"}
            agent.count_bad_request(f"POST {path}")
            raise AgentRejectedError(400, exc.field, str(exc), exc.hint) from exc
        except LogWriteError as exc:
            raise AgentUnavailableError(f"the delivery log cannot be written ({exc.strerror or exc}); "
                                        "nothing was acknowledged") from exc
        return ack


__all__ = ["InProcessReports"]
