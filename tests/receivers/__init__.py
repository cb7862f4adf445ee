"""One test module per receiver type, ``test_<type>.py``: its conformance case and the tests of its verifier.

``case.py`` (the shape of a case and how to break a valid request) and ``cases.py`` (every type's case, for the
kit in ``tests/conformance/test_receiver_conformance.py``) serve the kit; ``support.py`` and ``conftest.py`` hold
what the modules share (a served receiver, the local OIDC issuer). The running app, the objects and the senders'
signatures are in ``tests/support/receiver_kit.py``. What several types share (an empty token, constant-time
comparisons) is tested in ``tests/integration/test_receivers_real_formats.py``.

In a type's module, ``CASE`` is run by the conformance kit over HTTP against the real receiver app; the other
tests send the formats real senders use (documented test vectors, pings, encodings) and the refusals.
"""
