"""Imports every provider module so that each registers itself.

``catalog_chat`` lists the chat/incident/observability family, ``catalog_git`` the git-forge and SDK family.
"""

from . import catalog_chat, catalog_git, generic  # noqa: F401
