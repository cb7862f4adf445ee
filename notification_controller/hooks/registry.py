"""Which hooks apply to an object or a notification, and in which order.

Order (docs/hooks.md, "Ordering"): the controller-wide hooks of ``--hooks-config`` first, in file order,
then the object's own ``spec.hooks`` in the order listed; for ``pre-dispatch`` the Alert's hooks come
before its Provider's. A controller-wide hook that selects both Alert and Provider runs once per
notification.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..api.alert import Alert
from ..api.hooks import Hook, HookCapability, HooksConfig
from ..api.provider import Provider
from ..api.receiver import Receiver

HookedObject = Alert | Provider | Receiver


@dataclass(frozen=True)
class BoundHook:
    """A hook and where it was declared.

    ``namespace`` is where its ``secretRef``/``certSecretRef`` and a ``ref`` without namespace resolve:
    the declaring object's namespace, or the controller's runtime namespace for controller-wide hooks.
    """

    hook: Hook
    namespace: str
    origin: str  # "controller", "Alert", "Provider" or "Receiver"

    @property
    def name(self) -> str:
        return self.hook.name


class HookSet:
    """Selects hooks by capability (see the module docstring)."""

    def __init__(self, config: HooksConfig | None = None, runtime_namespace: str = "flux-system") -> None:
        self.config = config or HooksConfig()
        self.runtime_namespace = runtime_namespace

    def _controller(self, kinds: tuple[str, ...], capability: HookCapability) -> list[BoundHook]:
        return [
            BoundHook(hook, self.runtime_namespace, "controller")
            for hook in self.config.hooks
            if hook.has(capability) and any(hook.selects(kind) for kind in kinds)
        ]

    @staticmethod
    def _own(obj: HookedObject, capability: HookCapability) -> list[BoundHook]:
        return [
            BoundHook(hook, obj.metadata.namespace, obj.KIND)
            for hook in obj.spec.hooks or ()
            if hook.has(capability)
        ]

    def for_object(self, obj: HookedObject, capability: HookCapability) -> list[BoundHook]:
        """``pre-reconcile`` or ``finalize`` hooks of one object."""
        return self._controller((obj.KIND,), capability) + self._own(obj, capability)

    def applies(self, obj: HookedObject, capability: HookCapability) -> bool:
        return bool(self.for_object(obj, capability))

    def for_notification(self, alert: Alert, provider: Provider) -> list[BoundHook]:
        """``pre-dispatch`` hooks of one notification: controller-wide, the Alert's, the Provider's."""
        capability = HookCapability.PRE_DISPATCH
        return (
            self._controller(("Alert", "Provider"), capability)
            + self._own(alert, capability)
            + self._own(provider, capability)
        )
