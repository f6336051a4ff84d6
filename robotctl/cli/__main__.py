"""``python -m robotctl.cli``: the command line."""

import sys

from robotctl.cli import main

sys.exit(main())
