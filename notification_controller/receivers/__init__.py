"""Webhook receivers: one module per ``spec.type``, an explicit registry, and the shared pieces.

* ``base``: ``HookRequest`` (raw header bytes), ``VerifyContext``, ``Verified``, helpers;
* ``registry``: type → verifier, and ``verify`` (Secret check + dispatch);
* ``signatures``: go-github's HMAC rules (github, bitbucket, generic-hmac);
* ``oidc``: discovery + key sets with a TTL cache, token verification (generic-oidc, gcr);
* ``targets``: target resolution, CEL filters and the reconcile annotation;
* ``guards``: token bucket and replay cache used by ``server.receivers``.

Nothing here imports aiohttp's server side: the HTTP edge is ``server/receivers.py``.
"""
