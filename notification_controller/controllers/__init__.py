"""Level-based reconcilers for Receiver, Provider and Alert, and the manager that runs them.

Reconcilers read the ``ObjectStore`` and write through the ``Cluster`` port only, so the same code runs
against the Kubernetes API server and in local mode. See ``docs/status.md`` for the conditions they write.
"""

from .manager import ControllerManager

__all__ = ["ControllerManager"]
