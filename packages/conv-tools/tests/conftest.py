"""Shared fixtures of conv-tools' tests (conv_core.testing.fakes: one CPU thread, a private first-use store)."""

from conv_core.testing.fakes import one_cpu_thread, private_first_use_store  # noqa: F401 (autouse fixtures)
