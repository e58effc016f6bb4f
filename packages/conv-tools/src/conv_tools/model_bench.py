"""The real-model benchmark: a model run plain and through conv-core, in each way a user runs it.

Kernel benchmarks time GPU work alone; a user gets the wall time of a whole model, host work
included. So for one model, in one process, this runs

- ``plain``: the model as PyTorch runs it, with ``torch.backends.cudnn.benchmark = True``;
- ``conv``: a deep copy passed through :func:`conv_core.convert`;
- ``fused``: (inference modes, where conv-core has ``optimize_for_inference``) a converted copy with
  batch norm and activations folded into the convolutions;

in each mode of :mod:`conv_tools.model_bench_modes`, and reports per mode the median wall time of one
iteration (a device synchronize on either side: what the user waits for), the ratio
``plain / variant`` (above 1: conv-core is faster), the first call's time, and each variant's output
error against the same model run in float64 on the same input (``max |y - y64| / max |y64|``).

Timing is in alternating rounds (:func:`time_interleaved`): in each round every variant runs a block of
iterations, variants in turn, each round in another order (:func:`_in_turn`). On shared GPU machines one
variant's median moved 1.4-1.85x between stretches of one process; a ratio taken within a round sees
both variants in the same stretch. The ratio reported is the median over rounds of each round's
``plain / variant`` (of the round's medians), with the lowest and highest round's ratio as its spread.
It also counts which backend the converted model's problems are ranked to, per direction.
"""

from __future__ import annotations

import contextlib
import copy
import gc
import itertools
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch
from conv_core.layout import to_layout
from conv_core.problem import DIRECTIONS, torch_dtype
from conv_core.reference import UNIT_ROUNDOFF
from conv_core.frontend.transposed import TRANSPOSED_DIRECTIONS
from torch import nn

from . import bench_models
from .bench_record import finite
from .model_bench_modes import (AMP_MODES, CUDA_MODES, DEFAULT_ROUNDS, INFERENCE_MODES, MODES, Runner, prepare,
                                random_layers_off, tensors_of)

VARIANTS = ("plain", "conv", "fused")
#: A variant's output error is tolerated up to this many times plain PyTorch's own error on the same run ...
ERROR_GROWTH = 2.0
#: ... or up to this many unit roundoffs of the computing dtype, whichever is larger.
ERROR_FLOOR_ROUNDOFFS = 4.0

Log = Callable[[str], None]


@dataclass(frozen=True)
class ModelBenchConfig:
    """What to run: the model, where, at which batch, dtype and layout, in which modes, how many times.

    Timing: ``warmup`` untimed iterations of each variant, then ``rounds`` alternating rounds of ``iterations``
    timed iterations per variant (see :func:`time_interleaved`).
    """

    model: str
    device: str = "cuda"
    batch: int | None = None
    dtype: str = "bfloat16"
    layout: str = "channels_last"
    modes: tuple[str, ...] = MODES
    rounds: int = DEFAULT_ROUNDS
    iterations: int = 4
    warmup: int = 3
    compile_backend: str = "inductor"
    seed: int = 0
    #: Which of :data:`VARIANTS` to run (``plain`` always runs: every ratio is to it).
    variants: tuple[str, ...] = VARIANTS

    @property
    def amp_dtype(self) -> str:
        """The dtype autocast computes in: the benchmark's dtype if it is 16-bit, else bfloat16."""
        return self.dtype if self.dtype in ("bfloat16", "float16") else "bfloat16"


def fuser() -> Callable[[nn.Module], nn.Module] | None:
    """``conv_core.optimize_for_inference`` where this version of conv-core has it."""
    import conv_core

    return getattr(conv_core, "optimize_for_inference", None)


@contextlib.contextmanager
def cudnn_benchmark():
    """``torch.backends.cudnn.benchmark = True`` for the block: plain PyTorch as a user tunes it."""
    before = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = True
    try:
        yield
    finally:
        torch.backends.cudnn.benchmark = before


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _free(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


# ---- models and inputs as a mode runs them ----------------------------------------------------


def in_layout(t: torch.Tensor, layout: str) -> torch.Tensor:
    """``t`` dense in ``layout`` if it is 4-D or 5-D (``channels_last`` / ``channels_last_3d``: a 2D or 3D
    convolution's tensor), else as it is: PyTorch has no channels-last format for other ranks."""
    return to_layout(t, layout) if t.dim() in (4, 5) else t


def cast(module: nn.Module, dtype: torch.dtype, layout: str) -> nn.Module:
    """``module`` with floating-point weights in ``dtype`` and 4-D and 5-D ones in ``layout``, in place.

    Parameters are converted one by one: ``Module.to(memory_format=...)`` takes one format for every rank,
    and a 3D model's 5-D weights need ``channels_last_3d``.
    """
    module.to(dtype=dtype)
    if layout == "channels_last":
        for tensor in itertools.chain(module.parameters(), module.buffers()):
            tensor.data = in_layout(tensor.data, layout)
    return module


def cast_input(x: torch.Tensor, dtype: torch.dtype, layout: str) -> torch.Tensor:
    return in_layout(x.to(dtype), layout)


def weights_dtype(mode: str, config: ModelBenchConfig) -> torch.dtype:
    return torch.float32 if mode in AMP_MODES else torch_dtype(config.dtype)


def make_variants(base: nn.Module, mode: str, config: ModelBenchConfig) -> dict[str, Callable[[], nn.Module]]:
    """Builders of each variant for ``mode``: fresh deep copies of ``base``, cast, then converted / fused."""
    dtype = weights_dtype(mode, config)

    def plain() -> nn.Module:
        return cast(copy.deepcopy(base), dtype, config.layout)

    def conv() -> nn.Module:
        import conv_core

        return conv_core.convert(plain())

    builders = {"plain": plain, "conv": conv}
    fuse = fuser()
    if mode in INFERENCE_MODES and fuse is not None:
        builders["fused"] = lambda: fuse(conv().eval())
    return {name: build for name, build in builders.items() if name == "plain" or name in config.variants}


# ---- float64 references and errors ------------------------------------------------------------


class References:
    """The base model's float64 outputs on the benchmark's input, in eval and train mode, made on demand."""

    def __init__(self, base: nn.Module, x: torch.Tensor) -> None:
        self.base, self.x = base, x
        self._outputs: dict[bool, list[torch.Tensor]] = {}

    def output(self, training: bool) -> list[torch.Tensor]:
        if training not in self._outputs:
            model = copy.deepcopy(self.base).double().train(training)
            with torch.no_grad(), random_layers_off(model):
                self._outputs[training] = [t.detach() for t in tensors_of(model(self.x.double()))]
            del model
            _free(self.x.device)
        return self._outputs[training]


def relative_error(output, reference: list[torch.Tensor]) -> float | None:
    """``max |y - y64| / max |y64|`` over every output tensor; None if the output is not finite."""
    outputs = tensors_of(output)
    if len(outputs) != len(reference) or any(o.shape != r.shape for o, r in zip(outputs, reference)):
        raise ValueError(f"output shapes {[tuple(o.shape) for o in outputs]} differ from the reference's "
                         f"{[tuple(r.shape) for r in reference]}")
    scale = max(r.abs().max().item() for r in reference)
    error = max((o.detach().double() - r).abs().max().item() for o, r in zip(outputs, reference))
    return finite(error / scale if scale > 0 else error)


def tolerated_error(plain_error: float | None, dtype: str) -> float:
    """The largest error a converted variant may have: :data:`ERROR_GROWTH` x plain's, at least
    :data:`ERROR_FLOOR_ROUNDOFFS` roundoffs of ``dtype``. A whole model's error has no float64 bound of its
    own (it compounds through every layer), so plain PyTorch on the same run is the yardstick."""
    floor = ERROR_FLOOR_ROUNDOFFS * UNIT_ROUNDOFF[dtype]
    return max(floor, ERROR_GROWTH * plain_error) if plain_error is not None else floor


# ---- one mode ---------------------------------------------------------------------------------


def _failure(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:400] if text else ''}"


def time_interleaved(steps: dict[str, Callable[[], object]], device: torch.device, *, warmup: int, rounds: int,
                     iterations: int) -> tuple[dict[str, list[list[float]]], dict[str, str]]:
    """Wall milliseconds of each step per round, ``{name: [[ms, ...] per round]}``, and the failure of each
    step that raised (it is not stepped again; its later rounds stay empty, the others go on).

    First ``warmup`` untimed steps of each, in turn; then ``rounds`` rounds in which each step runs a block of
    ``iterations`` timed calls, steps in turn, each round's order rotated (:func:`_in_turn`). A drift of clocks or
    temperature then falls within a round on every variant alike, and the per-round ratios cancel it; a block
    rather than single calls gives each round a median of its own.
    """
    samples: dict[str, list[list[float]]] = {name: [[] for _ in range(rounds)] for name in steps}
    failed: dict[str, str] = {}
    names = list(steps)
    for i in range(warmup):
        for name in _in_turn(names, i):
            _step(steps, name, device, failed)
    for r in range(rounds):
        for name in _in_turn(names, r):
            for _ in range(iterations):
                ms = _step(steps, name, device, failed)
                if ms is None:
                    break
                samples[name][r].append(ms)
    return samples, failed


#: How :func:`time_interleaved` orders each round, as a record's config names it (a record without it reversed
#: the order every other round).
ORDER = "rotated"


def _in_turn(names: list[str], i: int) -> list[str]:
    """The order of round ``i``: ``names`` rotated by ``i``, reversed in every other cycle of rotations, so that
    each variant runs in each place equally often and after each other variant as often as before it. (Reversing
    alone left the middle one of three variants in the middle in every round.)"""
    n = len(names)
    turned = names[i % n:] + names[:i % n]
    return turned if (i // n) % 2 == 0 else turned[::-1]


def _step(steps: dict[str, Callable[[], object]], name: str, device: torch.device,
          failed: dict[str, str]) -> float | None:
    """Wall milliseconds of one call of ``steps[name]`` between device synchronizes; None if it failed now
    (recorded in ``failed``) or before: one variant failing must not end the others' measurement."""
    if name in failed:
        return None
    _sync(device)
    start = time.perf_counter()
    try:
        steps[name]()
        _sync(device)
    except Exception as exc:  # a failing variant is a result, not a crash
        failed[name] = f"failed when stepped: {_failure(exc)}"
        return None
    return (time.perf_counter() - start) * 1e3


def round_times(rounds: list[list[float]]) -> dict:
    """One variant's times from its per-round samples: ``samples_ms`` (flat), ``round_ms`` (each round's
    median, None for a round it did not run), ``ms`` (median of all samples) and ``ms_spread`` (lowest and
    highest round median): the spread shows how far the machine drifted during the run."""
    flat = [t for block in rounds for t in block]
    medians = [statistics.median(block) if block else None for block in rounds]
    measured = [m for m in medians if m is not None]
    return {"samples_ms": flat, "round_ms": medians, "ms": statistics.median(flat) if flat else None,
            "ms_spread": [min(measured), max(measured)] if measured else None}


def round_ratios(plain: list[float | None], variant: list[float | None]) -> list[float]:
    """``plain / variant`` of each round's medians, over the rounds both ran: both measured in the same
    stretch of the run, so the machine's drift between stretches cancels."""
    return [p / v for p, v in zip(plain, variant) if p and v]


def median_and_spread(ratios: list[float]) -> tuple[float, list[float]]:
    """The median of per-round ratios and their ``[lowest, highest]``: the figure and how far to trust it."""
    return statistics.median(ratios), [min(ratios), max(ratios)]


def prepare_variant(mode: str, build: Callable[[], nn.Module], xin: torch.Tensor, refs: References,
                    config: ModelBenchConfig, entry: dict) -> Runner | None:
    """Build one variant and make its first call; fill ``entry`` (first-call time, notes, output error, or
    why it failed). None if it cannot run in ``mode``."""
    try:
        runner = prepare(mode, build(), xin, amp_dtype=torch_dtype(config.amp_dtype),
                         compile_backend=config.compile_backend)
    except Exception as exc:  # a variant that cannot run in this mode is a result, not a crash
        entry["failed"] = _failure(exc)
        return None
    entry["first_s"], entry["notes"] = runner.first_s, list(runner.notes)
    if runner.comparable:
        try:
            entry["error"] = relative_error(runner.first_output, refs.output(mode not in INFERENCE_MODES))
        except Exception as exc:  # e.g. an output of another shape: a wrong result, reported as such
            entry["notes"].append(f"output not compared: {_failure(exc)}")
    runner.first_output = None
    return runner


def eager_plain_error(base: nn.Module, xin: torch.Tensor, refs: References, config: ModelBenchConfig) -> float | None:
    """Plain PyTorch's eager inference error: a compiled mode's yardstick too. Inductor's fusions can make the
    compiled plain model more exact than eager PyTorch (SD-VAE's decoder: 0.029 against 0.046, H200, bf16), while
    a converted layer runs the same kernels compiled or not, held to the tolerance of its eager outputs."""
    model = make_variants(base, "eager", config)["plain"]().eval()
    with torch.no_grad():
        return relative_error(model(xin), refs.output(False))


def run_mode(mode: str, base: nn.Module, x: torch.Tensor, refs: References, config: ModelBenchConfig,
             log: Log | None = None) -> dict:
    """Every variant of ``base`` in ``mode``: times, ratios to plain, output errors."""
    device = x.device
    result: dict = {"mode": mode, "skipped": None, "variants": {}, "ratios": {}, "ratio_spread": {},
                    "within_tolerance": {}}
    if mode in CUDA_MODES and device.type != "cuda":
        result["skipped"] = "needs a CUDA device"
    else:
        xin = cast_input(x, weights_dtype(mode, config), config.layout)
        runners = {}  # held while timing: a graph mode's runner keeps what its graph reads alive
        for name, build in make_variants(base, mode, config).items():
            entry = result["variants"][name] = {"ms": None, "first_s": None, "error": None, "notes": [],
                                                "failed": None}
            _progress(log, f"{config.model} {mode}: {name}: building it and making its first call")
            runner = prepare_variant(mode, build, xin, refs, config, entry)
            if runner is not None:
                runners[name] = runner
        del runner
        steps = {name: runner.step for name, runner in runners.items()}
        _progress(log, f"{config.model} {mode}: timing {', '.join(steps)}: {config.warmup} warm-up iterations, "
                       f"then {config.rounds} alternating rounds of {config.iterations} iterations each")
        samples, failed = time_interleaved(steps, device, warmup=config.warmup, rounds=config.rounds,
                                           iterations=config.iterations)
        del steps, runners  # the variants' modules, graphs and compiled code go with them
        result["rounds"], result["iterations"] = config.rounds, config.iterations
        for name, why in failed.items():
            result["variants"][name]["failed"] = why
        for name, rounds in samples.items():
            result["variants"][name].update(round_times(rounds))
        eager_error = eager_plain_error(base, xin, refs, config) if mode.startswith("compile") else None
        _judge(result, config.amp_dtype if mode in AMP_MODES else config.dtype, eager_error)
        if mode.startswith("compile"):
            torch._dynamo.reset()
        _free(device)
    if log is not None:
        log(describe_mode(config.model, result))
    return result


def _progress(log: Log | None, line: str) -> None:
    """Say what the run does next: a large model on a CPU takes minutes per step, and silence reads as a hang."""
    if log is not None:
        log(f"  ... {line}")


def _judge(result: dict, dtype: str, eager_error: float | None = None) -> None:
    """Fill in the ratios to plain (median over rounds of each round's ratio, and their spread) and whether
    each variant's error is tolerated: against plain's error in this mode, or plain eager's where given and
    larger (see :func:`eager_plain_error`)."""
    variants = result["variants"]
    plain = variants.get("plain", {})
    errors = [e for e in (plain.get("error"), eager_error) if e is not None]
    tolerated = tolerated_error(max(errors) if errors else None, dtype)
    result["tolerated_error"] = tolerated
    for name, entry in variants.items():
        ratios = round_ratios(plain.get("round_ms") or [], entry.get("round_ms") or []) if name != "plain" else []
        if ratios:
            result["ratios"][name], result["ratio_spread"][name] = median_and_spread(ratios)
        if entry.get("error") is not None:
            result["within_tolerance"][name] = entry["error"] <= tolerated


def describe_mode(model: str, result: dict) -> str:
    """One line: the mode's times and ratios (with the rounds' lowest and highest), or why it did not run."""
    if result["skipped"]:
        return f"{model} {result['mode']}: skipped ({result['skipped']})"
    parts = []
    for name, entry in result["variants"].items():
        if entry["failed"]:
            parts.append(f"{name} FAILED ({entry['failed'][:120]})")
        elif entry["ms"] is not None:
            ratio, spread = result["ratios"].get(name), result.get("ratio_spread", {}).get(name)
            rounds = f", rounds {spread[0]:.2f}-{spread[1]:.2f}" if spread else ""
            parts.append(f"{name} {entry['ms']:.3f} ms" + (f" ({ratio:.3f}x{rounds})" if ratio else ""))
    return f"{model} {result['mode']}: " + ", ".join(parts)


# ---- which backend the converted model's problems go to ----------------------------------------


def picks(module: nn.Module, x: torch.Tensor, directions: tuple[str, ...] = DIRECTIONS) -> dict:
    """The converted ``module``'s distinct problems on ``x`` and, per direction, the kernel the engine
    ranks first: ``{"layers": [...], "by_backend": {direction: {backend: {"problems", "calls"}}}}``.

    Directions are the layers': a transposed convolution's forward is ranked as the problem that computes
    it (its convolution's ``bwd_data``; :data:`conv_core.frontend.transposed.TRANSPOSED_DIRECTIONS`), and its row says
    ``"transposed": true``.
    """
    import conv_core

    engine = conv_core.get_engine()
    layers = conv_core.capture_shapes(module.eval(), x)
    rows, by_backend = [], {d: {} for d in directions}
    for layer in layers:
        row = {"module": layer.name, "modules": list(layer.modules), "problem": layer.problem.key,
               "count": layer.count}
        if layer.transposed:
            row["transposed"] = True
        for direction in directions:
            problem = layer.problem.with_direction(TRANSPOSED_DIRECTIONS[direction] if layer.transposed
                                                   else direction)
            try:
                best = engine.ranking(problem, x.device).best
                backend, row[direction] = best.candidate.backend, best.kernel_id
                row[f"{direction}_source"] = best.source
            except Exception as exc:  # no candidate: the call itself would fail, say so
                backend, row[direction] = "none", _failure(exc)
            tally = by_backend[direction].setdefault(backend, {"problems": 0, "calls": 0})
            tally["problems"] += 1
            tally["calls"] += layer.count
        rows.append(row)
    return {"layers": rows, "by_backend": by_backend}


def model_picks(base: nn.Module, x: torch.Tensor, config: ModelBenchConfig) -> dict:
    """Picks of the converted model in every direction and, where it exists, of the fused one (forward)."""
    builders = make_variants(base, "eager", config)
    xin = cast_input(x, torch_dtype(config.dtype), config.layout)
    found = {}
    for name, directions in (("conv", DIRECTIONS), ("fused", ("fwd",))):
        if name in builders:
            try:
                found[name] = picks(builders[name](), xin, directions)
            except Exception as exc:
                found[name] = {"failed": _failure(exc)}
    return found


# ---- the whole benchmark ----------------------------------------------------------------------


def run_model_bench(config: ModelBenchConfig, log: Log | None = None,
                    checkpoint: Callable[[dict], None] | None = None) -> dict:
    """Run ``config.model`` in every mode of ``config``; the JSON-ready record (without its stamp).

    ``checkpoint(record)`` is called after each mode with the record so far (``complete`` still False), so a
    run stopped by a time limit keeps the modes it measured.
    """
    unknown = [m for m in config.modes if m not in MODES] + [v for v in config.variants if v not in VARIANTS]
    if unknown:
        raise ValueError(f"unknown mode(s) or variant(s) {', '.join(unknown)}; modes: {', '.join(MODES)}; "
                         f"variants: {', '.join(VARIANTS)}")
    spec = bench_models.get(config.model)
    device = torch.device(config.device)
    batch = config.batch or spec.default_batch
    base = bench_models.build(config.model, config.seed).to(device)
    x = spec.example(batch, device, config.seed)
    record = {"kind": "model", "model": config.model, "description": spec.description, "batch": batch,
              "input_shape": list(x.shape), "config": {**asdict(config), "batch": batch, "order": ORDER},
              "fused_available": fuser() is not None, "complete": False, "modes": []}
    with cudnn_benchmark():
        _progress(log, f"{config.model}: batch {batch} on {device}, modes {', '.join(config.modes)}")
        refs = References(base, x)
        for mode in config.modes:
            record["modes"].append(run_mode(mode, base, x, refs, config, log))
            if checkpoint is not None:
                checkpoint(record)
        record["picks"] = model_picks(base, x, config)
    record["complete"] = True
    return record

