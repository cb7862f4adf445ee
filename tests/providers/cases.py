"""Every provider type's conformance cases, gathered from its own module for the conformance kit.

A type's case lives next to the unit tests of its builder, in ``tests/providers/test_<type>.py``
(``module_name``: ``incident.io`` → ``test_incidentio``, ``generic-hmac`` → ``test_generic_hmac``), as
``CASES: list[ProviderCase]``. The modules are found from ``ProviderType``, not from the folder: a type
without its module stops the kit at collection.
"""

from __future__ import annotations

import importlib

from notification_controller.api.provider import ProviderType
from tests.providers.case import ProviderCase


def module_name(ptype: ProviderType) -> str:
    return "test_" + ptype.value.replace(".", "").replace("-", "_")


def cases_by_type() -> dict[ProviderType, list[ProviderCase]]:
    """Each type's ``CASES``, in ``ProviderType`` order."""
    found: dict[ProviderType, list[ProviderCase]] = {}
    for ptype in ProviderType:
        module = importlib.import_module(f"{__package__}.{module_name(ptype)}")
        found[ptype] = list(module.CASES)
    return found


def all_cases() -> list[ProviderCase]:
    return [case for cases in cases_by_type().values() for case in cases]
