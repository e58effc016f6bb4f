"""What the kernels are launched with, one module per kernel family (mirroring :mod:`conv_rdna.kernels`).

Each family module turns ``(problem, kernel, configuration, table)`` into a :class:`~.common.Plan`: the
launches (kernel, grid, scalar arguments, constexprs, warps, stages, and which tensor each pointer argument
is, by role), the float32 workspace and the problem's geometry. Plans need no tensors: strides are those of
dense tensors in ``problem.layout``, which is what ``Candidate.run`` receives (:mod:`conv_rdna.launch`
checks it). The same plan drives the launch, the estimates and the ahead-of-time compile checks
(:mod:`conv_rdna.aot`), so the compile test compiles exactly what ships. The registry
(:mod:`conv_rdna.registry`) names each kernel's plan builder.

1D problems run as 2D with ``H = 1`` (height strides 0). Tensor offsets are 32-bit: problems whose tensors
reach 2**31 elements are declined (:func:`conv_core.kit.declines.int32_issue`).
"""
