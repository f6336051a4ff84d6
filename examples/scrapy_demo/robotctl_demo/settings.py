"""Settings of the example project: a polite crawl of the demo site, robotctl in control, an indexer
with a finite buffer as the item pipeline. ``run.py`` sets the URLs, the agent's address and the mode
(robotctl, AutoThrottle or a fixed concurrency) on top of these."""

BOT_NAME = "robotctl_demo"
SPIDER_MODULES = ["robotctl_demo.spiders"]
USER_AGENT = "robotctl-scrapy-demo/0.1"
ROBOTSTXT_OBEY = True  # the site disallows /private/

# Three concurrent downloads at most: robotctl's three robots, one download slot each.
CONCURRENT_REQUESTS = 3
CONCURRENT_REQUESTS_PER_DOMAIN = 3
# The site's Crawl-delay, per host: the spider gives each host (127.0.0.1:port) its own download slot.
DOWNLOAD_DELAY = 0.05
DOWNLOAD_DELAY_JITTER = 0.0
# Spread the downloads over the hosts instead of going deep into one (Scrapy's choice for broad crawls).
SCHEDULER_PRIORITY_QUEUE = "scrapy.pqueues.DownloaderAwarePriorityQueue"

EXTENSIONS = {"robotctl.scrapy.RobotctlExtension": 500}
ROBOTCTL_URL = "http://127.0.0.1:8787"
ROBOTCTL_ROBOTS = 3
# The indexer pipeline reports every change of its queue itself (delivery, completion, obsolete drop),
# in the order it happens, so the agent's view of the queue is the indexer's.
ROBOTCTL_DELIVERY_SIGNAL = "none"

ITEM_PIPELINES = {"robotctl_demo.pipelines.IndexerPipeline": 300}
# The indexer: robotctl.crawler's (a buffer of K documents, FIFO service paced to a byte rate,
# waiting documents dropped when they change at the source).
INDEXER_CAPACITY = 8
INDEXER_PROCESSING_RATE_BPS = 250_000.0
INDEXER_DB = "index.sqlite"

TELNETCONSOLE_ENABLED = False
LOG_LEVEL = "INFO"
TWISTED_REACTOR = "twisted.internet.asyncioreactor.AsyncioSelectorReactor"
