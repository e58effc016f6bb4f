"""What conv-rdna's port onto the kit added to conv-core: compile jobs shared by specialization, the compile
report, and the plugin test helpers."""

from __future__ import annotations

import json

import pytest
from conv_core.testing.aot import compile_failure, distinct, report
from conv_core.candidate import Declined
from conv_core.testing.plugin_checks import the_decline


def test_distinct_keeps_the_first_job_of_each_key_and_counts():
    jobs = [("sm_90", "a", 1), ("sm_90", "a", 2), ("gfx1100", "a", 3), ("sm_90", "b", 4)]
    kept, counts = distinct(jobs, key=lambda job: job[:2])
    assert kept == [("sm_90", "a", 1), ("gfx1100", "a", 3), ("sm_90", "b", 4)]
    assert counts == {"jobs": 4, "compiles": 3}


def test_compile_failure():
    assert compile_failure({"ok": True}) == []
    assert compile_failure({"ok": False, "error": "boom"}) == ["did not compile: boom"]


def test_report_writes_prints_and_fails_on_problems(tmp_path, capsys):
    results = [{"id": "good", "ok": True, "x": 1}, {"id": "bad", "ok": False, "error": "boom"}]
    path = tmp_path / "r.json"
    status = report(results, str(path), "HEADER", lambda r: f"{r['id']} {r['x']}", compile_failure)
    assert status == 1 and json.loads(path.read_text()) == results
    assert capsys.readouterr().out.splitlines() == ["HEADER", "good 1", "bad FAILED boom"]
    assert report(results[:1], None, "H", lambda r: r["id"], compile_failure) == 0


def test_the_decline():
    assert the_decline([Declined("x", "no")]) == "no"
    with pytest.raises(AssertionError):
        the_decline([])
