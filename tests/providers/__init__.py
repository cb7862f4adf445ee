"""One test module per provider type, ``test_<type>.py``: its conformance case(s) and its unit tests.

``case.py`` (the shape of a case), ``build.py`` (a case into real objects) and ``cases.py`` (every type's
cases, for the kit in ``tests/conformance/test_provider_conformance.py``) serve the kit; ``support.py`` and
``git_support.py`` hold the helpers the modules share. ``test_formatting.py``, ``test_tokens.py``,
``test_chat_family.py`` and ``test_git_family.py`` test what several types share.

In a type's module, ``CASES`` is run by the conformance kit against a real local server (``http=False``:
not over HTTP; the module or ``tests/integration`` delivers it to a real server instead); each case's
``expect`` checks the request against the reference, the expected bytes written out by hand. The other
tests call the builder directly, without a network. Commit-status and comment providers make several
requests per delivery: a case's ``prelude`` routes answer the listing calls and the fault matrix targets
the final create call.
"""
