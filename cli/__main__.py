"""`python -m jobledger.cli`: the same as the `jobledger` command."""

import sys

from .main import main

sys.exit(main())
