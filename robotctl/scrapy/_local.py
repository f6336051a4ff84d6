"""The agent inside the crawl (``ROBOTCTL_AGENT = local``): its code imported in a thread while the crawl
begins, its log lines brought to a crawl log's levels, and K read from an item pipeline. No Scrapy import:
the extension hands over what it has."""

from __future__ import annotations

import concurrent.futures
import logging
import threading
from typing import Any


def pipeline_capacity(engine: Any) -> int | None:
    """The ``robotctl_capacity`` attribute of one of ``engine``'s item pipelines, if one has it."""
    scraper = getattr(engine, "scraper", None)
    for pipeline in getattr(getattr(scraper, "itemproc", None), "middlewares", ()):
        k = getattr(pipeline, "robotctl_capacity", None)
        if isinstance(k, int) and not isinstance(k, bool) and k >= 1:
            return k
    return None


def load_local_agent_code() -> concurrent.futures.Future[None]:
    """Import the local agent's code (the agent, and the model, fitting and optimisation code it imports:
    about 1 s alone, 2-3 s on the shared 2-core machine at load 5) in a thread started when the spider
    opens, so that the crawl begins meanwhile (its robots under the start-up bridge until they are
    registered: ``RobotctlExtension._start_bridge``).

    - Imported in ``spider_opened`` itself, it held the crawl's event loop with the first requests in flight.
    - Imported before the crawl, it delayed the first request as long.
    - A thread started as the crawler is built (``from_crawler``) shares the interpreter's lock with Scrapy's
      own start-up (middlewares, pipelines, the engine): the item pipelines opened 1.2-1.8 s after the crawl
      began, against 0.3 s without the add-on (bench/scrapy_compare.py). Started at ``spider_opened``, the
      import overlaps the first downloads, which mostly wait on the network, and the pipelines open at 0.36 s.
    """
    done: concurrent.futures.Future[None] = concurrent.futures.Future()

    def load() -> None:
        try:
            from robotctl.agent import AgentConfig, run_in_process  # noqa: F401
        except BaseException as exc:  # the agent's start reports it (an ImportError names what is missing)
            done.set_exception(exc)
        else:
            done.set_result(None)

    threading.Thread(target=load, name="robotctl-import", daemon=True).start()
    return done


class TargetsNotMetAtDebug(logging.Filter):
    """The local agent's targets are a goal the add-on set (``ROBOTCTL_MAX_*``), and when no policy meets them
    all on a crawl's traffic it runs the nearest, as designed: its line per refit goes to DEBUG (each
    ``event=refit_adopted`` line says ``targets=infeasible`` at INFO, and /v1/policy the bounds that hold)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if (record.levelno == logging.WARNING and str(record.msg).startswith("event=refit_failed")
                and "insufficient_data" in record.getMessage()):
            # too few intervals in some mode so far: the agent keeps its policy and refits as the crawl goes
            # on; said at INFO (a crawl on CI drew one at 240 items, under a policy that used 16 robots briefly)
            record.levelno, record.levelname = logging.INFO, "INFO"
            return logging.getLogger(record.name).isEnabledFor(logging.INFO)
        if record.levelno == logging.WARNING and str(record.msg).startswith("event=targets_not_met"):
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)
        return True


def quiet_agent_log() -> None:
    """The local agent's lines per robot (registered, deregistered, commanded) go below INFO; its refits stay
    at INFO, and its targets not met go to DEBUG (:class:`TargetsNotMetAtDebug`). Loggers the project
    configured itself are left alone."""
    agent = logging.getLogger("robotctl.agent")
    if agent.level == logging.NOTSET:
        agent.setLevel(logging.WARNING)
        refit = logging.getLogger("robotctl.agent.refit")
        if refit.level == logging.NOTSET:
            refit.setLevel(logging.INFO)
            if not any(isinstance(f, TargetsNotMetAtDebug) for f in refit.filters):
                refit.addFilter(TargetsNotMetAtDebug())
