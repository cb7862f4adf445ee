"""``python -m notification_controller``."""

import sys

if sys.argv[1:2] == ["dead-letters"]:  # the dead-letter tool (docs/delivery.md), not the controller
    from .deadletters import main as dead_letters

    sys.exit(dead_letters(sys.argv[2:]))

if sys.argv[1:2] in (["explain"], ["send"]):  # the troubleshooting tools (README, Troubleshooting)
    from .explain import main as explain

    sys.exit(explain(sys.argv[1:]))

from .cli import main

sys.exit(main())
