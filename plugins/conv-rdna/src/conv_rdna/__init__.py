"""conv-rdna: Triton convolution kernels for conv-core, aimed at AMD RDNA3/RDNA4, portable to any Triton GPU.

The backend is registered through the entry point ``rdna = "conv_rdna.hooks"``; see the README for the
kernel families, their configurations and tags.
"""

__version__ = "0.1.0"
