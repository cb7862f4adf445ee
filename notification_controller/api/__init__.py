"""Pydantic models of the CRDs (Alert/Provider ``v1beta3``, Receiver ``v1``) and of the event payload.

Pure: no I/O. Field names are Python snake_case with the camelCase JSON names as aliases; always
serialise with ``by_alias=True``. Validation mirrors Flux's CRD schema (reference §1) so that a manifest
Flux accepts is accepted here, and the rules Flux expresses as CRD CEL rules are enforced in ``validate()``
methods because older API servers ignore ``x-kubernetes-validations``.
"""

GROUP = "notification.toolkit.fluxcd.io"
ALERT_VERSION = "v1beta3"
PROVIDER_VERSION = "v1beta3"
RECEIVER_VERSION = "v1"
FINALIZER = "finalizers.fluxcd.io"
RECONCILE_REQUEST_ANNOTATION = "reconcile.fluxcd.io/requestedAt"
