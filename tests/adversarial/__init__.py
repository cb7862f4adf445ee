"""Adversarial suites of issue 7: bad input, provider faults, secret hygiene, constant time, shutdown."""
