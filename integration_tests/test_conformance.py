"""The example backend passes conv-core's conformance kit, used the way docs/writing-a-backend.md shows."""

from __future__ import annotations

from conv_core.testing import ConformanceSuite, run_conformance


class TestExample(ConformanceSuite):
    """The tutorial's few lines: which backend, where, and what it claims to support."""

    backend = "example"
    device = "cpu"
    dtypes = ("float16", "bfloat16", "float32")
    layouts = ("channels_first", "channels_last")
    directions = ("fwd",)
    random_count = 30
    max_macs = 100_000


def test_run_conformance_report_passes():
    """The same kit as plain Python (what ``conv-core check`` prints), restricted to what the backend claims."""
    report = run_conformance("example", "cpu", directions=("fwd",), random_count=30)
    assert report.ok, report.summary()
    passed, failed = report.counts["reference"]
    assert failed == 0 and passed >= 50  # the edge cases and most random 2D ones have a candidate


def test_run_conformance_fails_a_backend_that_cannot_load():
    report = run_conformance("broken_import", "cpu")
    assert not report.ok
    assert "failed to load: ImportError" in report.failures[0].message
