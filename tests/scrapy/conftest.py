"""Scrapy's tests need the scrapy extra (make test installs it); without it they skip, saying how to install."""

import pytest

pytest.importorskip("scrapy", reason="Scrapy is not installed: pip install 'robotctl[scrapy]' (make test does)")
