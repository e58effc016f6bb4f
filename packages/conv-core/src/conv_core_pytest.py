"""The pytest11 entry point of conv-core, kept outside the ``conv_core`` package on purpose.

pytest imports every installed plugin in every run; importing ``conv_core``
would import torch. This module imports nothing heavy: it hands collection
over to :mod:`conv_core.testing.pytest_plugin` only for classes that are
conformance suites (they carry the ``_conv_core_conformance_suite`` marker).
"""


def pytest_generate_tests(metafunc) -> None:
    if getattr(metafunc.cls, "_conv_core_conformance_suite", False):
        from conv_core.testing.pytest_plugin import generate_tests

        generate_tests(metafunc)


def pytest_configure(config) -> None:
    config.addinivalue_line(
        "markers", "compile: the ahead-of-time compile checks of every shipped kernel configuration (minutes of "
        "compilation; CI runs them, a quick local run leaves them out with -m 'not compile')")
