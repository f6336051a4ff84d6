"""``python -m robotctl``: the command line."""

import sys

from robotctl.cli import main

sys.exit(main())
