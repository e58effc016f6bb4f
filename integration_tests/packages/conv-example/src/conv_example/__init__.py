"""conv-example: a minimal conv-core backend, written from docs/writing-a-backend.md.

Importing this package does nothing; conv-core loads :mod:`conv_example.hooks`
through the ``conv_core.backends`` entry point.
"""

__version__ = "0.1.0"
