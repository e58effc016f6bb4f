"""Inference fusion: convolution -> batch norm -> activation as one call (:func:`conv_core.optimize_for_inference`)."""
