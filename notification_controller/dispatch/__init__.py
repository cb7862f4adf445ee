"""The dispatch pipeline: match → pre-queue stages → queue → resolve → pre-send stages → send → post-send.

``builder.py`` builds it as a value (the three stage lists written out before anything is constructed);
``dispatcher.py`` conducts, ``matcher.py`` and ``deliverer.py`` are its two halves, ``stage.py`` the one
stage type and runner, and the queue between them is the memory lanes (``lanes.py``) or the durable outbox
(``outbox/``). Nothing lives in globals, so several pipelines can run in one process (tests), and a new
stage is one module and one line in the builder (CONTRIBUTING.md). The layers inside this package are an
import-linter contract (pyproject.toml).
"""
