"""THROWAWAY pilot: build a mixture warm-start for the lab task.

usage: python warmstart.py OUT_DIR --mix A --layers 2 --steps 3000 --save 1000,2000
Saves OUT_DIR/step-N (HF model dirs) and OUT_DIR/final; OUT_DIR/warmstart.json.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import time
from pathlib import Path

import torch

from grpoctl.grpo import collate_prompt_and_output_ids, get_response_log_probs, sft_microbatch_train_step
from grpoctl.tiny.model import build_model, save_model_dir
import os
if os.environ.get("LAB_TOK", "tags") in ("tags", "nums"):  # round 2: tags; round 3: tags + numbers 0-199 (lab_tok.py)
    from lab_tok import build_tokenizer
else:  # round 1: grpoctl's one-byte-per-token tokenizer
    from grpoctl.tiny.model import build_tokenizer

from lab_task import sft_example

MIXES = {
    # every level: half working, half direct; 10% wrong traces; 5% answered in the other format
    "A": dict(p_r1=0.5, p_work=0.5, p_wrong=0.10, p_cross=0.05),
    # more noise: 25% wrong traces, 10% cross-format
    # phase 1 of the curriculum: working only, all correct, both templates
    "W": dict(p_r1=0.5, p_work=1.0, p_wrong=0.0, p_cross=0.0),
    "B": dict(p_r1=0.5, p_work=0.5, p_wrong=0.25, p_cross=0.10),
    # round 2 phase 1: correct only, working on every level except half the L1 and L2 traces, which are direct
    # round 2 phase 2 variant: mixture A with the easy levels drawn more often (more direct-answer practice on L1/L2)
    "E": dict(p_r1=0.5, p_work=0.5, p_wrong=0.10, p_cross=0.05, level_weights=[3, 2, 1, 1, 1]),
    # round 2 phase 2 variant: mixture A with more working on the easy levels, where working is reliably right
    "F": dict(p_r1=0.5, p_work=[0.9, 0.8, 0.6, 0.5, 0.5], p_wrong=0.10, p_cross=0.05),
    # round 2: A with per-line slips (each working line off with p_slip, the chain continues from it) instead of
    # one wrong line in 10% of working traces; direct traces still wrong with p_wrong
    "S5": dict(p_r1=0.5, p_work=0.5, p_wrong=0.10, p_slip=0.05, p_cross=0.05),
    "S8": dict(p_r1=0.5, p_work=0.5, p_wrong=0.10, p_slip=0.08, p_cross=0.05),
    # round 3: S5 with direct answers on L1 wrong 3% instead of 10% (the all-right groups come from L1)
    "S5L": dict(p_r1=0.5, p_work=0.5, p_wrong=[0.03, 0.10, 0.10, 0.10, 0.10], p_slip=0.05, p_cross=0.05),
    # round 4: S5L with fewer working traces on the hard levels (more direct answers: entropy and all-wrong groups)
    "S5Lh": dict(p_r1=0.5, p_work=[0.5, 0.5, 0.5, 0.4, 0.3], p_wrong=[0.03, 0.10, 0.10, 0.10, 0.10], p_slip=0.05, p_cross=0.05),
    # round 4: S5L with working lines slipping at 8%
    "S8L": dict(p_r1=0.5, p_work=0.5, p_wrong=[0.03, 0.10, 0.10, 0.10, 0.10], p_slip=0.08, p_cross=0.05),
    "W1": dict(p_r1=0.5, p_work=[0.5, 0.5, 1.0, 1.0, 1.0], p_wrong=0.0, p_cross=0.0),
}
SIZES = {
    2: dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1, intermediate_size=512),
    4: dict(hidden_size=128, num_hidden_layers=4, num_attention_heads=2, num_key_value_heads=1, intermediate_size=512),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--mix", default="A")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--save", default="")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--init", default=None, help="continue from this model dir (phase 2)")
    ap.add_argument("--min_lr_ratio", type=float, default=0.1)
    a = ap.parse_args()
    torch.set_num_threads(1)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    mix = MIXES[a.mix]
    tok = build_tokenizer()
    if a.init:
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(a.init, dtype=torch.float32)
    else:
        model = build_model(tok, seed=a.seed, **SIZES[a.layers])
    nparams = sum(p.numel() for p in model.parameters())
    print(f"params {nparams}", flush=True)
    rng = random.Random(f"lab-warmstart:{a.mix}:{a.seed}:{a.init}")
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.95), weight_decay=0.0)
    save = {int(s) for s in a.save.split(",") if s}
    cpu0, t0 = time.process_time(), time.perf_counter()
    model.train()
    pending = []
    for step in range(1, a.steps + 1):
        if step <= a.warmup:
            lr = a.lr * step / a.warmup
        else:
            frac = (step - a.warmup) / max(1, a.steps - a.warmup)
            lr = a.lr * (a.min_lr_ratio + (1 - a.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * frac)))
        for g in opt.param_groups:
            g["lr"] = lr
        if not pending:  # length-bucketed batches: 8 batches drawn at once, sorted by length
            pool = sorted((sft_example(rng, mix) for _ in range(a.batch * 8)), key=lambda e: len(e[0]) + len(e[1]))
            pending = [pool[i : i + a.batch] for i in range(0, len(pool), a.batch)]
            rng.shuffle(pending)
        batch = pending.pop()
        ids = collate_prompt_and_output_ids(
            [tok(p, add_special_tokens=False).input_ids for p, _, _ in batch],
            [tok(r, add_special_tokens=False).input_ids + [tok.eos_token_id] for _, r, _ in batch],
            tok.pad_token_id,
        )
        lp = get_response_log_probs(model, ids["input_ids"], ids["labels"])["log_probs"]
        ntok = ids["response_mask"].sum(-1).float().mean().item()
        _, st = sft_microbatch_train_step(lp, ids["response_mask"], 1, normalize_constant=ntok)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step % 250 == 0 or step == 20:
            print(f"step {step} loss/token {st['loss']:.4f} lr {lr:.2e} cpu {time.process_time() - cpu0:.0f}s", flush=True)
        if step in save:
            save_model_dir(model, tok, out / f"step-{step}")
    save_model_dir(model, tok, out / "final")
    meta = dict(vars(a), mix_spec=mix, sizes=SIZES[a.layers], params=nparams,
                cpu_s=round(time.process_time() - cpu0, 1), wall_s=round(time.perf_counter() - t0, 1))
    (out / "warmstart.json").write_text(json.dumps(meta, indent=2))
    print(json.dumps(meta), flush=True)


if __name__ == "__main__":
    main()
