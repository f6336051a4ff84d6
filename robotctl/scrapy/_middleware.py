"""``PushbackMiddleware``: every request, Scrapy's retries included, passes its server's pushback gate;
``GiveUpMiddleware``: a download error that Scrapy's retries did not cure is a request given up.

The add-on enables it at 950 (``_addon.PUSHBACK_PRIORITY``: after every built-in downloader middleware, the
nearest to the downloader), so its ``process_request`` is the last step before a request joins its
download slot; with the extension alone, add it yourself::

    DOWNLOADER_MIDDLEWARES = {"robotctl.scrapy.PushbackMiddleware": 950}

``process_request`` awaits the extension's :meth:`~robotctl.scrapy._gate.PushbackGate.admit`: a request to
a server that answered 429 or 503 waits until that answer's ``Retry-After`` has passed and while the
server's cap of downloads is taken (robotctl/scrapy/_gate.py, _pushback.py). A retry that Scrapy's
``RetryMiddleware`` (550) makes of a 429 goes back through the scheduler and then through this gate, so it
is held too. The extension learns each answer from ``response_downloaded``, before ``RetryMiddleware``
sees it. Without a running :class:`RobotctlExtension` (off, or under a reactor without asyncio) the
middleware lets everything through.

``GiveUpMiddleware`` sits just below ``RetryMiddleware`` (the add-on puts it at 540): an exception reaches
its ``process_exception`` only when no middleware above it turned it into a retry or a response, so the
request is given up (a timeout, a refused connection after the last retry), and the extension reports
it to the agent like a 429 that reached the spider (``Reporter.given_up``). ``IgnoreRequest`` (robots.txt,
offsite, a filter) is a request the crawl chose not to make, not one given up.

``ItemSourceMiddleware`` is a spider middleware (the add-on puts it at 10, the nearest to the engine): it
names, for each item a callback yields, the robot whose download the item came from, so that the item's
delivery names its robot. A download under way when its robot is parked finishes (Scrapy lowers the
concurrency; it does not cancel), and the agent then counts the robot as working from its park until that
delivery (the fleet's own mode trajectory, ``agent.modes.ModeHistory.drained``); unnamed, such items counted
in the fewer robots' mode without the parked robot's time, and made one robot's rate look twice what it is.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Iterator
from typing import Any

from scrapy.crawler import Crawler
from scrapy.exceptions import IgnoreRequest
from scrapy.http import Request, Response

from ._extension import META_ROBOT, extension


class PushbackMiddleware:
    """See the module docstring."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> PushbackMiddleware:
        return cls(crawler)

    async def process_request(self, request: Request, spider: Any = None) -> None:
        ext = extension(self.crawler)
        if ext is not None:
            await ext.gate.admit(request)

    def process_response(self, request: Request, response: Response, spider: Any = None) -> Response:
        self._release(request)
        return response

    def process_exception(self, request: Request, exception: BaseException, spider: Any = None) -> None:
        self._release(request)

    def _release(self, request: Request) -> None:
        """The request is done with the downloader (normally ``request_left_downloader`` has released it;
        this covers a request that never reached it)."""
        ext = extension(self.crawler)
        if ext is not None:
            ext.gate.release(request)


class GiveUpMiddleware:
    """See the module docstring."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> GiveUpMiddleware:
        return cls(crawler)

    def process_exception(self, request: Request, exception: BaseException, spider: Any = None) -> None:
        if isinstance(exception, IgnoreRequest):
            return
        ext = extension(self.crawler)
        if ext is not None:
            ext.gave_up(request)


class ItemSourceMiddleware:
    """See the module docstring."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> ItemSourceMiddleware:
        return cls(crawler)

    def process_spider_output(self, response: Response, result: Iterable[Any], spider: Any = None
                              ) -> Iterator[Any]:
        robot = response.meta.get(META_ROBOT) if response.request is not None else None
        for output in result:
            self._name(output, robot)
            yield output

    async def process_spider_output_async(self, response: Response, result: AsyncIterator[Any],
                                          spider: Any = None) -> AsyncIterator[Any]:
        robot = response.meta.get(META_ROBOT) if response.request is not None else None
        async for output in result:
            self._name(output, robot)
            yield output

    def _name(self, output: Any, robot: str | None) -> None:
        if robot is not None and output is not None and not isinstance(output, Request):
            ext = extension(self.crawler)
            if ext is not None:
                ext.item_source(output, robot)
