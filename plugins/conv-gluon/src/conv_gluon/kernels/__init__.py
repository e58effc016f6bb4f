"""The Gluon kernels (``triton.experimental.gluon``) of the backend, for Hopper (sm_90a).

Importing this package imports Gluon; the rest of the plugin imports it lazily (only to launch or to
compile), so that the hook module loads, and declines with a reason, where Gluon is missing.
"""
