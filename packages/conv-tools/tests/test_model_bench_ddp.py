"""The DDP / FSDP2 entry point as one CPU process (gloo on the loopback address): the record and the rank check;
and as two ranks under ``torch.distributed.run``."""

import json
import os
import socket
import statistics
import subprocess
import sys

import pytest

from conv_tools import bench_page, model_bench_ddp
from conv_core.testing.fakes import isolate


@pytest.fixture(autouse=True)
def fresh_engine(tmp_path, monkeypatch):
    isolate(tmp_path, monkeypatch)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one_rank(monkeypatch):
    for key, value in {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
                       "MASTER_PORT": str(free_port())}.items():
        monkeypatch.setenv(key, value)
    for key, value in model_bench_ddp.NCCL_SAFETY.items():
        monkeypatch.setenv(key, value)  # main sets them where absent; monkeypatch restores them
    monkeypatch.setattr(model_bench_ddp.torch.cuda, "is_available", lambda: False)


def check_entry(entry, rounds, iterations, one_rank=True):
    assert entry["failed"] == {} and entry["ms"]["plain"] > 0 and entry["ms"]["conv"] > 0
    ratios = [p / c for p, c in zip(entry["round_ms"]["plain"], entry["round_ms"]["conv"])]
    assert len(ratios) == rounds and entry["ratio"] > 0
    assert entry["ratio"] == pytest.approx(statistics.median(ratios))
    assert entry["ratio_spread"] == pytest.approx([min(ratios), max(ratios)])
    assert entry["parameters_equal_across_ranks"] == {"plain": True, "conv": True}
    assert [len(block) for block in entry["rank0_samples_ms"]["conv"]] == [iterations] * rounds
    if one_rank:  # one rank: its own medians are the slowest
        medians = [statistics.median(block) for block in entry["rank0_samples_ms"]["conv"]]
        assert entry["round_ms"]["conv"] == pytest.approx(medians)


def test_one_rank_on_the_cpu_both_wrappers(tmp_path, monkeypatch, capsys):
    one_rank(monkeypatch)
    path = tmp_path / "ddp.json"
    assert model_bench_ddp.main(["--model", "tiny", "--rounds", "3", "--iterations", "2", "--warmup", "1",
                                 "--json", str(path)]) == 0
    out = capsys.readouterr().out
    assert "DDP x1 tiny" in out and "FSDP2 x1 tiny" in out
    record = json.loads(path.read_text())
    assert record["kind"] == "ddp" and record["world_size"] == 1 and record["backend"] == "gloo"
    assert record["rounds"] == 3 and record["iterations"] == 2 and "reps" not in record
    assert list(record["wrappers"]) == ["ddp", "fsdp"]
    for entry in record["wrappers"].values():
        check_entry(entry, 3, 2)
    ddp, fsdp = record["wrappers"]["ddp"], record["wrappers"]["fsdp"]
    assert ddp["wrapper"] == "DistributedDataParallel" and fsdp["wrapper"] == "FSDP2 fully_shard"
    assert fsdp["sharded_units"] == ["stem", "body", "head", ""] and fsdp["parameter_layout"] == "contiguous"
    for key in model_bench_ddp.DDP_TOP_LEVEL:  # DDP's figures where records before FSDP2 had them
        assert record[key] == ddp[key]
    assert "NVSHMEM_DISABLE_NVLS=1 python3 -m torch.distributed.run " \
        "--nproc_per_node 1 -m conv_tools.model_bench_ddp --model tiny" in record["command"]
    page = bench_page.render([record])
    assert "| tiny | 1 | 2 |" in page and "| tiny (FSDP2) | 1 | 2 |" in page
    assert "rows marked FSDP2" in page and page.count("plain yes, conv yes") == 2


def test_fsdp_alone_and_a_torch_without_it(tmp_path, monkeypatch, capsys):
    one_rank(monkeypatch)
    path = tmp_path / "fsdp.json"
    assert model_bench_ddp.main(["--model", "tiny", "--wrap", "fsdp", "--rounds", "2", "--iterations", "1",
                                 "--warmup", "1", "--json", str(path)]) == 0
    record = json.loads(path.read_text())
    assert list(record["wrappers"]) == ["fsdp"] and "ms" not in record and "ratio" not in record
    check_entry(record["wrappers"]["fsdp"], 2, 1)
    assert "| tiny (FSDP2) | 1 | 2 |" in bench_page.render([record])
    assert bench_page._ddp(bench_page.Runs([record])) == (None, "")  # the DDP target is DDP's alone

    monkeypatch.setattr(model_bench_ddp, "fully_shard_api", lambda: None)
    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    assert model_bench_ddp.main(["--model", "tiny", "--rounds", "2", "--iterations", "1", "--warmup", "1",
                                 "--json", str(path)]) == 0
    record = json.loads(path.read_text())
    assert "no FSDP2 fully_shard" in record["wrappers"]["fsdp"]["skipped"] and "ms" not in record["wrappers"]["fsdp"]
    check_entry(record["wrappers"]["ddp"], 2, 1)
    assert "FSDP2 x1 tiny: skipped" in capsys.readouterr().out
    assert "| tiny (FSDP2) | 1 | 2 | - | - | - | skipped: NotImplementedError" in bench_page.render([record])


def test_the_wrappers_option():
    parse = model_bench_ddp._parser().parse_args
    assert parse([]).wrap == ["ddp", "fsdp"]
    assert parse(["--wrap", "fsdp, ddp,fsdp"]).wrap == ["fsdp", "ddp"]
    with pytest.raises(SystemExit):
        parse(["--wrap", "ddp,zero"])


def test_two_ranks_on_the_cpu(tmp_path):
    path = tmp_path / "ddp2.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
               "--master_port", str(free_port()), "-m", "conv_tools.model_bench_ddp", "--model", "tiny",
               "--rounds", "2", "--iterations", "1", "--warmup", "1", "--json", str(path)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "DDP x2 tiny" in done.stdout and "FSDP2 x2 tiny" in done.stdout
    record = json.loads(path.read_text())
    assert record["world_size"] == 2 and record["backend"] == "gloo" and list(record["wrappers"]) == ["ddp", "fsdp"]
    for entry in record["wrappers"].values():
        check_entry(entry, 2, 1, one_rank=False)
