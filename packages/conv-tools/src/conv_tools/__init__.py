"""conv-tools: the offline tooling of conv-core, in a package of its own.

A user's process needs none of it: conv-core runs every convolution, ranks every backend and converts every
model without it. Here are the benchmarks (layers, real models, the host path, the ranking on held-out
layers) and their pages, the shape suites of real models, the tuning and table pipeline a backend's shipped
tables come from, and the offline configuration sweeps. Installed, it adds ``bench``, ``tune`` and ``tables``
to the ``conv-core`` command line (entry points in the group ``conv_core.commands``).
"""

__version__ = "0.1.0"
