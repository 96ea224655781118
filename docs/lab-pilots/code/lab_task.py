"""THROWAWAY pilot code (issue 19, P0/P1): the lab task generator and warm-start traces.

Task: chains of + and - over 2..5 operands of 1-2 digits (partial results stay >= 0,
so they have 1-3 digits). Level = number of operands - 1 (L1: 2 operands ... L4: 5).
Working = one line per partial result ("37+45=82 82-19=63"); direct = just the answer.

Formats: r1_zero_compact prompt -> " [working ]</think> <answer>N</answer>";
question_only prompt (just the question) -> " [working ]\\boxed{N}".
Held-out split: grpoctl.data.synthetic.split_of(question) (sha256, 10% eval).
"""

from __future__ import annotations

import json
import random

from grpoctl.data.synthetic import split_of

import os

# TASK v1: every operand 1..99, levels 1-4 = 2..5 operands (failed: too slow to learn, see REPORT.md)
# TASK v2: first operand 10..99, the others 1..9, levels 1-5 = 2..6 operands
TASK = os.environ.get("LAB_TASK", "v2")
LEVELS = (1, 2, 3, 4) if TASK == "v1" else (1, 2, 3, 4, 5)
R1 = "User: {question}\nAssistant: <think>"
QO = "{question}"


def make_problem(rng: random.Random, level: int):
    """operands, operators with all partial results >= 0."""
    n = level + 1
    ops_, vals = [], [rng.randint(1, 99) if TASK == "v1" else rng.randint(10, 99)]
    acc = vals[0]
    for _ in range(n - 1):
        v = rng.randint(1, 99) if TASK == "v1" else rng.randint(1, 9)
        op = rng.choice("+-")
        if op == "-" and acc - v < 0:
            op = "+"
        acc = acc + v if op == "+" else acc - v
        ops_.append(op)
        vals.append(v)
    q = str(vals[0]) + "".join(o + str(v) for o, v in zip(ops_, vals[1:]))
    return q, vals, ops_, acc


def draw(rng: random.Random, split: str, level: int):
    while True:
        q, vals, ops_, ans = make_problem(rng, level)
        if split_of(q) == split:
            return q, vals, ops_, ans


def _perturb(rng, x):
    d = rng.choice([1, 1, 2, 10, -1, -1, -2, -10, 3, -3])
    y = x + d
    return y if y >= 0 and y != x else x + 1


def working_lines(vals, ops_, rng=None, wrong=False, p_slip=0.0):
    """The partial results; if wrong, one of them is off and the chain continues from it.
    Round 2: with p_slip > 0 each line is instead off independently with probability p_slip."""
    bad = rng.randrange(len(ops_)) if wrong else -1
    acc, lines = vals[0], []
    for i, (o, v) in enumerate(zip(ops_, vals[1:])):
        res = acc + v if o == "+" else acc - v
        if i == bad or (p_slip and rng.random() < p_slip):
            res = _perturb(rng, res)
        lines.append(f"{acc}{o}{v}={res}")
        acc = res
    return lines, acc


def response(fmt: str, lines, answer) -> str:
    work = (" " + " ".join(lines)) if lines else ""
    if fmt == "r1":
        return f"{work} </think> <answer>{answer}</answer>"
    return f"{work} \\boxed{{{answer}}}"


def sft_example(rng: random.Random, mix: dict, split: str = "train"):
    """(prompt, response, meta) for one warm-start trace drawn from mixture `mix`:
    p_r1 (share of r1_zero prompts), p_work (share with working, per level list or float),
    p_wrong (share with a wrong result), p_cross (share answered in the other template's format),
    level_weights."""
    level = rng.choices(LEVELS, weights=mix.get("level_weights", [1] * len(LEVELS)))[0]
    q, vals, ops_, ans = draw(rng, split, level)
    pw = mix["p_work"]
    pw = pw[level - 1] if isinstance(pw, (list, tuple)) else pw
    work = rng.random() < pw
    pwr = mix["p_wrong"]  # round 3: a float, or a list by level
    pwr = pwr[level - 1] if isinstance(pwr, (list, tuple)) else pwr
    wrong = rng.random() < pwr
    if work:
        if mix.get("p_slip"):  # round 2: per-line slips in working traces; p_wrong then applies to direct traces only
            lines, final = working_lines(vals, ops_, rng, False, mix["p_slip"])
            wrong = final != ans
        else:
            lines, final = working_lines(vals, ops_, rng, wrong)
    else:
        lines, final = [], (_perturb(rng, ans) if wrong else ans)
    tmpl = "r1" if rng.random() < mix["p_r1"] else "qo"
    fmt = tmpl if rng.random() >= mix["p_cross"] else ("qo" if tmpl == "r1" else "r1")
    prompt = (R1 if tmpl == "r1" else QO).replace("{question}", q)
    return prompt, response(fmt, lines, final), dict(level=level, work=work, wrong=wrong, tmpl=tmpl, fmt=fmt)


def eval_problems(n_per_level: int, seed: int = 1234):
    rng = random.Random(f"lab-eval:{seed}")
    out, seen = [], set()
    for level in LEVELS:
        k = 0
        while k < n_per_level:
            q, vals, ops_, ans = draw(rng, "eval", level)
            if q in seen:
                continue
            seen.add(q)
            out.append(dict(id=f"L{level}:{q}", question=q, answer=str(ans), level=level))
            k += 1
    return out


def train_problems(n: int, seed: int = 0):
    """Levels uniform; problems drawn with replacement (L1 has only ~1,460 train problems)."""
    rng = random.Random(f"lab-train:{seed}")
    out = []
    for i in range(n):
        level = LEVELS[i % len(LEVELS)]
        q, vals, ops_, ans = draw(rng, "train", level)
        out.append(dict(id=f"L{level}:{q}#{i}", question=q, answer=str(ans), level=level))
    rng.shuffle(out)
    return out


def is_working(resp: str) -> bool:
    head = resp.split("</think>")[0].split("\\boxed")[0]
    return "=" in head


def write_jsonl(rows, path):
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    rng = random.Random(0)
    for mixname in ["A"]:
        mix = dict(p_r1=0.5, p_work=0.5, p_wrong=0.1, p_cross=0.05)
        for _ in range(12):
            p, r, m = sft_example(rng, mix)
            print(repr(p), repr(r), m)
