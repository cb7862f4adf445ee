"""aiohttp applications: event ingest, webhook receivers, health and metrics. HTTP only, no domain logic."""
