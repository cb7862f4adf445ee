"""Pure domain logic: no I/O, no asyncio servers, no Kubernetes client. Everything here is unit-testable."""
