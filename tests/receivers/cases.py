"""Every receiver type's conformance case, gathered from its own module for the conformance kit.

A type's case lives next to the tests of its verifier, in ``tests/receivers/test_<type>.py``
(``generic-hmac`` → ``test_generic_hmac``), as ``CASE: ReceiverCase``. The modules are found from
``ReceiverType``, not from the folder: a type without its module stops the kit at collection.
"""

from __future__ import annotations

import importlib

from notification_controller.api.receiver import ReceiverType
from tests.receivers.case import ReceiverCase


def module_name(rtype: ReceiverType) -> str:
    return "test_" + rtype.value.replace("-", "_")


def cases_by_type() -> dict[str, ReceiverCase]:
    """Each type's ``CASE``, keyed by the type string, in ``ReceiverType`` order."""
    found: dict[str, ReceiverCase] = {}
    for rtype in ReceiverType:
        case: ReceiverCase = importlib.import_module(f"{__package__}.{module_name(rtype)}").CASE
        found[rtype.value] = case
    return found


CASES: dict[str, ReceiverCase] = cases_by_type()
