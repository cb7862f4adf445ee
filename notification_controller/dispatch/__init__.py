"""The dispatch pipeline: match → prepare (enrich, Flux's per-alert rules) → stages → deliver.

``Dispatcher`` owns all delivery state (lanes, notifier cache, counters); nothing lives in globals, so
several dispatchers can run in one process (tests) and future stages (hooks, noise control, durable
outbox, cross-replica dedup) slot in as ``Stage`` objects without touching matching or delivery.
"""
