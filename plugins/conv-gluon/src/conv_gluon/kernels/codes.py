"""Integer codes of the kernels' enumerated constexprs, shared with the host (this module imports no Gluon).

Gluon (triton 3.6) cannot pass string constexprs to warp-specialized partitions, so the kernels take these
integers; the host maps names to codes here and nowhere else.
"""

#: How the forward producer brings the input tile (see ``kernels/fwd.py``).
A_MODES = {"cp_async": 0, "registers": 1, "tma_box": 2}

#: Fused activations (``conv_core.activations`` names; "" is none).
ACTIVATIONS = {"": 0, "relu": 1, "relu6": 2, "gelu": 3, "gelu_tanh": 4, "silu": 5}
