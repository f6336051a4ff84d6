"""A Scrapy project crawling robotctl's demo site under robotctl's control (examples/scrapy_demo/README.md)."""
