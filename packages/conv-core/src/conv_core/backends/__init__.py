"""Backends built into the core (registered through the same hook spec as plugins)."""
