"""The ``robotctl`` command line: the top layer, the only one that may import every other.

``main(argv) -> int`` runs it (the console script ``robotctl`` and ``python -m robotctl`` call it);
``build_parser()`` builds the parser without importing numpy, scipy or aiohttp.
"""

from ._main import build_parser, main

__all__ = ["build_parser", "main"]
