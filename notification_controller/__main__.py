"""``python -m notification_controller``: the same dispatcher as the installed ``notification-controller``."""

import sys

from .cli import main

sys.exit(main())
