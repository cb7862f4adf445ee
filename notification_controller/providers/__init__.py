"""Provider types: one module per type behind an explicit registry (``registry.py``).

Each module has the same shape: a class named in ``registry.TYPES`` whose constructor validates
``ProviderOptions`` (built from spec + Secret by ``options.resolve_options``), a pure ``build_request``
(or ``build_payload``) and, only where needed, a custom ``post``. All HTTP goes through
``outbound.OutboundHTTP``. Modules are imported on first use (``registry.create_notifier``).
"""
