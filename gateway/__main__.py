"""``python -m gateway ARGS`` is ``concord ARGS``."""

import sys

from gateway.entry import main

sys.exit(main())
