"""Chat, incident and observability providers: one import line per module, sorted."""
