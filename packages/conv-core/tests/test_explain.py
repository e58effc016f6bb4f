"""explain(): the ranking of one problem, with declines, exclusions and failed backends, as text and JSON."""

import json

import pytest
import torch

import conv_core
from conv_core import ConvProblem
from conv_core.explanation import describe_shape, explain
from conv_core.testing.fakes import CPU, TINY, NoInfo, Plugin, isolate, raising_backend, use_backends


@pytest.fixture(autouse=True)
def fresh_engine(tmp_path, monkeypatch):
    isolate(tmp_path, monkeypatch)


def test_explain_a_problem():
    e = explain(TINY)  # a cpu problem explains on the cpu by default
    assert e.device == "cpu" and e.picked == "aten:native:default"
    (row,) = e.rows
    assert (row.rank, row.source, row.us) == (1, "estimate", row.estimate_us)
    assert "deterministic" in row.tags and not e.declines and not e.excluded and not e.failed_backends
    text = str(e)
    assert TINY.key in text and "aten:native:default" in text and "estimate" in text
    assert "n2 c4 k8 i6x6 f3x3 s1 p1" in text


def test_explain_the_tensors_of_a_call():
    x = torch.randn(1, 4, 7, 7)
    w = torch.randn(6, 2, 3, 3)
    b = torch.randn(6)
    e = explain(x, w, b, stride=2, padding=1, groups=2, activation="relu")
    p = e.problem
    assert (p.stride, p.groups, p.bias, p.activation, p.arch) == ((2, 2), 2, True, "relu", "cpu")
    assert e.picked == "aten:native:default"
    with pytest.raises(TypeError, match="ConvProblem"):
        explain(x)


def test_explain_shows_declines_failed_backends_and_run_failures(monkeypatch):
    from conv_core.testing.fakes import prove_faster

    engine = use_backends(monkeypatch, nope=Plugin("nope", None, declines="only float16"), noinfo=NoInfo(),
                           raising=raising_backend())
    prove_faster(engine, [TINY], ["raising:k:c"])
    e = explain(TINY, device=CPU)
    assert e.picked == "raising:k:c" and [r.kernel for r in e.rows] == ["raising:k:c", "aten:native:default"]
    assert [(d.backend, d.reason) for d in e.declines] == [("nope", "only float16")]
    assert [name for name, _ in e.failed_backends] == ["noinfo"] and "libfoo" in e.failed_backends[0][1]

    engine.run(TINY, CPU, conv_core.reference.random_operands(TINY, CPU))  # the failing kernel is dropped
    e = explain(TINY, device=CPU)
    assert e.picked == "aten:native:default"
    assert e.excluded == [("raising:k:c", "failed when run: RuntimeError: kernel exploded")]
    text = str(e)
    for part in ("declined:", "nope: only float16", "excluded:", "kernel exploded", "failed backends:", "noinfo"):
        assert part in text


def test_explain_with_no_candidate_left_still_says_why(monkeypatch):
    use_backends(monkeypatch, nope=Plugin("nope", None, declines="only float16"))
    e = explain(TINY, device=CPU, backend="nope")
    assert e.picked is None and e.rows == []
    assert e.declines[0].reason == "only float16"
    assert "nothing" in str(e) and "restricted to backend 'nope'" in str(e)


def test_explain_json_round_trips():
    data = json.loads(json.dumps(explain(TINY).to_dict()))
    assert data["problem"] == TINY.key and data["picked"] == "aten:native:default"
    assert data["ranked"][0]["source"] == "estimate" and data["ranked"][0]["us"] > 0
    assert set(data) >= {"declined", "excluded", "failed_backends", "notes", "device"}


def test_explain_notes_an_architecture_mismatch():
    gpu_problem = TINY.replace(arch="sm_90")
    e = explain(gpu_problem, device="cpu")
    assert any("sm_90" in note for note in e.notes)


def test_describe_shape_is_compact():
    p = ConvProblem("fwd", 1, 8, 8, (9, 7), (3, 1), (2, 1), ((1, 0), (0, 0)), 2, groups=4)
    assert describe_shape(p) == "n1 c8 k8 i9x7 f3x1 s2x1 p1.0x0.0 g4 d2"
    assert describe_shape(TINY) == "n2 c4 k8 i6x6 f3x3 s1 p1"


def test_explain_shows_atomics_excluded_in_deterministic_mode(monkeypatch):
    from fake_backends import deterministic_algorithms
    from conv_core.testing.fakes import zeros_run

    use_backends(monkeypatch, atomic=Plugin("atomic", zeros_run, estimate_us=1e-6, tags={"atomics"}))
    e = explain(TINY, device=CPU)
    assert e.picked == "aten:native:default" and [r.kernel for r in e.rows][-1] == "atomic:k:c" and not e.excluded
    why = "non-deterministic (atomics) while torch.use_deterministic_algorithms is on"
    with deterministic_algorithms():
        e = explain(TINY, device=CPU)
        alone = explain(TINY, device=CPU, backend="atomic")  # no candidate left: a fresh ranking says why
    assert [r.kernel for r in e.rows] == ["aten:native:default"] and e.excluded == [("atomic:k:c", why)]
    assert f"excluded:\n  atomic:k:c: {why}" in str(e)
    assert alone.picked is None and alone.excluded == [("atomic:k:c", why)] and why in str(alone)


def test_explain_notes_the_nondeterministic_setting(monkeypatch):
    from conv_core.testing.fakes import zeros_run

    monkeypatch.setenv("CONV_CORE_NONDETERMINISTIC", "1")
    from conv_core.testing.fakes import prove_faster

    engine = use_backends(monkeypatch, atomic=Plugin("atomic", zeros_run, estimate_us=1e-6, tags={"atomics"}))
    prove_faster(engine, [TINY], ["atomic:k:c"])
    e = explain(TINY, device=CPU)
    assert e.picked == "atomic:k:c"
    assert any("CONV_CORE_NONDETERMINISTIC" in note for note in e.notes) and "CONV_CORE_NONDETERMINISTIC" in str(e)


def test_explain_says_when_pytorchs_cudnn_benchmark_turns_first_use_timing_on(monkeypatch):
    from conv_core import explanation
    from conv_core.engine import get_engine

    monkeypatch.delenv("CONV_CORE_BENCHMARK", raising=False)
    monkeypatch.setattr(explanation, "device_arch", lambda device: "sm_90")
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", True)
    notes = explanation._notes(get_engine(), TINY.replace(arch="sm_90"), torch.device("cuda"), None)
    assert "torch.backends.cudnn.benchmark is on: untuned candidates are timed on first use" in notes
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", False)
    assert not any("first use" in note for note in
                   explanation._notes(get_engine(), TINY.replace(arch="sm_90"), torch.device("cuda"), None))
