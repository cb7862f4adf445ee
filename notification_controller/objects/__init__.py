"""Where Alerts, Providers, Receivers and Secrets come from.

``ObjectStore`` is the one in-memory, indexed cache the servers read. It is fed either by
``store.local`` (a directory of YAML) or by ``kube.informers`` (list+watch of the API server); the
servers and the dispatcher only see ``ObjectStore`` and the ``Cluster`` port, never which mode runs.
"""
