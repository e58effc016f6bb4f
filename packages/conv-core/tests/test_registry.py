"""Discovery, isolation of broken backends, ranking and the engine's fallbacks."""

from importlib.metadata import EntryPoint

import pytest
import torch

import fake_backends as fb
from conv_core.testing.fakes import prove_faster
from conv_core import ConvProblem, NoCandidateError
from conv_core.engine import Engine
from conv_core.plugins import ENTRY_POINT_GROUP, Registry
from conv_core.settings import Settings

CPU = torch.device("cpu")


def ep(name, attr):
    return EntryPoint(name=name, value=f"fake_backends:{attr}", group=ENTRY_POINT_GROUP)


def settings(tmp_path, **changes):
    fields = dict(allow=None, block=frozenset(), force_backend=None, trace=False,
                  tuning_db=tmp_path / "db.json", benchmark=False, nondeterministic=False)
    fields.update(changes)
    return Settings(**fields)


def engine(tmp_path, eps, **changes):
    s = settings(tmp_path, **changes)
    return Engine(s, Registry(s, eps))


PROBLEM = ConvProblem("fwd", 2, 4, 6, (8, 8), (3, 3), 1, 1, 1)


def operands(problem=PROBLEM, seed=0):
    from conv_core.reference import random_operands

    return random_operands(problem, CPU, seed)


def test_aten_is_always_there_and_first(tmp_path):
    reg = Registry(settings(tmp_path), [])
    assert [b.name for b in reg.backends()] == ["aten"]
    assert reg.backends()[0].ok and reg.backends()[0].source == "builtin"


def test_entry_points_are_loaded_lazily(tmp_path):
    reg = Registry(settings(tmp_path), [EntryPoint("lazy", "broken_import_backend", ENTRY_POINT_GROUP)])
    assert reg._backends is None  # nothing imported until asked
    assert not reg.get("lazy").ok


def test_broken_backends_are_recorded_and_isolated(tmp_path):
    eps = [ep("good", "GOOD"), ep("raising", "RAISING"), ep("malformed", "MALFORMED"), ep("badinfo", "BAD_INFO"),
           EntryPoint("noimport", "broken_import_backend", ENTRY_POINT_GROUP), ep("dup", "DUPLICATE")]
    e = engine(tmp_path, eps)
    by_entry = {b.entry_point: b for b in e.registry.backends()}
    assert "ImportError" in by_entry["noimport"].load_error
    assert "BackendInfo" in by_entry["badinfo"].load_error
    # two entry points naming the same backend: the first by entry-point name wins, the other is reported
    assert by_entry["dup"].ok and "already named" in by_entry["good"].load_error
    ranking = e.ranking(PROBLEM, CPU)
    assert [r.kernel_id for r in ranking.ranked][:2] == ["aten:native:default", "good:k:c"]
    assert any("boom in candidates" in f for f in by_entry["raising"].failures)
    assert any("not a Candidate" in f for f in by_entry["malformed"].failures)
    reasons = {d.backend: d.reason for d in ranking.declined}
    assert "boom" in reasons["raising"] and "not a Candidate" in reasons["malformed"]
    ops = operands()
    torch.testing.assert_close(e.run(PROBLEM, CPU, ops), torch.nn.functional.conv2d(ops[0], ops[1], padding=1))


def test_a_hook_name_not_in_the_spec_fails_that_backend_only(tmp_path):
    eps = [ep("misspelled", "MISSPELLED"), ep("good", "GOOD"), ep("unknown", "UNKNOWN")]
    e = engine(tmp_path, eps)
    by_entry = {b.entry_point: b for b in e.registry.backends()}
    misspelled, unknown = by_entry["misspelled"], by_entry["unknown"]
    assert not misspelled.ok and not unknown.ok and by_entry["good"].ok
    assert misspelled.load_error.startswith(
        "PluginValidationError: unknown hook 'conv_core_candidate' (did you mean 'conv_core_candidates'?) (at ")
    assert "fake_backends.py:" in misspelled.load_error  # where the misspelled function is
    assert "unknown hook 'conv_core_warmup'" in unknown.load_error
    assert [b.name for b in e.registry.active()] == ["aten", "good"]
    ranking = e.ranking(PROBLEM, CPU)  # the failed backends are not asked; the others are
    assert {r.candidate.backend for r in ranking.ranked} == {"aten", "good"}
    assert {d.backend for d in ranking.declined} <= {"aten", "good"}


def test_allow_and_block_lists(tmp_path):
    eps = [ep("good", "GOOD"), ep("slow", "SLOW")]
    assert [b.name for b in engine(tmp_path, eps, allow=frozenset({"slow"})).registry.backends()] == ["aten", "slow"]
    assert [b.name for b in engine(tmp_path, eps, block=frozenset({"good"})).registry.backends()] == ["aten", "slow"]


def test_ranking_orders_by_time_then_id_and_experimental_last(tmp_path):
    e = engine(tmp_path, [ep("slow", "SLOW"), ep("good", "GOOD"), ep("fancy", "EXPERIMENTAL")])
    ids = [r.kernel_id for r in e.ranking(PROBLEM, CPU).ranked]
    # aten first (estimates never displace it), then the plugins by estimate, experimental last
    assert ids == ["aten:native:default", "good:k:c", "slow:k:c", "fancy:k:c"]
    assert ids == [r.kernel_id for r in engine(tmp_path, [ep("good", "GOOD"), ep("slow", "SLOW"),
                                                          ep("fancy", "EXPERIMENTAL")]).ranking(PROBLEM, CPU).ranked]


NONDETERMINISTIC_WHY = "non-deterministic (atomics) while torch.use_deterministic_algorithms is on"


def test_atomics_rank_after_slower_deterministic_candidates_by_default(tmp_path):
    e = engine(tmp_path, [ep("atomic", "ATOMIC"), ep("slow", "SLOW"), ep("fancy", "EXPERIMENTAL")])
    ranked = e.ranking(PROBLEM, CPU).ranked
    times = {r.kernel_id: r.us for r in ranked}
    assert times["atomic:k:c"] < min(times["slow:k:c"], times["aten:native:default"])
    # fastest, yet after every candidate without the tag (experimental ones still come last)
    assert [r.kernel_id for r in ranked] == ["aten:native:default", "slow:k:c", "atomic:k:c", "fancy:k:c"]


def test_nondeterministic_setting_ranks_atomics_by_time(tmp_path):
    e = engine(tmp_path, [ep("atomic", "ATOMIC"), ep("slow", "SLOW"), ep("fancy", "EXPERIMENTAL")],
               nondeterministic=True)
    ids = [r.kernel_id for r in e.ranking(PROBLEM, CPU).ranked]
    assert ids == ["aten:native:default", "atomic:k:c", "slow:k:c", "fancy:k:c"]
    prove_faster(e, [PROBLEM], ["atomic:k:c"])
    assert [r.kernel_id for r in e.ranking(PROBLEM, CPU).ranked][0] == "atomic:k:c"


@pytest.mark.parametrize("allowed", [False, True])
def test_deterministic_mode_excludes_atomics_whatever_the_setting(tmp_path, allowed):
    e = engine(tmp_path, [ep("atomic", "ATOMIC"), ep("slow", "SLOW")], nondeterministic=allowed)
    outside = e.ranking(PROBLEM, CPU)
    assert "atomic:k:c" in [r.kernel_id for r in outside.ranked] and not outside.excluded
    with fb.deterministic_algorithms():
        ranking = e.ranking(PROBLEM, CPU)  # not the ranking cached outside deterministic mode
        ops = operands()
        torch.testing.assert_close(e.run(PROBLEM, CPU, ops), torch.nn.functional.conv2d(ops[0], ops[1], padding=1))
    assert [r.kernel_id for r in ranking.ranked] == ["aten:native:default", "slow:k:c"]
    assert ranking.excluded == [("atomic:k:c", NONDETERMINISTIC_WHY)]
    assert e.ranking(PROBLEM, CPU) is outside


def test_rank_takes_both_switches_as_arguments(tmp_path):
    from conv_core.ranking import nondeterministic, rank
    from conv_core.tuning import Entry, Timings, write_entries

    (atomic,) = fb.ATOMIC.conv_core_candidates(PROBLEM, CPU)
    (plain,) = fb.GOOD.conv_core_candidates(PROBLEM, CPU)
    assert nondeterministic(atomic) and not nondeterministic(plain)
    table = tmp_path / "table.json"
    write_entries(table, [Entry("any", "cpu", PROBLEM.key, "atomic:k:c", "x", 0.5)])  # a measured time wins too
    timings = Timings("cpu", "cpu", {}, tmp_path / "none.json", [("atomic", table)])

    def order(**switches):
        ranking = rank(PROBLEM, [atomic, plain], [], timings, **switches)
        return [(r.kernel_id, r.source) for r in ranking.ranked], ranking.excluded

    assert order() == ([("good:k:c", "estimate"), ("atomic:k:c", "table:atomic")], [])
    assert order(allow_nondeterministic=True) == ([("atomic:k:c", "table:atomic"), ("good:k:c", "estimate")], [])
    for allowed in (False, True):
        assert order(allow_nondeterministic=allowed, deterministic_mode=True) == (
            [("good:k:c", "estimate")], [("atomic:k:c", NONDETERMINISTIC_WHY)])


def test_ties_break_on_kernel_id(tmp_path):
    fb.GOOD.configs = ("b", "a", "c")
    try:
        ids = [r.kernel_id for r in engine(tmp_path, [ep("good", "GOOD")]).ranking(PROBLEM, CPU).ranked]
    finally:
        fb.GOOD.configs = ("c",)
    assert ids[1:4] == ["good:k:a", "good:k:b", "good:k:c"]


def test_choice_is_cached(tmp_path):
    e = engine(tmp_path, [ep("slow", "SLOW")])
    before = fb.SLOW.calls
    first = e.ranking(PROBLEM, CPU)
    assert e.ranking(PROBLEM, CPU) is first
    assert fb.SLOW.calls == before + 1


def test_force_backend_and_missing_candidates(tmp_path):
    e = engine(tmp_path, [ep("good", "GOOD"), ep("slow", "SLOW")], force_backend="slow")
    assert e.ranking(PROBLEM, CPU).best.kernel_id == "slow:k:c"
    f64 = PROBLEM.replace(dtype="float64")
    with pytest.raises(NoCandidateError, match="no float64"):
        e.ranking(f64, CPU)
    with pytest.raises(ValueError, match="backend='nope' cannot be used: no backend has that name; loaded "
                                         "backends: aten"):
        engine(tmp_path, []).ranking(PROBLEM, CPU, backend="nope")


def test_a_candidate_that_fails_when_run_falls_back(tmp_path):
    e = engine(tmp_path, [ep("failsrun", "FAILS_WHEN_RUN")])
    prove_faster(e, [PROBLEM], ["failsrun:bad:c"])
    assert e.ranking(PROBLEM, CPU).best.kernel_id == "failsrun:bad:c"
    ops = operands()
    torch.testing.assert_close(e.run(PROBLEM, CPU, ops), torch.nn.functional.conv2d(ops[0], ops[1], padding=1))
    ranking = e.ranking(PROBLEM, CPU)
    assert ranking.best.kernel_id == "aten:native:default"
    assert "kernel exploded" in dict(ranking.excluded)["failsrun:bad:c"]
    assert any("kernel exploded" in f for f in e.registry.get("failsrun").failures)


def test_tuning_data_outranks_estimates(tmp_path):
    from conv_core.tuning import Entry, write_entries

    e = engine(tmp_path, [ep("good", "GOOD"), ep("slow", "SLOW")])
    versions = e.versions()
    table = tmp_path / "table.json"
    write_entries(table, [Entry("any", "cpu", PROBLEM.key, "good:k:c", "x", 50.0)])
    write_entries(e.settings.tuning_db, [
        Entry("cpu", "cpu", PROBLEM.key, "slow:k:c", versions["slow"], 10.0),
        Entry("cpu", "cpu", PROBLEM.key, "aten:native:default", versions["aten"], 20.0, "broken"),
        Entry("cpu", "cpu", PROBLEM.key, "good:k:c", "stale-version", 1.0),
    ])
    e.registry.tuning_tables = lambda: [("good", table)]
    ranking = e.ranking(PROBLEM, CPU)
    assert [(r.kernel_id, r.source) for r in ranking.ranked] == [("slow:k:c", "tuning-db"), ("good:k:c", "table:good")]
    assert "broken" in dict(ranking.excluded)["aten:native:default"]
