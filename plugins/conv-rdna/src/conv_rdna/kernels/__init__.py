"""The Triton kernels, one module per family.

- :mod:`.implicit_gemm`: forward convolution as an implicit GEMM (any filter, stride, dilation, padding, groups);
- :mod:`.conv3x3`: the implicit GEMM of 3x3 filters, taps unrolled by the compiler (forward, stride-1 data gradient);
- :mod:`.gemm1x1`: 1x1 / stride 1 / no padding convolutions, forward and data gradient, as a plain GEMM;
- :mod:`.bwd_data`: data gradient, decomposed by stride phase so that no tap is wasted;
- :mod:`.bwd_weight`: weight gradient with a split reduction (per-split partials or atomics) and the
  fixed-order reduction of the partials;
- :mod:`.col2im`: the data gradient of few input channels as a GEMM into a float32 ``Z`` and a gather of ``dx``;
- :mod:`.common`: the helpers they share (matrix multiply-accumulate, fused activation, output cast).

The kernels take every tensor through its strides, so NCHW and NHWC operands are read and written in
place. Which arguments and constexprs each kernel gets for a problem is decided in one place,
:mod:`conv_rdna.plans`.
"""
