"""The GPU presets on a Qwen2.5-Math-1.5B-shaped model: peak memory against --dry-run, step time by phase.

Nothing is downloaded. The model is Qwen2.5-Math-1.5B's architecture from its published
config (hidden 1536, 28 layers, 12 heads, 2 KV heads, intermediate 8960, vocabulary
151,936, tied embeddings, 4096 positions, rope_theta 10000) with random weights, and the
tokenizer is a synthetic byte-level one of the same vocabulary size (one token per byte,
the rest of the vocabulary unused). The prompts are r1_zero prompts of synthetic
arithmetic (MATH is not needed to measure memory and time). Random weights would stop
at random; min_tokens = max_tokens makes every response run to full length, the worst
case the memory estimate plans for.

For each preset (experiments/rtx4090.yaml, experiments/h100.yaml) it runs a few GRPO
steps with `grpoctl train` and prints the measured peak memory of each phase against
the `--dry-run` estimate of the configuration that actually ran, the median step time
by phase, and vLLM's sleep/wake and weight-sync times. What cannot run here is said so:
without vLLM the hf backend generates (sleep/wake and weight sync: not measured);
without bitsandbytes 8-bit AdamW becomes AdamW (and the estimate follows).

    python benchmarks/gpu_check.py                       # on a GPU: the real sizes
    python benchmarks/gpu_check.py --scale cpu           # anywhere: scaled down, seconds (tests/test_gpu_check.py)
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PRESETS = ("rtx4090", "h100")

QWEN_MATH_15B = dict(
    hidden_size=1536,
    num_hidden_layers=28,
    num_attention_heads=12,
    num_key_value_heads=2,
    intermediate_size=8960,
    vocab_size=151936,
    tie_word_embeddings=True,
    max_position_embeddings=4096,
    rope_theta=10000.0,
    rms_norm_eps=1e-6,
)

# --scale cpu: the same code paths on sizes a CPU runs in seconds. head_dim 64, since
# vLLM's CPU attention refuses smaller heads (16 is "Unsupported CPU attention configuration").
CPU_MODEL = dict(
    QWEN_MATH_15B,
    hidden_size=128,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=1,
    intermediate_size=128,
    vocab_size=4096,
    max_position_embeddings=1024,
)
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
    from transformers import Qwen2Config, Qwen2ForCausalLM

    tokenizer = synthetic_tokenizer(sizes["vocab_size"])
    config = Qwen2Config(**sizes, pad_token_id=0, eos_token_id=1, bos_token_id=1)
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    torch.manual_seed(0)
    with torch.device(device):  # initialise where it will run: 1.5B parameters take a minute on a CPU
        model = Qwen2ForCausalLM(config).to(dtype)
    model.save_pretrained(path, safe_serialization=True)
    tokenizer.save_pretrained(path)
    model.generation_config.save_pretrained(path)
    return path


def write_problems(folder: Path) -> tuple[Path, Path]:
    """MATH-shaped jsonl files (problem, answer) of synthetic sums: train, and a disjoint eval split."""
    from grpoctl.data import synthetic_examples

    paths = []
    for split in ("train", "eval"):
        rows = synthetic_examples(split, 512, seed=0, min_digits=2, max_digits=3, ops=("+", "*"), num_operands=2)
        path = folder / f"{split}.jsonl"
        path.write_text("".join(json.dumps({"problem": ex.question, "answer": ex.answer}) + "\n" for ex in rows))
        paths.append(path)
    return paths[0], paths[1]


# --------------------------------------------------------------------------- one preset


def preset_overrides(
    preset: str, model_dir: Path, train: Path, evals: Path, workdir: Path, steps: int, scale: str
) -> tuple[list[str], list[str]]:
    """(overrides for `grpoctl train experiments/PRESET.yaml`, notes on what differs from the preset)."""
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
    if scale == "cpu":
        overrides = CPU_OVERRIDES + overrides
    notes = []
    if preset_cfg.rollout.backend != "hf" and importlib.util.find_spec("vllm") is None:
        overrides.append("rollout.backend=hf")
        notes.append("vLLM is not installed: the hf backend generates (sleep/wake, weight sync: not measured)")
    if preset_cfg.optimizer.name == "adamw8bit" and importlib.util.find_spec("bitsandbytes") is None:
        overrides.append("optimizer.name=adamw")
        notes.append("bitsandbytes is not installed: AdamW instead of 8-bit AdamW (the estimate is for AdamW)")
    return overrides, notes


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
    except ImportError:
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
    with sqlite3.connect(db) as conn:
        rows = conn.execute(
            "SELECT m.name, m.value FROM metric m JOIN run r ON r.id = m.run_id "
            "WHERE r.name = ? AND m.opt_step IS NULL AND m.step > 0 ORDER BY m.step",
            (name,),
        ).fetchall()
    out: dict[str, list[float]] = {}
    for key, value in rows:
        out.setdefault(key, []).append(value)
    return out


def report(preset: str, cfg, metrics: dict, events: dict, notes: list[str], device: str) -> None:
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
    for note in notes:
        print(f"   note: {note}")
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
        print("   vLLM sleep/wake and weight sync: not measured (vLLM not installed)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", choices=["gpu", "cpu"], default=None, help="default: gpu when CUDA is visible")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--presets", default=",".join(PRESETS))
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--child", nargs=2, metavar=("PRESET", "TIMINGS"), help=argparse.SUPPRESS)
    parser.add_argument("overrides", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], args.overrides, Path(args.child[1]))
        return

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
        f"{model_dir} ({time.perf_counter() - started:.0f} s); device {torch.cuda.get_device_name() if device == 'cuda' else 'cpu'}"
    )

    from grpoctl.config import load_config

    for preset in args.presets.split(","):
        overrides, notes = preset_overrides(preset, model_dir, train, evals, workdir, args.steps, scale)
        db, timings = workdir / f"{preset}.db", workdir / f"{preset}-vllm.json"
        t0 = time.perf_counter()
        out = subprocess.run(
            [
                sys.executable,
                str(Path(__file__).resolve()),
                "--child",
                preset,
                str(timings),
                "--",
                *overrides,
                f"--db={db}",
            ],
            cwd=workdir,
            capture_output=True,
            text=True,
        )
        if out.returncode != 0:
            print(
                f"\n== {preset}: FAILED after {time.perf_counter() - t0:.0f} s\n{out.stdout[-2000:]}{out.stderr[-4000:]}"
            )
            raise SystemExit(1)
        cfg = load_config(REPO / "experiments" / f"{preset}.yaml", overrides)
        events = json.loads(timings.read_text()) if timings.exists() else {}
        report(preset, cfg, measured(db, preset), events, notes, device)
        print(f"   wall time of the run: {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
