"""``python -m gateway ARGS`` is ``concord ARGS``."""

import sys

from gateway.cli.entry import main

sys.exit(main())
