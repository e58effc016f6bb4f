"""conv-gluon: warp-specialized Gluon convolution kernels for Hopper (sm_90a), a conv-core backend.

The backend is registered through the entry point ``gluon = "conv_gluon.hooks"``; see the README for the
kernels, their configurations and tags, and ``docs/gluon.md`` for their design.
"""

__version__ = "0.1.0"
