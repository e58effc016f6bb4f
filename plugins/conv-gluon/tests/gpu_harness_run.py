"""The record of a run of conv-gluon's GPU harness: every case's result written as it comes
(``OUT/gpu_gluon.json``, rewritten after each case, so a run cut short keeps what it did), the time budget,
the watchdog of hung cases, and the summary tables (``OUT/gpu_gluon.md``).
"""

from __future__ import annotations

import json
import os
import threading
import time
import traceback
from pathlib import Path


class Run:
    """The results so far, the output files, the time budget and the watchdog of hung cases."""

    def __init__(self, out: Path, budget_s: float, case_timeout_s: float = 150.0, header: str = "") -> None:
        self.out, self.budget_s, self.start = out, budget_s, time.time()
        self.case_timeout_s, self.header = case_timeout_s, header
        self.results: list[dict] = []

    def elapsed(self) -> float:
        return time.time() - self.start

    def case(self, stage: str, name: str, fn, timeout_s: float | None = None) -> dict:
        """Run ``fn() -> dict`` as one case: record its result, its error, or that the budget was spent; a case
        that runs past ``timeout_s`` (default ``case_timeout_s``) is recorded as hung and ends the process."""
        record = {"stage": stage, "case": name}
        if self.elapsed() > self.budget_s:
            record.update(status="skipped", message=f"time budget of {self.budget_s:.0f} s spent")
        else:
            started = time.time()
            watchdog = threading.Timer(timeout_s or self.case_timeout_s, self._hung, (record, started))
            watchdog.daemon = True
            watchdog.start()
            try:
                record.update(fn())
                record.setdefault("status", "ok")
            except Exception as exc:  # reported, never fatal
                record.update(status="error", message=f"{type(exc).__name__}: {exc}",
                              traceback=traceback.format_exc()[-3000:])
            finally:
                watchdog.cancel()
            record["seconds"] = round(time.time() - started, 2)
        self.results.append(record)
        self.save()
        print(f"{self.elapsed():7.1f}s {stage:12} {name:50} {record['status']:8} {record.get('message', '')[:150]}",
              flush=True)
        return record

    def _hung(self, record: dict, started: float) -> None:
        """The watchdog: the case never returned (a kernel that does not finish cannot be interrupted from
        Python). Record it, write the summary, and leave."""
        record.update(status="hung", seconds=round(time.time() - started, 2),
                      message=f"still running after {time.time() - started:.0f} s: ended the process")
        self.results.append(record)
        self.save()
        (self.out / "gpu_gluon.md").write_text(markdown(self.results, self.header))
        print(f"{self.elapsed():7.1f}s {record['stage']:12} {record['case']:50} hung", flush=True)
        os._exit(3)

    def save(self) -> None:
        path = self.out / "gpu_gluon.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.results, indent=1, default=str))
        os.replace(tmp, path)

def markdown(results: list[dict], header: str) -> str:
    lines = [f"# conv-gluon on the GPU\n\n{header}\n"]
    counts = {}
    for r in results:
        counts.setdefault(r["stage"], {}).setdefault(r["status"], 0)
        counts[r["stage"]][r["status"]] += 1
    statuses = ("ok", "fail", "error", "hung", "skipped")
    lines.append("| stage | " + " | ".join(statuses) + " |")
    lines.append("| --- |" + " --- |" * len(statuses))
    for stage, c in counts.items():
        lines.append(f"| {stage} | " + " | ".join(str(c.get(s, 0)) for s in statuses) + " |")
    checks = [r for r in results if r["stage"] in ("issue", "configs", "determinism", "kit") or r["status"] == "hung"]
    if checks:
        lines += ["\n## Correctness\n", "| stage | case | status | worst error/bound | s | message |",
                  "| --- | --- | --- | --- | --- | --- |"]
        for r in checks:
            ratio = r.get("worst_ratio")
            lines.append(f"| {r['stage']} | {r['case']} | {r['status']} | "
                         f"{'' if ratio is None else f'{ratio:.3g}'} | {r.get('seconds', '')} | "
                         f"{str(r.get('message', '')).replace('|', '/')[:160]} |")
    timed = [r for r in results if r["stage"] in ("bench", "suites") and "cudnn_us" in r]
    if timed:
        lines += ["\n## Speed (bf16, NHWC; TFLOP/s; x cuDNN = cuDNN time / kernel time; wgrad: the weight gradient "
                  "against cuDNN's alone)\n",
                  "| case | GFLOP | cuDNN | kernel | splits | TFLOP/s | x cuDNN | rel L2 vs cuDNN |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- |"]
        for r in timed:
            for kernel, e in r["kernels"].items():
                lines.append(f"| {r['case']} | {r['gflop']} | {r['cudnn_tflops']} | {kernel} | {e.get('splits', '')} "
                             f"| {e.get('tflops', '-')} | {e.get('vs_cudnn', '-')} "
                             f"| {e.get('rel_l2_vs_cudnn', e.get('error', ''))} |")
    return "\n".join(lines) + "\n"

