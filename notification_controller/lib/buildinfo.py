"""The version of this build, written once: ``version`` in pyproject.toml, read back from the installed
package's metadata (``importlib.metadata``), so the CLI (``notification-controller version``), ``/metrics``
(``notification_controller_build_info``), the image label (``make release``) and the release manifests can
never disagree. A source tree that was never installed (no metadata) reports ``0+unknown`` rather than a
guess.
"""

from __future__ import annotations

import functools
import platform
from importlib import metadata

DISTRIBUTION = "notification-controller"
UNKNOWN = "0+unknown"


@functools.cache
def version() -> str:
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return UNKNOWN


def python_version() -> str:
    return platform.python_version()


def describe() -> str:
    """One line for ``notification-controller version``."""
    return f"notification-controller {version()} (Python {python_version()}, {platform.system().lower()}/{platform.machine()})"
