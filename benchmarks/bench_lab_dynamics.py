"""Does the lab have GRPO's dynamics? Issue 19's measures and gates, over seeds.

    python benchmarks/bench_lab_dynamics.py                 # everything, seeds 0,1,2
    python benchmarks/bench_lab_dynamics.py --quick         # step 0 only, seed 0 (pilots)
    python benchmarks/bench_lab_dynamics.py --only step0,runs --seeds 0,1,2 --json out.jsonl

Parts (`--only`):
  step0   the base model's step-0 batch, per seed: 64 training prompts (levels as even as
          they go) x 8 samples at the training temperature, graded by the real r1_zero
          reward; and greedy on the 640 held-out problems in r1_zero and question_only.
  runs    a baseline run per seed (experiments/lab.yaml) until its plateau (the mean of
          the last 3 evals within 2 points of the 3 before; at most 300 steps)
  control a 100-step shuffled-reward control on the first seed
  probes  100-step probes on the first seed, lr x 3.3 and no_baseline: whether length
          and entropy can move (figures, not gates)
  sft     the SFT starts' step-0 signal (lab-sft@N; built on first use, ~3 CPU-min).

Issue 37's variants, each part printing its premise gates (docs/lab-pilots/README.md) per
pilot seed (`--variant-seeds`, default 1000,1001,1002; built on first use into `--cache`):
  long    lab-long's longer mode: the share of step-0 responses longer than 1.5x full working
  hard    lab-long on the hard levels 6-10, groups of 32: groups with 1-2 successes, pass rate
  direct  lab-direct@N: working share and levels 4-5 mixed groups fall as N grows
  boxed   lab-boxed: question_only greedy >= r1_zero + 10 points, r1_zero format >= 2%

Every figure is printed with its gate and PASS/FAIL; `--json` appends one row per part and
seed. Runs go to a registry of their own (--db). Run it on one pinned core
(`taskset -c 1`, OMP_NUM_THREADS=1): the figures are CPU-seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics as st
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from grpoctl.data.lab import HARD_LEVELS, LEVELS, lab_eval_examples, lab_train_examples, response_tokens, writes_working
from grpoctl.grpo import collate_prompt_and_output_ids, get_response_log_probs, success_count_shares
from grpoctl.prompts import format_prompt, load_template
from grpoctl.rewards import question_only_reward, r1_zero_reward
from grpoctl.rollout.base import SamplingSettings
from grpoctl.rollout.hf import HFRolloutBackend

REPO = Path(__file__).resolve().parents[1]
MAX_TOKENS = 96  # experiments/lab.yaml's rollout.max_tokens
LONG_MAX_TOKENS = 128  # grpoctl/configs/lab-hard.yaml's: room for a check pass
CACHE = [REPO / "outputs" / "cache"]  # where lab models are built on first use (--cache)
STOP = ("</answer>",)

STEP0_GATES = [
    ("working_share", lambda v: 0.2 <= v <= 0.8, "20-80%"),
    ("groups_mixing_style", lambda v: v >= 0.4, ">= 0.40"),
    ("len_cv_mean", lambda v: v >= 0.15, ">= 0.15"),
    ("len_p90_p10", lambda v: v >= 2, ">= 2"),
    ("hard_work_minus_direct", lambda v: v is not None and v >= 0.15, ">= 0.15"),
    ("sampled_over_greedy", lambda v: v >= 0.5, ">= 0.5"),
    ("greedy_r1_acc", lambda v: 0.15 <= v <= 0.45, "0.15-0.45"),
    ("token_entropy", lambda v: v >= 0.25, ">= 0.25"),
    ("groups_all_right", lambda v: v >= 0.05, ">= 0.05"),
    ("groups_all_wrong", lambda v: v >= 0.05, ">= 0.05"),
    ("groups_mixed", lambda v: v >= 0.5, ">= 0.50"),
]
RUN_GATES = [
    ("gain", lambda v: v >= 0.25, ">= 0.25"),
    ("gain_given_format", lambda v: v >= 0.15, ">= 0.15"),
    ("length_change", lambda v: abs(v) >= 0.20, "|x| >= 0.20"),
    ("worst_drop_below_best", lambda v: v <= 0.10, "<= 0.10"),
]


def load_model(path: str):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from grpoctl.tiny.lab_recipe import is_lab_path
    from grpoctl.warmstart.lab import resolve_lab_model

    model_dir = resolve_lab_model(path, CACHE[0]) if is_lab_path(path) else Path(path)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    return model, tokenizer


def step0_problems(seed: int, n: int = 64, levels: tuple[int, ...] = LEVELS):
    """`n` training problems of `levels`, as even as they go, the hardest first."""
    rows = lab_train_examples(4000, seed=seed, levels=levels)
    random.Random(f"p0-batch:{seed}").shuffle(rows)
    by_level = {level: [r for r in rows if r.level == level] for level in levels}
    order = list(reversed(levels))
    return [by_level[order[i % len(order)]][i // len(order)] for i in range(n)]


@torch.no_grad()
def token_entropy(model, rollouts) -> float:
    total, count = 0.0, 0
    for s in range(0, len(rollouts.response_ids), 64):
        ids = collate_prompt_and_output_ids(rollouts.prompt_ids[s : s + 64], rollouts.response_ids[s : s + 64], 0)
        out = get_response_log_probs(model, ids["input_ids"], ids["labels"], return_token_entropy=True)
        mask = ids["response_mask"].float()
        total += float((out["token_entropy"] * mask).sum())
        count += int(mask.sum())
    return total / max(count, 1)


def percentile(xs, q):
    xs = sorted(xs)
    k = (len(xs) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def sample(model, tokenizer, problems, seed: int, group: int = 8, max_tokens: int = MAX_TOKENS):
    """`group` samples of each problem at temperature 1 in r1_zero, graded: (rows, rollouts)."""
    backend = HFRolloutBackend(model, tokenizer, batch_size=256)
    template = load_template("r1_zero_compact")
    sampling = SamplingSettings(temperature=1.0, min_tokens=4, max_tokens=max_tokens, stop=STOP)
    out = backend.generate([format_prompt(template, p.question) for p in problems], group, sampling, seed=seed)
    rows = []
    for i, (text, ids) in enumerate(zip(out.response_texts, out.response_ids, strict=True)):
        p = problems[i // group]
        score = r1_zero_reward(text, p.answer)
        rows.append(
            dict(
                level=p.level,
                work=writes_working(text),
                len=len(ids),
                fmt=score["format_reward"],
                right=score["reward"],
            )
        )
    return rows, out


def sampled_measures(model, tokenizer, seed: int, n_prompts: int = 64, max_tokens: int = MAX_TOKENS) -> dict:
    """The step-0 batch: working, length, groups and entropy (64 prompts x 8 samples)."""
    problems = step0_problems(seed, n_prompts)
    rows, out = sample(model, tokenizer, problems, seed, max_tokens=max_tokens)
    groups = [rows[g * 8 : g * 8 + 8] for g in range(len(problems))]
    lengths = [r["len"] for r in rows]
    res = {
        "working_share": st.mean(r["work"] for r in rows),
        "groups_mixing_style": st.mean(0 < sum(r["work"] for r in g) < 8 for g in groups),
        "len_cv_mean": st.mean(st.pstdev([r["len"] for r in g]) / st.mean([r["len"] for r in g]) for g in groups),
        "len_p90_p10": percentile(lengths, 0.9) / percentile(lengths, 0.1),
        "len_mean": st.mean(lengths),
        # more than one pass of working (lab-long's longer mode): 1.5x a pass and its answer
        "longer_than_1.5x_working": st.mean(r["len"] > 1.5 * response_tokens(r["level"]) for r in rows),
        "truncated": st.mean(out.truncated),
        "sampled_acc": st.mean(r["right"] for r in rows),
        "sampled_format": st.mean(r["fmt"] for r in rows),
        "groups_all_right": st.mean(all(r["right"] for r in g) for g in groups),
        "groups_all_wrong": st.mean(not any(r["right"] for r in g) for g in groups),
    }
    res["groups_mixed"] = 1 - res["groups_all_right"] - res["groups_all_wrong"]
    res["pass_at_8"] = 1 - res["groups_all_wrong"]
    per_level = {}
    for level in LEVELS:
        at = [r for r in rows if r["level"] == level]
        work = [r["right"] for r in at if r["work"]]
        direct = [r["right"] for r in at if not r["work"]]
        per_level[level] = dict(
            work_rate=st.mean(r["work"] for r in at),
            acc=st.mean(r["right"] for r in at),
            acc_work=st.mean(work) if work else None,
            acc_direct=st.mean(direct) if direct else None,
            len=st.mean(r["len"] for r in at),
        )
    res["sampled_per_level"] = per_level
    top = per_level[LEVELS[-1]]
    both = top["acc_work"] is not None and top["acc_direct"] is not None
    res["hard_work_minus_direct"] = top["acc_work"] - top["acc_direct"] if both else None
    res["token_entropy"] = token_entropy(model, out)
    return res


def greedy_measures(model, tokenizer) -> dict:
    """Greedy on the 640 held-out problems in both formats, with per-level working and length."""
    backend = HFRolloutBackend(model, tokenizer, batch_size=256)
    problems = lab_eval_examples()
    sampling = SamplingSettings(greedy=True, min_tokens=1, max_tokens=MAX_TOKENS, stop=STOP)
    res = {}
    for name, template, grade in (
        ("r1", "r1_zero_compact", r1_zero_reward),
        ("qo", "question_only", question_only_reward),
    ):
        out = backend.generate(
            [format_prompt(load_template(template), p.question) for p in problems], 1, sampling, seed=0
        )
        scores = [grade(t, p.answer) for t, p in zip(out.response_texts, problems, strict=True)]
        res[f"greedy_{name}_acc"] = st.mean(s["reward"] for s in scores)
        res[f"greedy_{name}_format"] = st.mean(s["format_reward"] for s in scores)
        formatted = [s["reward"] for s in scores if s["format_reward"]]
        res[f"greedy_{name}_acc_given_format"] = st.mean(formatted) if formatted else 0.0
        res[f"greedy_{name}_per_level"] = {
            level: dict(
                acc=st.mean(s["reward"] for s, p in zip(scores, problems, strict=True) if p.level == level),
                work_rate=st.mean(
                    writes_working(t) for t, p in zip(out.response_texts, problems, strict=True) if p.level == level
                ),
                len=st.mean(len(i) for i, p in zip(out.response_ids, problems, strict=True) if p.level == level),
            )
            for level in LEVELS
        }
    return res


def judge(res: dict, gates) -> tuple[list[str], bool]:
    lines, ok = [], True
    for key, passes, want in gates:
        value = res.get(key)
        good = value is not None and passes(value)
        ok &= good
        shown = "-" if value is None else f"{value:.3f}"
        lines.append(f"  {key:26s} {shown:>8s}  {want:12s} {'PASS' if good else 'FAIL'}")
    return lines, ok


def step0(model_path: str, seeds: list[int], emit) -> bool:
    model, tokenizer = load_model(model_path)
    cpu = time.process_time()
    greedy = greedy_measures(model, tokenizer)
    print(f"greedy held-out (640 problems, {time.process_time() - cpu:.0f} CPU-s):")
    print(
        f"  r1_zero acc {greedy['greedy_r1_acc']:.3f} format {greedy['greedy_r1_format']:.3f}; "
        f"question_only acc {greedy['greedy_qo_acc']:.3f} format {greedy['greedy_qo_format']:.3f}"
    )
    testable = greedy["greedy_qo_acc"] >= greedy["greedy_r1_acc"] + 0.10 and greedy["greedy_r1_format"] >= 0.02
    print(
        f"  the prompt study is {'testable' if testable else 'NOT testable'} "
        "(question_only >= r1_zero + 10 points and r1_zero format >= 2%)"
    )
    all_ok = True
    for seed in seeds:
        cpu = time.process_time()
        res = greedy | sampled_measures(model, tokenizer, seed)
        res["sampled_over_greedy"] = res["sampled_acc"] / max(res["greedy_r1_acc"], 1e-9)
        lines, ok = judge(res, STEP0_GATES)
        all_ok &= ok
        print(
            f"step 0, seed {seed} ({time.process_time() - cpu:.0f} CPU-s): {'every gate holds' if ok else 'a gate FAILS'}"
        )
        print("\n".join(lines))
        print(
            f"  reported: sampled acc {res['sampled_acc']:.3f}, format {res['sampled_format']:.3f}, "
            f"mean length {res['len_mean']:.1f} tokens, truncated {res['truncated']:.3f}"
        )
        emit({"part": "step0", "model": model_path, "seed": seed, "all_pass": ok, **res})
    return all_ok


# -- runs --------------------------------------------------------------------------------


def plateau_step(evals: list[tuple[int, float]]) -> int | None:
    """The step where the mean of the last 3 evals comes within 2 points of the 3 before."""
    for end in range(6, len(evals) + 1):
        last, before = evals[end - 3 : end], evals[end - 6 : end - 3]
        if abs(st.mean(a for _, a in last) - st.mean(a for _, a in before)) <= 0.02:
            return evals[end - 1][0]
    return None


def train_until(db: Path, name: str, overrides: list[str], stop_at_plateau: bool) -> dict:
    """A `grpoctl train experiments/lab.yaml` run; with stop_at_plateau, ctrl-c at the plateau."""
    from grpoctl.registry import Registry

    cmd = [sys.executable, "-m", "grpoctl", "train", str(REPO / "experiments/lab.yaml"), f"name={name}",
           "logging.live=false", "runtime.threads=1", f"--db={db}", *overrides]  # fmt: skip
    cpu0 = os.times()
    child = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    run_id, plateau, seen = None, None, 0
    while child.poll() is None:
        time.sleep(2)
        if not db.exists():
            continue
        with Registry(str(db), must_exist=True, readonly=True) as registry:
            if run_id is None:
                runs = [r for r in registry.list_runs() if r.name == name]
                run_id = runs[0].id if runs else None
            evals = [(e.step, e.accuracy) for e in registry.evals(run_id)] if run_id else []
        if len(evals) > seen:
            seen = len(evals)
            print(f"    {name}: eval at step {evals[-1][0]}: {evals[-1][1]:.3f}", flush=True)
            plateau = plateau_step(evals)
            if stop_at_plateau and plateau is not None:
                child.send_signal(signal.SIGINT)  # finish the step, checkpoint, stop
                break
    _, err = child.communicate()
    cpu1 = os.times()
    if child.returncode not in (0, 130) and not (stop_at_plateau and plateau is not None):
        raise SystemExit(f"{name} failed ({child.returncode}): {err[-1500:]}")
    with Registry(str(db), must_exist=True, readonly=True) as registry:
        run = [r for r in registry.list_runs() if r.name == name][0]
        evals = registry.evals(run.id)
        checkpoints = registry.checkpoints(run.id)
        steps = registry.metric_series(run.id, ["train/token_entropy", "time/step"])
    return {
        "evals": [(e.step, e.accuracy, e.format_rate, e.mean_response_length) for e in evals],
        "plateau_step": plateau,
        "checkpoint": checkpoints[-1].path if checkpoints else None,
        "entropy": steps.get("train/token_entropy", []),
        "cpu_s": round(cpu1.children_user + cpu1.children_system - cpu0.children_user - cpu0.children_system, 1),
        "steps": len(steps.get("time/step", [])),
    }


def run_measures(run: dict) -> dict:
    evals = run["evals"]
    start, tail = evals[0], evals[-3:]
    end_acc = st.mean(e[1] for e in tail)

    def given_format(e):
        return e[1] / e[2] if e[2] else 0.0

    best, worst_drop = 0.0, 0.0
    for e in evals:
        best = max(best, e[1])
        worst_drop = max(worst_drop, best - e[1])
    return {
        "start_acc": start[1],
        "end_acc": end_acc,
        "gain": end_acc - start[1],
        "gain_given_format": st.mean(given_format(e) for e in tail) - given_format(start),
        "start_len": start[3],
        "end_len": st.mean(e[3] for e in tail),
        "length_change": st.mean(e[3] for e in tail) / start[3] - 1,
        "worst_drop_below_best": worst_drop,
    }


def runs(seeds: list[int], db: Path, emit, extra: list[str]) -> bool:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    all_ok = True
    start = greedy_measures(*load_model("lab"))["greedy_r1_per_level"]
    print(
        "  at step 0, per level (greedy working rate, length): "
        + "  ".join(f"L{lv} {start[lv]['work_rate']:.2f} {start[lv]['len']:.1f}" for lv in LEVELS)
    )
    for seed in seeds:
        name = f"labdyn-base-s{seed}-{stamp}"
        print(f"  baseline, seed {seed} (until its plateau, at most 300 steps):", flush=True)
        overrides = [f"seed={seed}", "loop.n_grpo_steps=300", "eval.every=5", *extra]
        run = train_until(db, name, overrides, stop_at_plateau=True)
        res = run_measures(run)
        lines, ok = judge(res, RUN_GATES)
        ok &= run["plateau_step"] is not None
        all_ok &= ok
        print(
            f"baseline seed {seed}: plateau at step {run['plateau_step']}, {run['steps']} steps, "
            f"{run['cpu_s']:.0f} CPU-s ({run['cpu_s'] / max(run['steps'], 1):.2f} CPU-s/step with evals)"
        )
        print("\n".join(lines))
        print(
            f"  reported: accuracy {res['start_acc']:.3f} -> {res['end_acc']:.3f}, "
            f"length {res['start_len']:.1f} -> {res['end_len']:.1f} tokens"
        )
        if run["checkpoint"]:
            model, tokenizer = load_model(run["checkpoint"])
            res["end_greedy"] = greedy_measures(model, tokenizer)
            per = res["end_greedy"]["greedy_r1_per_level"]
            print(
                "  at the end, per level (working rate, length): "
                + "  ".join(f"L{lv} {per[lv]['work_rate']:.2f} {per[lv]['len']:.1f}" for lv in LEVELS)
            )
        emit({"part": "run", "seed": seed, "extra": extra, "all_pass": ok, **res, **run})
    return all_ok


def control(seed: int, db: Path, emit, extra: list[str]) -> bool:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    name = f"labdyn-shuffled-s{seed}-{stamp}"
    print(f"  shuffled-reward control, seed {seed}, 100 steps:", flush=True)
    overrides = [f"seed={seed}", "loop.n_grpo_steps=100", "eval.every=10", "reward.shuffled_control=true", *extra]
    run = train_until(db, name, overrides, stop_at_plateau=False)
    res = run_measures(run)
    best_gain = max(e[1] for e in run["evals"]) - run["evals"][0][1]
    ok = res["gain"] <= 0.02
    print(
        f"shuffled control: gain {res['gain']:+.3f} (<= 0.02: {'PASS' if ok else 'FAIL'}); best eval "
        f"{best_gain:+.3f} over step 0; length {res['start_len']:.1f} -> {res['end_len']:.1f}"
    )
    emit({"part": "shuffled", "seed": seed, "extra": extra, "all_pass": ok, "best_gain": best_gain, **res, **run})
    return ok


def probes(seed: int, db: Path, emit, extra: list[str]) -> None:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    from grpoctl.config import load_config

    lr = load_config(str(REPO / "experiments/lab.yaml"), []).optimizer.lr
    for label, override in (
        ("lr x 3.3", f"optimizer.lr={lr * 3.3:.3g}"),
        ("no_baseline", "loss.loss_type=no_baseline"),
    ):
        name = f"labdyn-probe-{override.split('=')[1]}-s{seed}-{stamp}"
        print(f"  probe {label}, seed {seed}, 100 steps:", flush=True)
        overrides = [f"seed={seed}", "loop.n_grpo_steps=100", "eval.every=10", *extra, override]
        run = train_until(db, name, overrides, False)
        res = run_measures(run)
        entropy = [v for _, v in run["entropy"]]
        print(
            f"probe {label}: accuracy {res['start_acc']:.3f} -> best {max(e[1] for e in run['evals']):.3f} -> "
            f"{run['evals'][-1][1]:.3f} at the end; length {res['start_len']:.1f} -> {run['evals'][-1][3]:.1f}; "
            f"train entropy {entropy[0]:.3f} -> {entropy[-1]:.3f}"
        )
        emit({"part": "probe", "probe": label, "seed": seed, **res, **run})


def sft(seed: int, emit) -> bool:
    from grpoctl.tiny.lab_recipe import LAB_BASE, LAB_SFT, SFT_STEPS

    all_ok = True
    for path in [LAB_BASE, *(f"{LAB_SFT}@{n}" for n in SFT_STEPS)]:
        model, tokenizer = load_model(path)
        res = sampled_measures(model, tokenizer, seed)
        ok = path == LAB_BASE or res["groups_mixed"] >= 0.20
        all_ok &= ok
        print(
            f"{path:14s} mixed groups {res['groups_mixed']:.3f} (>= 0.20: {'PASS' if ok else 'FAIL'}), "
            f"entropy {res['token_entropy']:.3f}, pass@8 {res['pass_at_8']:.3f}, "
            f"working {res['working_share']:.2f}, sampled acc {res['sampled_acc']:.3f}"
        )
        emit({"part": "sft", "model": path, "seed": seed, "all_pass": ok, **res})
    return all_ok


# -- issue 37's variants: their premise gates (docs/lab-pilots/README.md) -----------------


def gate_line(name: str, value: float, good: bool, want: str) -> str:
    return f"  {name:26s} {value:8.3f}  {want:12s} {'PASS' if good else 'FAIL'}"


def long_mode(seeds: list[int], emit) -> bool:
    """L1: 5-40% of step-0 responses are longer than 1.5x full working (lab-long, max 128 tokens)."""
    model, tokenizer = load_model("lab-long")
    all_ok = True
    for seed in seeds:
        res = sampled_measures(model, tokenizer, seed, max_tokens=LONG_MAX_TOKENS)
        long_share = res["longer_than_1.5x_working"]
        ok = 0.05 <= long_share <= 0.40
        all_ok &= ok
        sampled_gates = [g for g in STEP0_GATES if g[0] not in ("greedy_r1_acc", "sampled_over_greedy")]
        lines, lab_ok = judge(res, sampled_gates)
        print(f"lab-long, seed {seed}: longer mode {'PASS' if ok else 'FAIL'}")
        print(gate_line("longer_than_1.5x_working", long_share, ok, "0.05-0.40"))
        print(
            f"  reported: mean length {res['len_mean']:.1f} tokens, truncated {res['truncated']:.3f}, "
            f"issue 19's sampled gates {'hold' if lab_ok else 'do not all hold'}:"
        )
        print("\n".join(lines))
        emit({"part": "long", "model": "lab-long", "seed": seed, "all_pass": ok, "long_share": long_share, **res})
    return all_ok


def hard_levels(seeds: list[int], emit) -> bool:
    """H1: >= 20% of hard-level groups have 1 or 2 successes of 32; H2: pass rate 1-10% (lab-long)."""
    model, tokenizer = load_model("lab-long")
    all_ok = True
    for seed in seeds:
        cpu = time.process_time()
        problems = step0_problems(seed, 8 * len(HARD_LEVELS), HARD_LEVELS)
        rows, _ = sample(model, tokenizer, problems, seed, group=32, max_tokens=LONG_MAX_TOKENS)
        shares = success_count_shares(torch.tensor([bool(r["right"]) for r in rows]), 32)
        pass_rate = st.mean(r["right"] for r in rows)
        h1, h2 = shares["rare"] >= 0.20, 0.01 <= pass_rate <= 0.10
        all_ok &= h1 and h2
        per_level = {lv: st.mean(r["right"] for r in rows if r["level"] == lv) for lv in HARD_LEVELS}
        print(f"lab-long hard levels, seed {seed} ({time.process_time() - cpu:.0f} CPU-s), 40 groups of 32:")
        print(gate_line("groups_1_or_2_of_32", shares["rare"], h1, ">= 0.20"))
        print(gate_line("sampled_pass_rate", pass_rate, h2, "0.01-0.10"))
        print(
            f"  reported: groups with >= 31 of 32 {shares['near_all']:.3f}, working {st.mean(r['work'] for r in rows):.3f}, "
            "per level " + " ".join(f"L{lv} {a:.3f}" for lv, a in per_level.items())
        )
        emit({"part": "hard", "model": "lab-long", "seed": seed, "all_pass": h1 and h2, "pass_rate": pass_rate,
              "groups_rare": shares["rare"], "groups_near_all": shares["near_all"], "per_level": per_level})  # fmt: skip
    return all_ok


def falls(values: list[float]) -> bool:
    return all(b < a for a, b in zip(values, values[1:], strict=False))


def direct_sft(seeds: list[int], emit) -> bool:
    """D1, D2: working share and levels 4-5 mixed groups fall as N grows (lab, lab-direct@N)."""
    from grpoctl.tiny.lab_recipe import DIRECT_STEPS, LAB_BASE, LAB_DIRECT

    paths = [LAB_BASE, *(f"{LAB_DIRECT}@{n}" for n in DIRECT_STEPS)]
    measured = {seed: {"work": [], "mixed45": []} for seed in seeds}
    for path in paths:
        model, tokenizer = load_model(path)
        for seed in seeds:
            rows, _ = sample(model, tokenizer, step0_problems(seed), seed)
            hard = step0_problems(seed, 64, (4, 5))
            rows45, _ = sample(model, tokenizer, hard, seed)
            groups = [rows45[g * 8 : g * 8 + 8] for g in range(len(hard))]
            measured[seed]["work"].append(st.mean(r["work"] for r in rows))
            measured[seed]["mixed45"].append(st.mean(0 < sum(r["right"] for r in g) < 8 for g in groups))
    all_ok = True
    for seed, m in measured.items():
        d1, d2 = falls(m["work"]), falls(m["mixed45"])
        all_ok &= d1 and d2
        print(f"lab-direct@N, seed {seed} ({', '.join(paths)}):")
        for name, key, ok in (("working share", "work", d1), ("L4-5 mixed groups", "mixed45", d2)):
            shown = " > ".join(f"{v:.3f}" for v in m[key])
            print(f"  {name:20s} {shown}  falls as N grows  {'PASS' if ok else 'FAIL'}")
        emit({"part": "direct", "seed": seed, "all_pass": d1 and d2, "models": paths, **m})
    return all_ok


def boxed_start(seeds: list[int], emit) -> bool:
    """B1: question_only greedy >= r1_zero greedy + 10 points; B2: sampled r1_zero format >= 2% (lab-boxed)."""
    model, tokenizer = load_model("lab-boxed")
    greedy = greedy_measures(model, tokenizer)
    gap = greedy["greedy_qo_acc"] - greedy["greedy_r1_acc"]
    b1 = gap >= 0.10 - 1e-9  # ten points, not one float rounding less
    print(
        f"lab-boxed greedy (640 held-out): question_only {greedy['greedy_qo_acc']:.3f}, r1_zero "
        f"{greedy['greedy_r1_acc']:.3f} (format {greedy['greedy_r1_format']:.3f})"
    )
    print(gate_line("qo_minus_r1_greedy", gap, b1, ">= 0.10"))
    all_ok = b1
    for seed in seeds:
        rows, _ = sample(model, tokenizer, step0_problems(seed), seed)
        fmt = st.mean(r["fmt"] for r in rows)
        all_ok &= fmt >= 0.02
        print(gate_line(f"r1_format_sampled seed {seed}", fmt, fmt >= 0.02, ">= 0.02"))
        emit({"part": "boxed", "seed": seed, "all_pass": b1 and fmt >= 0.02, "r1_format_sampled": fmt, **greedy})
    return all_ok


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="lab", help="lab, lab-sft@N or a model directory (step 0)")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--variant-seeds", default="1000,1001,1002", help="pilot seeds of issue 37's parts")
    parser.add_argument("--cache", default=str(CACHE[0]), help="where lab models are built on first use")
    parser.add_argument("--only", default="step0,runs,control,probes,sft")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="an override for every run")
    parser.add_argument("--quick", action="store_true", help="step 0 on seed 0 only")
    parser.add_argument("--db", default=None, help="registry for the runs (default: a new one in a temp dir)")
    parser.add_argument("--json", default=None, help="append one JSON row per part and seed")
    args = parser.parse_args()
    torch.set_num_threads(1)
    seeds = [0] if args.quick else [int(s) for s in args.seeds.split(",")]
    variant_seeds = [int(s) for s in args.variant_seeds.split(",")]
    CACHE[0] = Path(args.cache)
    parts = ["step0"] if args.quick else args.only.split(",")

    def emit(row):
        if args.json:
            with open(args.json, "a") as f:
                f.write(json.dumps(row, default=str) + "\n")

    verdicts = {}
    if "step0" in parts:
        verdicts["step0"] = step0(args.model, seeds, emit)
    if args.db is None:
        args.db = str(Path(tempfile.mkdtemp(prefix="labdyn-")) / "registry.db")
    if "runs" in parts:
        db = Path(args.db)
        print(f"runs (registry {db}):")
        verdicts["runs"] = runs(seeds, db, emit, args.set)
    if "control" in parts:
        verdicts["control"] = control(seeds[0], Path(args.db), emit, args.set)
    if "probes" in parts:
        probes(seeds[0], Path(args.db), emit, args.set)
    if "sft" in parts:
        verdicts["sft"] = sft(seeds[0], emit)
    for part, measure in (("long", long_mode), ("hard", hard_levels), ("direct", direct_sft), ("boxed", boxed_start)):
        if part in parts:
            verdicts[part] = measure(variant_seeds, emit)
    print("verdict: " + ", ".join(f"{k} {'PASS' if v else 'FAIL'}" for k, v in verdicts.items()))


if __name__ == "__main__":
    main()
