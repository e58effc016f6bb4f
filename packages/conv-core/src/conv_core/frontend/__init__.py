"""The PyTorch face's machinery: call arguments and their checks, the routes a call takes (direct or
through the engine), the caches of routes, the ``torch.library`` ops for ``torch.compile``, transposed calls, and
shape capture. The public faces are :mod:`conv_core.functional` and :mod:`conv_core.nn`."""
