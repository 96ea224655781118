"""THROWAWAY pilot: the step-0 measures of issue 19 on one model dir.

usage: python p0_measure.py MODEL_DIR [--temp 1.0] [--json out.json]
64 train prompts (16 per level) x 8 samples at the training temperature, r1_zero_compact
template, graded by grpoctl's r1_zero_reward; greedy held-out on 512 eval problems
(128 per level) in r1_zero_compact and question_only.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics as st
import time

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from grpoctl.grpo import collate_prompt_and_output_ids, get_response_log_probs
from grpoctl.prompts import format_prompt, load_template
from grpoctl.rewards import question_only_reward, r1_zero_reward
from grpoctl.rollout.base import SamplingSettings
from grpoctl.rollout.hf import HFRolloutBackend

from lab_task import LEVELS, eval_problems, is_working, train_problems

MAX_TOKENS = 96


def step0_prompts(seed=0):
    rows = train_problems(4000, seed=seed)
    rng = random.Random(f"p0-batch:{seed}")
    rng.shuffle(rows)
    by = {lv: [r for r in rows if r["level"] == lv] for lv in LEVELS}
    order = list(reversed(LEVELS))  # 64 prompts, levels as even as possible, the hardest first
    return [by[order[i % len(order)]][i // len(order)] for i in range(64)]


@torch.no_grad()
def token_entropy(model, rollouts):
    tot, n = 0.0, 0
    for s in range(0, len(rollouts.response_ids), 64):
        ids = collate_prompt_and_output_ids(rollouts.prompt_ids[s : s + 64], rollouts.response_ids[s : s + 64], 0)
        out = get_response_log_probs(model, ids["input_ids"], ids["labels"], return_token_entropy=True)
        m = ids["response_mask"].float()
        tot += float((out["token_entropy"] * m).sum())
        n += int(m.sum())
    return tot / max(n, 1)


def pct(xs, q):
    xs = sorted(xs)
    k = (len(xs) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def measure(model_dir, temp=1.0, seed=0):
    cpu0 = time.process_time()
    torch.set_num_threads(1)
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32).eval()
    be = HFRolloutBackend(model, tok, batch_size=256)
    r1 = load_template("r1_zero_compact")
    qo = load_template("question_only")
    res = {"model": str(model_dir), "temperature": temp}

    # --- step-0 batch: 64 prompts x 8 samples
    probs = step0_prompts(seed)
    samp = SamplingSettings(temperature=temp, min_tokens=4, max_tokens=MAX_TOKENS, stop=("</answer>",))
    out = be.generate([format_prompt(r1, p["question"]) for p in probs], 8, samp, seed=seed)
    rows = []
    for i, (text, ids) in enumerate(zip(out.response_texts, out.response_ids)):
        p = probs[i // 8]
        sc = r1_zero_reward(text, p["answer"])
        rows.append(dict(level=p["level"], work=is_working(text), len=len(ids), fmt=sc["format_reward"],
                         right=sc["reward"], group=i // 8))
    groups = [rows[g * 8 : g * 8 + 8] for g in range(len(probs))]
    res["working_share"] = st.mean(r["work"] for r in rows)
    res["groups_mixing_style"] = st.mean(0 < sum(r["work"] for r in g) < 8 for g in groups)
    res["len_cv_mean"] = st.mean(st.pstdev([r["len"] for r in g]) / st.mean([r["len"] for r in g]) for g in groups)
    lens = [r["len"] for r in rows]
    res["len_p90_p10"] = pct(lens, 0.9) / pct(lens, 0.1)
    res["len_mean"] = st.mean(lens)
    res["truncated"] = st.mean(out.truncated)
    res["sampled_acc"] = st.mean(r["right"] for r in rows)
    res["sampled_format"] = st.mean(r["fmt"] for r in rows)
    res["groups_all_right"] = st.mean(all(r["right"] for r in g) for g in groups)
    res["groups_all_wrong"] = st.mean(not any(r["right"] for r in g) for g in groups)
    res["groups_mixed"] = 1 - res["groups_all_right"] - res["groups_all_wrong"]
    per = {}
    for level in LEVELS:
        lr = [r for r in rows if r["level"] == level]
        w = [r["right"] for r in lr if r["work"]]
        d = [r["right"] for r in lr if not r["work"]]
        per[level] = dict(work_rate=st.mean(r["work"] for r in lr), acc=st.mean(r["right"] for r in lr),
                          acc_work=st.mean(w) if w else None, n_work=len(w),
                          acc_direct=st.mean(d) if d else None, n_direct=len(d),
                          len=st.mean(r["len"] for r in lr))
    res["sampled_per_level"] = per
    top = per[LEVELS[-1]]
    res["hard_work_minus_direct"] = (
        (top["acc_work"] - top["acc_direct"]) if top["acc_work"] is not None and top["acc_direct"] is not None else None
    )
    res["token_entropy"] = token_entropy(model, out)

    # --- greedy held-out, both templates
    ev = eval_problems(128)
    g = SamplingSettings(greedy=True, min_tokens=1, max_tokens=MAX_TOKENS, stop=("</answer>",))
    for name, tmpl, fn in (("r1", r1, r1_zero_reward), ("qo", qo, question_only_reward)):
        o = be.generate([format_prompt(tmpl, p["question"]) for p in ev], 1, g, seed=0)
        sc = [fn(t, p["answer"]) for t, p in zip(o.response_texts, ev)]
        res[f"greedy_{name}_acc"] = st.mean(s["reward"] for s in sc)
        res[f"greedy_{name}_format"] = st.mean(s["format_reward"] for s in sc)
        res[f"greedy_{name}_working"] = st.mean(is_working(t) for t in o.response_texts)
        res[f"greedy_{name}_len"] = st.mean(len(i) for i in o.response_ids)
        res[f"greedy_{name}_per_level"] = {
            lv: st.mean(s["reward"] for s, p in zip(sc, ev) if p["level"] == lv) for lv in LEVELS
        }
        if name == "r1":
            # accuracy among well-formatted greedy responses
            f = [s["reward"] for s in sc if s["format_reward"]]
            res["greedy_r1_acc_given_format"] = st.mean(f) if f else 0.0
            res["greedy_r1_examples"] = o.response_texts[::128][:4]
    res["sampled_over_greedy"] = res["sampled_acc"] / max(res["greedy_r1_acc"], 1e-9)
    res["examples"] = out.response_texts[:: 8 * 16][:4] + out.response_texts[8 * 48 : 8 * 48 + 8]
    res["measure_cpu_s"] = round(time.process_time() - cpu0, 1)
    return res


GATES = [
    ("working_share", lambda v: 0.2 <= v <= 0.8, "20-80%"),
    ("groups_mixing_style", lambda v: v >= 0.4, ">=40%"),
    ("len_cv_mean", lambda v: v >= 0.15, ">=0.15"),
    ("len_p90_p10", lambda v: v >= 2, ">=2"),
    ("hard_work_minus_direct", lambda v: v is not None and v >= 0.15, ">=15pt"),
    ("sampled_over_greedy", lambda v: v >= 0.5, ">=0.5"),
    ("greedy_r1_acc", lambda v: 0.15 <= v <= 0.45, "15-45%"),
    ("token_entropy", lambda v: v >= 0.25, ">=0.25"),
    ("groups_all_right", lambda v: v >= 0.05, ">=5%"),
    ("groups_all_wrong", lambda v: v >= 0.05, ">=5%"),
    ("groups_mixed", lambda v: v >= 0.5, ">=50%"),
]


def summary(res):
    lines, ok = [], True
    for k, f, want in GATES:
        v = res[k]
        good = f(v)
        ok &= good
        lines.append(f"  {k:24s} {v if v is None else round(v, 3)!s:>8s}  {want:8s} {'PASS' if good else 'FAIL'}")
    lines.append(f"  greedy_r1_format {res['greedy_r1_format']:.3f}  sampled_format {res['sampled_format']:.3f}  "
                 f"greedy_qo_acc {res['greedy_qo_acc']:.3f} qo_format {res['greedy_qo_format']:.3f}  "
                 f"len_mean {res['len_mean']:.1f} trunc {res['truncated']:.3f}")
    lines.append(f"  ALL STEP-0 GATES: {'PASS' if ok else 'FAIL'}")
    return "\n".join(lines), ok


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("model_dirs", nargs="+")
    ap.add_argument("--temp", type=float, default=1.0)
    ap.add_argument("--json", default=None)
    ap.add_argument("--seeds", default="0", help="round 3: comma list of step-0 sampling/prompt seeds")
    a = ap.parse_args()
    allres = []
    for d in a.model_dirs:
      for sd in [int(x) for x in a.seeds.split(",")]:
        r = measure(d, a.temp, seed=sd)
        r["seed"] = sd
        text, ok = summary(r)
        r["all_pass"] = ok
        allres.append(r)
        print(f"== {d} (temp {a.temp}, seed {sd})\n{text}")
        print("  per level:", json.dumps(r["sampled_per_level"]))
        print("  greedy r1 per level:", r["greedy_r1_per_level"], " qo:", r["greedy_qo_per_level"])
        print("  examples:", r["examples"][:6])
        print(f"  measure cpu {r['measure_cpu_s']} s", flush=True)
    if a.json:
        with open(a.json, "a") as f:
            for r in allres:
                f.write(json.dumps(r) + "\n")
