"""``python -m notification_controller``."""

import sys

from .cli import main

sys.exit(main())
