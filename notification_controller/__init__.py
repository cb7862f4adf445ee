"""notification-controller: a drop-in, asyncio re-implementation of Flux's notification-controller."""

__version__ = "0.1.0"
