"""A backend module that cannot be imported."""

raise ImportError("this backend needs a library that is not installed")
