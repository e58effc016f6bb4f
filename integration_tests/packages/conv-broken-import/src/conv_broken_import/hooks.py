"""Hook module that cannot be imported, like a backend whose native library is missing.

conv-core must record the ImportError as this backend's ``load_error`` and
carry on with the others.
"""

raise ImportError("conv-broken-import needs the native library 'libconvbroken', which is not installed")
