"""conv-cdna: conv-rdna's portable Triton convolution kernels with tables and estimates for AMD Instinct GPUs
(gfx90a, gfx942, gfx950), derived from a model of each chip (:mod:`conv_cdna.model`); a conv-core backend."""

__version__ = "0.1.0"
