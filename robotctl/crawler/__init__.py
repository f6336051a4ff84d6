"""A small real crawler: a generated web site on loopback, async robot workers, an indexer with a finite
buffer, and the demo that runs them with the agent in control (``robotctl demo``)."""

from ._config import DEFAULTS, DemoConfig, RunSettings, load_demo_config
from ._demo import CrawlResult, DemoReport, PolicySpan, observed_measures, run_crawl, run_demo
from ._fetch import AiohttpTransport, Fetcher, FetchError, FetchResult, MockTransport, RobotsRules, Transport
from ._frontier import Frontier, FrontierStats, host_key
from ._html import Outline, outline, term_counts, visible_text
from ._indexer import Indexer, IndexerConfig, IndexerStats, InvertedIndex, QueueEvent
from ._link import AgentLink, LinkStats
from ._report import format_report
from ._robots import ActiveClock, CrawlConfig, Document, LocalSwitch, Robot, RobotStats, useful_life
from ._site import Site, SiteConfig, SiteModel, SiteStats, create_site_app, run_site
from ._view import LiveView, ViewState

__all__ = [
    "DEFAULTS",
    "ActiveClock",
    "AgentLink",
    "AiohttpTransport",
    "CrawlConfig",
    "CrawlResult",
    "DemoConfig",
    "DemoReport",
    "Document",
    "FetchError",
    "FetchResult",
    "Fetcher",
    "Frontier",
    "FrontierStats",
    "Indexer",
    "IndexerConfig",
    "IndexerStats",
    "InvertedIndex",
    "LinkStats",
    "LiveView",
    "LocalSwitch",
    "MockTransport",
    "Outline",
    "PolicySpan",
    "QueueEvent",
    "Robot",
    "RobotStats",
    "RobotsRules",
    "RunSettings",
    "Site",
    "SiteConfig",
    "SiteModel",
    "SiteStats",
    "Transport",
    "ViewState",
    "create_site_app",
    "format_report",
    "host_key",
    "load_demo_config",
    "observed_measures",
    "outline",
    "run_crawl",
    "run_demo",
    "run_site",
    "term_counts",
    "useful_life",
    "visible_text",
]
