"""The DDP entry point as one CPU process (gloo on the loopback address): the record and the rank check."""

import json
import socket
import statistics

import pytest

from conv_core import model_bench_ddp
from test_bench_tune import isolate


@pytest.fixture(autouse=True)
def fresh_engine(tmp_path, monkeypatch):
    isolate(tmp_path, monkeypatch)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_one_rank_on_the_cpu(tmp_path, monkeypatch, capsys):
    for key, value in {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
                       "MASTER_PORT": str(free_port())}.items():
        monkeypatch.setenv(key, value)
    for key, value in model_bench_ddp.NCCL_SAFETY.items():
        monkeypatch.setenv(key, value)  # main sets them where absent; monkeypatch restores them
    monkeypatch.setattr(model_bench_ddp.torch.cuda, "is_available", lambda: False)
    path = tmp_path / "ddp.json"
    assert model_bench_ddp.main(["--model", "tiny", "--rounds", "3", "--iterations", "2", "--warmup", "1",
                                 "--json", str(path)]) == 0
    assert "DDP x1 tiny" in capsys.readouterr().out
    record = json.loads(path.read_text())
    assert record["kind"] == "ddp" and record["world_size"] == 1 and record["backend"] == "gloo"
    assert record["failed"] == {} and record["ms"]["plain"] > 0 and record["ms"]["conv"] > 0
    assert record["rounds"] == 3 and record["iterations"] == 2 and "reps" not in record
    ratios = [p / c for p, c in zip(record["round_ms"]["plain"], record["round_ms"]["conv"])]
    assert record["ratio"] == pytest.approx(statistics.median(ratios))
    assert record["ratio_spread"] == pytest.approx([min(ratios), max(ratios)])
    assert record["parameters_equal_across_ranks"] == {"plain": True, "conv": True}
    assert "NVSHMEM_DISABLE_NVLS=1 python3 -m torch.distributed.run " \
        "--nproc_per_node 1 -m conv_core.model_bench_ddp --model tiny" in record["command"]
    assert [len(block) for block in record["rank0_samples_ms"]["conv"]] == [2, 2, 2]
    medians = [statistics.median(block) for block in record["rank0_samples_ms"]["conv"]]
    assert record["round_ms"]["conv"] == pytest.approx(medians)  # one rank: its own are the slowest
