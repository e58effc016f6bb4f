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


#: The attribute that marks a fixture as a compile run (set by ``conv_core.testing.plugin_checks``).
COMPILE_RUN = "_conv_core_compile_run"


def pytest_collection_modifyitems(items) -> None:
    """Every test that uses a compile run's fixture is a compile check too, so ``-m 'not compile'`` leaves the
    compile run out, not only the tests of each job."""
    import pytest

    for item in items:
        info = getattr(item, "_fixtureinfo", None)
        if info is None:
            continue
        if any(getattr(definition.func, COMPILE_RUN, False)
               for definitions in info.name2fixturedefs.values() for definition in definitions):
            item.add_marker(pytest.mark.compile)
