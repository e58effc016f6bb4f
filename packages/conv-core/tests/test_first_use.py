"""First-use timings kept on disk (:mod:`conv_core.first_use`): a second process in benchmark mode reads them
instead of timing again; concurrent writers lose nothing; a damaged file, a new scope, an unwritable folder or
the store turned off never break a ranking."""

import contextlib
import json
import logging
import subprocess
import sys
import textwrap
import threading
import time

import pytest
import torch

from conv_core import BackendInfo, Candidate, ConvProblem, hookimpl
from conv_core import engine as engine_module
from conv_core import ranking as ranking_module
from conv_core.backends import aten
from conv_core.cli import main
from conv_core.engine import Engine
from conv_core.first_use import FORMAT, FirstUseStore, Measured, entry_key, scope
from conv_core.plugins import Registry
from conv_core.ranking import PLUGIN_HOST_US
from conv_core.settings import Settings
from conv_core.testing.fakes import prove_faster

CPU = torch.device("cpu")
PROBLEM = ConvProblem("fwd", 2, 4, 6, (8, 8), (3, 3), 1, 1, 1)
OTHER = PROBLEM.replace(out_channels=8)
IGNORED = "ignoring the first-use timings"


class Counting:
    """A backend offering aten's kernel under its own name, counting its runs; ``fail``: its run raises that."""

    def __init__(self, name="fake", version="1.0", fail=None):
        self.name, self.version, self.fail, self.runs = name, version, fail, 0

    @hookimpl
    def conv_core_backend_info(self):
        return BackendInfo(self.name, self.version, ("cpu",), "test backend")

    @hookimpl
    def conv_core_candidates(self, problem, device):
        (base,) = aten.conv_core_candidates(problem, device)

        def run(*args, out=None):
            self.runs += 1
            if self.fail is not None:
                raise self.fail
            return base.run(*args, out=out)

        return [Candidate(self.name, "k", "c", run, estimate_us=1.0)]


class EntryPointOf:
    def __init__(self, name, plugin):
        self.name, self.value, self.plugin = name, f"tests:{name}", plugin

    def load(self):
        return self.plugin


def make_engine(store, *plugins, **changes):
    """An engine in benchmark mode with ``store`` as its first-use folder; ``trust_estimates`` by default, so
    that timing never stops after aten and every candidate is timed."""
    fields = dict(allow=None, block=frozenset(), force_backend=None, trace=False, tuning_db=store.parent / "db.json",
                  benchmark=True, nondeterministic=False, trust_estimates=True, first_use_dir=store)
    fields.update(changes)
    settings = Settings(**fields)
    return Engine(settings, Registry(settings, [EntryPointOf(p.name, p) for p in plugins]))


@pytest.fixture
def timed(monkeypatch):
    """How many candidates the engine timed."""
    count = [0]
    original = engine_module.median_us

    def counting(*args, **kwargs):
        count[0] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(engine_module, "median_us", counting)
    return count


def order(ranking):
    return [(r.kernel_id, r.us, r.source) for r in ranking.ranked]


def store_file(engine):
    return engine.first_use.path(scope(CPU, engine.versions()))


# ---- a second process starts warm ----------------------------------------------------------------------------


def test_a_second_engine_reads_the_times_instead_of_timing(tmp_path, timed):
    store, plugin = tmp_path / "first-use", Counting()
    first = make_engine(store, plugin).ranking(PROBLEM, CPU)
    assert plugin.runs >= 10 and timed[0] == 2  # aten and the plugin, each timed once
    runs, timings = plugin.runs, timed[0]

    second = make_engine(store, plugin).ranking(PROBLEM, CPU)
    assert plugin.runs == runs and timed[0] == timings  # nothing ran to be timed
    assert order(second) == order(first) and {r.source for r in second.ranked} == {"benchmark"}

    data = json.loads(next(store.glob("*.json")).read_text())
    assert data["format"] == FORMAT and data["scope"]["backends"]["fake"] == "1.0"
    assert set(data["entries"][entry_key(PROBLEM.key, None, False)]["us"]) == {"aten:native:default", "fake:k:c"}


def test_times_are_kept_per_restriction_and_deterministic_flag(tmp_path, timed):
    store, plugin = tmp_path / "first-use", Counting()
    make_engine(store, plugin).ranking(PROBLEM, CPU)
    engine = make_engine(store, plugin)
    engine.ranking(PROBLEM, CPU, backend="fake")  # another restriction: timed again, kept apart
    assert timed[0] == 3
    entries = json.loads(store_file(engine).read_text())["entries"]
    assert set(entries) == {entry_key(PROBLEM.key, None, False), entry_key(PROBLEM.key, "fake", False)}


def test_the_early_stop_is_replayed_and_a_candidate_never_timed_is_timed(tmp_path, monkeypatch):
    """aten under a plugin's host time: the plugin is not timed, then or when the times are read back. With
    estimates trusted there is no early stop, so the stored entry lacks the plugin and everything is timed."""
    calls = []

    def fake_median(fn, device, warmup, reps):
        calls.append(fn)
        return 5.0

    monkeypatch.setattr(engine_module, "median_us", fake_median)
    store, plugin = tmp_path / "first-use", Counting()
    make_engine(store, plugin, trust_estimates=False).ranking(PROBLEM, CPU)
    assert len(calls) == 1  # aten only
    make_engine(store, plugin, trust_estimates=False).ranking(PROBLEM, CPU)
    assert len(calls) == 1
    make_engine(store, plugin, trust_estimates=True).ranking(PROBLEM, CPU)
    assert len(calls) == 3


def test_a_failure_is_kept_with_its_reason_and_out_of_memory_is_not(tmp_path, timed):
    store = tmp_path / "first-use"
    broken = Counting(fail=RuntimeError("kernel exploded"))
    make_engine(store, broken).ranking(PROBLEM, CPU)
    runs = broken.runs
    again = make_engine(store, broken).ranking(PROBLEM, CPU)
    assert broken.runs == runs
    assert ("fake:k:c", "failed when benchmarked: RuntimeError: kernel exploded") in again.excluded

    memory = Counting(fail=RuntimeError("CUDA out of memory"))
    make_engine(tmp_path / "oom", memory).ranking(PROBLEM, CPU)
    runs = memory.runs
    make_engine(tmp_path / "oom", memory).ranking(PROBLEM, CPU)
    assert memory.runs > runs  # tried again: out of memory says nothing about the kernel


def test_no_store_is_read_or_written_when_timing_is_not_allowed(tmp_path, timed, monkeypatch):
    store = tmp_path / "first-use"
    engine = make_engine(store, Counting())
    monkeypatch.setattr(engine.first_use, "get", lambda *a: pytest.fail("the store was read"))
    engine.ranking(PROBLEM, CPU, may_time=False)
    assert timed[0] == 0 and not store.exists()


def test_reset_keeps_the_store(tmp_path, timed):
    engine = make_engine(tmp_path / "first-use", Counting())
    engine.ranking(PROBLEM, CPU)
    engine.reset()
    engine.ranking(PROBLEM, CPU)
    assert timed[0] == 2 and store_file(engine).exists()


# ---- two processes at once -------------------------------------------------------------------------------------

WRITER = textwrap.dedent("""
    import sys
    from pathlib import Path
    from conv_core.first_use import FirstUseStore, Measured
    folder, tag, count = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    store = FirstUseStore(folder)
    for i in range(count):
        store.put({"device": "test"}, f"{tag}-{i}", Measured({"k": float(i)}, {"bad": tag}))
""")


def test_two_processes_writing_at_once_lose_nothing(tmp_path):
    folder, count = tmp_path / "first-use", 60
    path = FirstUseStore(folder).path({"device": "test"})
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, str(folder), tag, str(count)]) for tag in "ab"]
    reads = 0
    while any(w.poll() is None for w in writers):  # a reader meanwhile only ever sees whole files
        if path.exists():
            data = json.loads(path.read_text())
            assert data["format"] == FORMAT
            reads += 1
        time.sleep(0.001)
    assert [w.returncode for w in writers] == [0, 0]
    data = json.loads(path.read_text())
    assert set(data["entries"]) == {f"{tag}-{i}" for tag in "ab" for i in range(count)}
    assert data["entries"]["b-7"] == {"us": {"k": 7.0}, "failed": {"bad": "b"}}
    assert not list(folder.glob("*.tmp"))


def test_threads_of_one_process_share_one_store(tmp_path):
    store = FirstUseStore(tmp_path)
    threads = [threading.Thread(target=lambda t=t: [store.put({"s": 1}, f"{t}-{i}", Measured({}, {}))
                                                    for i in range(20)]) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(json.loads(store.path({"s": 1}).read_text())["entries"]) == 80


# ---- damaged files, new scopes, unwritable folders, the store off ----------------------------------------------


@pytest.mark.parametrize("damage", [
    lambda text: b"\x00\xff\xfe garbage \x80",
    lambda text: json.dumps({"format": "someone-else/3", "entries": {}}).encode(),
    lambda text: text[: len(text) // 2],
    lambda text: text.replace(b'"us": {', b'"us": {"x": "fast", ', 1),
    lambda text: b"[1, 2, 3]",
], ids=["garbage", "foreign-format", "truncated", "malformed-entry", "not-an-object"])
def test_a_damaged_file_is_warned_about_once_timed_again_and_repaired(tmp_path, timed, caplog, damage):
    store, plugin = tmp_path / "first-use", Counting()
    engine = make_engine(store, plugin)
    engine.ranking(PROBLEM, CPU)
    path = store_file(engine)
    path.write_bytes(damage(path.read_bytes()))

    engine = make_engine(store, plugin)
    with caplog.at_level(logging.WARNING, logger="conv_core"):
        ranking = engine.ranking(PROBLEM, CPU)
        engine.ranking(OTHER, CPU)
    assert ranking.best.kernel_id in {"aten:native:default", "fake:k:c"}
    assert timed[0] == 6  # both problems timed: the damaged file's times are not trusted
    assert sum(IGNORED in r.getMessage() for r in caplog.records) == 1
    data = json.loads(path.read_text())
    assert data["format"] == FORMAT
    assert set(data["entries"]) == {entry_key(p.key, None, False) for p in (PROBLEM, OTHER)}

    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="conv_core"):
        make_engine(store, plugin).ranking(PROBLEM, CPU)
    assert timed[0] == 6 and not caplog.records


def test_another_backend_version_does_not_reuse_times(tmp_path, timed):
    store = tmp_path / "first-use"
    make_engine(store, Counting(version="1.0")).ranking(PROBLEM, CPU)
    make_engine(store, Counting(version="2.0")).ranking(PROBLEM, CPU)
    assert timed[0] == 4
    assert len(list(store.glob("*.json"))) == 2


def test_the_scope_names_device_torch_and_every_backend():
    found = scope(CPU, {"aten": "a", "fake": "1.0"})
    assert found["device"].startswith("cpu: ") and found["torch"] == torch.__version__
    assert found["backends"] == {"aten": "a", "fake": "1.0"}
    assert {"driver", "toolkit", "cudnn"} <= set(found)


def test_an_unwritable_folder_never_breaks_a_ranking(tmp_path, timed, caplog):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    engine = make_engine(blocker / "first-use", Counting())
    with caplog.at_level(logging.WARNING, logger="conv_core"):
        engine.ranking(PROBLEM, CPU)
        engine.ranking(OTHER, CPU)
    assert timed[0] == 4
    assert sum("cannot write first-use timings" in r.getMessage() for r in caplog.records) == 1
    assert engine.first_use.get(scope(CPU, engine.versions()), entry_key(OTHER.key, None, False)) is not None


@pytest.mark.parametrize("value", ["off", "OFF", "", " "])
def test_the_store_can_be_turned_off(tmp_path, monkeypatch, timed, value):
    monkeypatch.setenv("CONV_CORE_FIRST_USE_DIR", value)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    settings = Settings.from_env()
    assert settings.first_use_dir is None
    for _ in range(2):
        engine = make_engine(tmp_path / "unused", Counting(), first_use_dir=settings.first_use_dir)
        engine.ranking(PROBLEM, CPU)
    assert timed[0] == 4 and not list(tmp_path.rglob("*.json"))


def test_the_default_folder_is_in_the_cache_and_the_variable_moves_it(tmp_path, monkeypatch):
    monkeypatch.delenv("CONV_CORE_FIRST_USE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert Settings.from_env().first_use_dir == tmp_path / "cache" / "conv-core" / "first-use"
    monkeypatch.setenv("CONV_CORE_FIRST_USE_DIR", str(tmp_path / "elsewhere"))
    assert Settings.from_env().first_use_dir == tmp_path / "elsewhere"


# ---- conv-core warmup --benchmark fills the store ----------------------------------------------------------------


def test_warmup_with_benchmark_fills_the_store(tmp_path, monkeypatch, capsys, timed):
    store = tmp_path / "first-use"
    monkeypatch.setenv("CONV_CORE_FIRST_USE_DIR", str(store))
    monkeypatch.setenv("CONV_CORE_TUNING_DB", str(tmp_path / "tuning.json"))
    monkeypatch.setenv("CONV_CORE_PLUGINS", "aten")
    monkeypatch.delenv("CONV_CORE_BENCHMARK", raising=False)
    monkeypatch.setattr(engine_module, "_engine", None)
    shapes = ["--shape", "n2 c4 k8 i6x6 f3 p1", "--shape", "n2 c8 k4 i5x5 f1 p0"]

    assert main(["warmup", *shapes, "--dtype", "fp32", "--layout", "nchw", "--device", "cpu", "--benchmark"]) == 0
    assert f"first-use timings kept in {store}" in capsys.readouterr().out
    assert timed[0] == 2 and not engine_module.get_engine().settings.benchmark  # the process's engine unchanged

    (path,) = store.glob("*.json")
    entries = json.loads(path.read_text())["entries"]
    assert len(entries) == 2 and all(set(e["us"]) == {"aten:native:default"} for e in entries.values())
    monkeypatch.setenv("CONV_CORE_BENCHMARK", "1")
    engine = Engine()
    for key in entries:
        engine.ranking(ConvProblem.from_key(key.split(" | ")[0]), CPU)
    assert timed[0] == 2  # a later process in benchmark mode reads them


def test_warmup_without_benchmark_times_nothing(tmp_path, monkeypatch, timed):
    monkeypatch.setenv("CONV_CORE_PLUGINS", "aten")
    monkeypatch.setenv("CONV_CORE_TUNING_DB", str(tmp_path / "tuning.json"))
    monkeypatch.delenv("CONV_CORE_BENCHMARK", raising=False)
    monkeypatch.setattr(engine_module, "_engine", None)
    from conv_core import warmup

    warmup.warmup([("conv", PROBLEM)], CPU)
    assert timed[0] == 0


# ---- only what a measured time does not already answer is timed ------------------------------------------


def _measure(engine, problem, us_by_kernel):
    """Tuning-database entries for ``problem`` on the CPU (what ``conv-core tune`` would write)."""
    from conv_core.tuning import Entry, write_entries

    versions = engine.versions()
    write_entries(engine.settings.tuning_db, [Entry("x86_64", "cpu", problem.key, k, versions[k.split(":")[0]], us)
                                              for k, us in us_by_kernel.items()])
    engine.reset()


def test_a_candidate_with_a_measured_time_is_not_timed_on_first_use(tmp_path, timed, monkeypatch):
    """A measured time outranks a first-use one, so first use times only the candidates nobody measured."""
    import conv_core.engine as engine_mod

    monkeypatch.setattr(engine_mod, "device_name", lambda device: "x86_64")
    store, plugin = tmp_path / "first-use", Counting()
    engine = make_engine(store, plugin)
    _measure(engine, PROBLEM, {"fake:k:c": 5.0})
    ranking = engine.ranking(PROBLEM, CPU)
    assert timed[0] == 1 and plugin.runs == 0  # aten alone was timed
    sources = {r.kernel_id: r.source for r in ranking.ranked}
    assert sources == {"fake:k:c": "tuning-db", "aten:native:default": "benchmark"}


def test_a_measured_aten_under_a_plugins_host_time_stops_first_use_timing(tmp_path, timed, monkeypatch):
    import conv_core.engine as engine_mod

    monkeypatch.setattr(engine_mod, "device_name", lambda device: "x86_64")
    store, plugin = tmp_path / "first-use", Counting()
    engine = make_engine(store, plugin, trust_estimates=False)
    _measure(engine, PROBLEM, {"aten:native:default": 5.0})
    engine.ranking(PROBLEM, CPU)
    assert timed[0] == 0 and plugin.runs == 0  # nothing a plugin could win: nothing compiled or timed


#: aten's time in the tests of which candidates first use times: enough for a plugin to win against.
ATEN_US = 4 * PLUGIN_HOST_US


class Several(Counting):
    """A backend offering aten's kernel as several configurations, ``estimates`` (us) their own predictions."""

    def __init__(self, name, estimates):
        super().__init__(name)
        self.estimates = estimates

    @hookimpl
    def conv_core_candidates(self, problem, device):
        (base,) = aten.conv_core_candidates(problem, device)
        return [Candidate(self.name, "k", f"c{i}", base.run, estimate_us=us) for i, us in enumerate(self.estimates)]


def test_first_use_times_only_the_best_estimated_candidates_that_could_win(tmp_path, monkeypatch):
    """aten is timed first (ATEN_US here); of each backend, only the FIRST_USE_PER_BACKEND best estimates within
    FIRST_USE_SLACK of aten's time are timed (two here, to see the order), and a second engine replays exactly
    those from the store."""
    from conv_core.ranking import FIRST_USE_SLACK

    monkeypatch.setattr(ranking_module, "FIRST_USE_PER_BACKEND", 2)
    timed_ids = []

    def fake_median(fn, device, warmup, reps):
        timed_ids.append(fn)
        return ATEN_US

    monkeypatch.setattr(engine_module, "median_us", fake_median)
    hopeless = ATEN_US * FIRST_USE_SLACK * 1.5
    one = Several("one", [30.0, 10.0, 20.0, hopeless])
    two = Several("two", [hopeless, 50.0])
    store = tmp_path / "first-use"
    ranking = make_engine(store, one, two, trust_estimates=False).ranking(PROBLEM, CPU)
    assert len(timed_ids) == 1 + 2 + 1  # aten, one's two best (c1, c2), two's c1
    sources = {r.kernel_id: r.source for r in ranking.ranked}
    assert {k for k, s in sources.items() if s == "benchmark"} == {
        "aten:native:default", "one:k:c1", "one:k:c2", "two:k:c1"}

    again = make_engine(store, one, two, trust_estimates=False).ranking(PROBLEM, CPU)
    assert len(timed_ids) == 4 and order(again) == order(ranking)  # replayed, nothing timed again


def test_aten_is_timed_on_a_fused_problem_whose_measured_time_is_the_bare_problems(tmp_path, monkeypatch):
    """A table's time of the problem without its epilogue spares a plugin its timing, not aten: aten compiles
    nothing, and its epilogue is launches of its own, which its time on the problem itself counts."""
    timed = []
    monkeypatch.setattr(engine_module, "median_us", lambda fn, device, warmup, reps: timed.append(fn) or 77.0)
    engine = make_engine(tmp_path / "first-use")
    prove_faster(engine, [PROBLEM], [], aten_us=50.0)
    best = engine.ranking(PROBLEM.replace(bias=True, activation="relu"), CPU).best
    assert (best.kernel_id, best.us, best.source) == ("aten:native:default", 77.0, "benchmark")
    assert len(timed) == 1 and engine.ranking(PROBLEM, CPU).best.source.startswith("tuning-db")


def test_an_experimental_candidate_is_never_timed_the_next_best_of_its_backend_is():
    """It ranks behind aten whatever its time (conv_core.ranking): timing it would only cost its compilation."""
    from conv_core.ranking import worth_timing

    def plugin(config, us, *tags):
        return Candidate("one", "k", config, lambda *a, **k: None, estimate_us=us, tags=frozenset(tags))

    chosen = worth_timing([plugin("a", 10.0, "experimental"), plugin("b", 20.0), plugin("c", 15.0, "experimental")],
                          aten_us=ATEN_US)
    assert [c.kernel_id for c in chosen] == ["one:k:b"]


# ---- first runs side by side ---------------------------------------------------------------------------------------


def test_the_plugins_worth_timing_are_first_run_together_before_they_are_timed(tmp_path, monkeypatch):
    """Exactly the candidates first use will time, aten aside, get their first (compiling) runs together, on the
    problem's device, before any of them is timed; a replay from the store runs none."""
    events = []

    def fake_median(fn, device, warmup, reps):
        events.append("timed")
        return ATEN_US

    def together(runs, device):
        events.append(("first runs", len(runs), device))
        for run in runs:
            run()

    monkeypatch.setattr(engine_module, "median_us", fake_median)
    monkeypatch.setattr(engine_module, "first_runs_together", together)
    monkeypatch.setattr(ranking_module, "FIRST_USE_PER_BACKEND", 2)
    one = Several("one", [30.0, 10.0, 20.0, 1e9])
    store = tmp_path / "first-use"
    make_engine(store, one, trust_estimates=False).ranking(PROBLEM, CPU)
    assert events == ["timed", ("first runs", 2, CPU), "timed", "timed"]  # aten, then one's two best
    make_engine(store, one, trust_estimates=False).ranking(PROBLEM, CPU)
    assert len(events) == 4


def test_first_runs_happen_side_by_side_and_a_failure_stops_none(monkeypatch):
    from conv_core import timing

    monkeypatch.setattr(timing.os, "cpu_count", lambda: 4)  # one thread per run at most, whatever runs the test

    met, scopes = [], []
    both = threading.Barrier(2)

    def meeting():
        both.wait(timeout=10)  # only returns if the other run is under way at the same time
        met.append(threading.get_ident())

    def broken():
        raise RuntimeError("kernel exploded")

    @contextlib.contextmanager
    def scope():
        scopes.append("in")
        yield

    timing.together([meeting, broken, meeting], scope)
    assert len(met) == 2 and len(set(met)) == 2 and scopes == ["in"] * 3


def test_first_runs_are_left_to_the_timing_on_the_cpu():
    from conv_core import timing

    ran = []
    timing.first_runs_together([lambda: ran.append(1), lambda: ran.append(2)], CPU)
    assert ran == []
