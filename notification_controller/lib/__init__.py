"""Leaf utilities below every other package: Go-compatible durations and JSON, the injected clock.

They import nothing from this project, so both ``api/`` (the models) and ``core/`` (the rules over the
models) can use them without importing each other upwards: ``core`` → ``api`` → ``lib``.
"""
