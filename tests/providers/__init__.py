"""One test module per provider type, ``test_<type>.py``: its conformance case(s) and its unit tests.

``case.py`` (the shape of a case), ``build.py`` (a case into real objects) and ``cases.py`` (every type's
cases, for the kit in ``tests/conformance/test_provider_conformance.py``) serve the kit; ``support.py`` and
``git_support.py`` hold the helpers the modules share. ``test_formatting.py``, ``test_tokens.py``,
``test_chat_family.py`` and ``test_git_family.py`` test what several types share.
"""
