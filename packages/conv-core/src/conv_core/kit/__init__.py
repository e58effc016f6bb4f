"""What a Triton backend is built from, so that no backend writes it again.

A backend on the kit is a registry of kernels plus data. Reading order:

- :mod:`.registry`: :class:`~.registry.KernelEntry`, one per kernel (name, family, directions, layouts, when it
  applies, its plan builder, estimate and error factor), and :class:`~.registry.Registry`, from which the
  backend's candidates, compile jobs, sweep spaces and README table are derived.
- :mod:`.declines`: the checks every backend makes before offering anything (device, dtypes, 32-bit offsets,
  grid limits), each returning a reason or None.
- :mod:`.tables`: configuration tables as data (buckets chosen on a GEMM view, exact layers, swept winners).
- :mod:`.launch`: a plan's launches, their pointers bound by role (descriptors too), run through conv-core's
  :class:`~conv_core.launch_site.LaunchSite` (the compiled launcher, not the JIT, on every call).
- :mod:`.phases`: the data gradient as one stride-1 forward convolution of ``dy`` per stride phase.
- :mod:`.hooks`: the three hook implementations, from a backend's identity and its candidates function.

Nothing here imports Triton: the kernels are the backend's.
"""
