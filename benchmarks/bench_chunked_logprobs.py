"""Chunked log-probs against the full logits: peak memory over forward and backward, and the lab's s/step.

Memory: one forward and backward of `get_response_log_probs` (log-probs, and the entropy
without gradient, as a training microbatch asks) at Qwen2.5-Math-1.5B's head size: a
Qwen2 model with no decoder layers (embedding, final norm, LM head: hidden 1536,
vocabulary 151,936, untied, the embedding frozen), one row of 4,096 tokens, fp32 on CPU. Each mode runs in its own
process, which reports its resident-set high-water mark (VmHWM) above its resident set
just before the forward (model, gradient-free inputs and torch loaded): torch's CPU
allocator keeps no statistics, and tracemalloc does not see its allocations. The issue's
goal: with chunking, the peak is at least 40% of the logits term (4,096 x 151,936 x 4 B,
2.49 GB) below the peak without it.

s/step: `grpoctl train` on the lab (the embedded default) for a few steps, with and
without chunking, through benchmarks/bench_default_run.py (its median s/step), each run
pinned to one core with one torch thread.

    python benchmarks/bench_chunked_logprobs.py [--tokens 4096] [--chunks 0,512,1024] [--threads 2]
    python benchmarks/bench_chunked_logprobs.py --lab-steps 5 [--lab-chunk 1024] [--cpu 1]
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HIDDEN, VOCAB = 1536, 151_936  # Qwen2.5-Math-1.5B


def rss_bytes(field: str) -> int:
    """VmRSS or VmHWM of this process, in bytes."""
    status = Path("/proc/self/status").read_text()
    match = re.search(rf"^{field}:\s+(\d+) kB", status, re.MULTILINE)
    assert match, field
    return int(match.group(1)) * 1024


def one_mode(tokens: int, chunk: int, threads: int) -> dict:
    """Runs in a child process: one forward and backward, and its memory high-water mark."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from grpoctl.grpo import get_response_log_probs

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        intermediate_size=HIDDEN,
        num_hidden_layers=0,
        num_attention_heads=12,
        num_key_value_heads=2,
        tie_word_embeddings=False,
        max_position_embeddings=tokens,
    )
    model = Qwen2ForCausalLM(config)
    # The embedding is frozen so that only the head's gradient is in play (a tied embedding's
    # dense gradient would be another vocabulary x hidden tensor, the same in both modes). A
    # small final-norm gain spreads the probabilities (at init the logit of the input token
    # itself is ~30 and the entropy ~0).
    model.model.embed_tokens.weight.requires_grad_(False)
    with torch.no_grad():
        model.model.norm.weight.fill_(0.1)
    # The gradient buffers exist in both modes (an optimizer keeps them between steps):
    # allocated before the baseline, so the peak above it is the log-probs' own.
    for p in model.parameters():
        if p.requires_grad:
            p.grad = torch.zeros_like(p)
    ids = torch.randint(0, VOCAB, (1, tokens))
    labels = torch.randint(0, VOCAB, (1, tokens))
    baseline = rss_bytes("VmRSS")
    started = time.perf_counter()
    out = get_response_log_probs(model, ids, labels, return_token_entropy=True, chunk_tokens=chunk)
    forward_s = time.perf_counter() - started
    (-out["log_probs"].mean()).backward()
    seconds = time.perf_counter() - started
    return {
        "chunk": chunk,
        "peak_above_baseline": rss_bytes("VmHWM") - baseline,
        "forward_s": forward_s,
        "total_s": seconds,
        "mean_log_prob": float(out["log_probs"].mean()),
        "mean_entropy": float(out["token_entropy"].mean()),
        "head_grad_norm": float(model.lm_head.weight.grad.norm()),
    }


def memory(tokens: int, chunks: list[int], threads: int) -> None:
    logits_term = tokens * VOCAB * 4
    rows = []
    for chunk in chunks:
        cmd = [sys.executable, __file__, "--child", str(chunk), "--tokens", str(tokens), "--threads", str(threads)]
        env_out = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
        if env_out.returncode != 0:
            raise SystemExit(f"chunk {chunk} failed:\n{env_out.stderr[-3000:]}")
        rows.append(json.loads(env_out.stdout.strip().splitlines()[-1]))
    print(f"forward + backward of get_response_log_probs: 1 x {tokens} tokens, hidden {HIDDEN}, vocabulary {VOCAB},")
    print(f"fp32 on CPU, {threads} thread(s); the fp32 logits term is {logits_term / 1e9:.2f} GB")
    print(
        f"{'chunk':>6} {'peak above baseline':>20} {'fwd s':>7} {'fwd+bwd s':>10} {'mean log p':>11} "
        f"{'mean H':>8} {'|grad head|':>12}"
    )
    for r in rows:
        print(
            f"{r['chunk'] or 'off':>6} {r['peak_above_baseline'] / 1e9:>17.2f} GB {r['forward_s']:>7.1f} "
            f"{r['total_s']:>10.1f} {r['mean_log_prob']:>11.5f} {r['mean_entropy']:>8.5f} {r['head_grad_norm']:>12.6g}"
        )
    full = next((r for r in rows if r["chunk"] == 0), None)
    if full is not None:
        for r in rows:
            if r["chunk"]:
                saved = full["peak_above_baseline"] - r["peak_above_baseline"]
                verdict = "meets" if saved >= 0.4 * logits_term else "MISSES"
                print(
                    f"chunk {r['chunk']}: {saved / 1e9:.2f} GB below the full path's peak = "
                    f"{saved / logits_term:.0%} of the logits term ({verdict} the 40% goal)"
                )


def lab_steps(steps: int, chunk: int, cpu: int) -> None:
    """The lab's median s/step with and without chunking, one core, one thread."""
    for setting in (0, chunk):
        cmd = ["taskset", "-c", str(cpu), sys.executable, str(REPO / "benchmarks" / "bench_default_run.py")]
        cmd += ["--seeds", "0", "--threads", "1", f"loop.n_grpo_steps={steps}", f"model.logprob_chunk_tokens={setting}"]
        out = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
        if out.returncode != 0:
            raise SystemExit(out.stderr[-3000:] + out.stdout[-3000:])
        row = next(line for line in out.stdout.splitlines() if line.strip().startswith("0 "))
        phases = next(line for line in out.stdout.splitlines() if line.startswith("seed 0 median s:"))
        s_per_step = row.split()[5]
        curve = next(line for line in out.stdout.splitlines() if line.startswith("seed 0 curve:"))
        print(f"lab, {steps} steps, model.logprob_chunk_tokens={setting}: {s_per_step} s/step; {phases}; {curve}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--chunks", default="0,512,1024", help="model.logprob_chunk_tokens values; 0 = full logits")
    parser.add_argument("--threads", type=int, default=2, help="torch threads for the memory runs")
    parser.add_argument("--lab-steps", type=int, default=0, help="also time this many lab steps per setting")
    parser.add_argument("--lab-chunk", type=int, default=1024, help="the chunk the lab runs with")
    parser.add_argument("--cpu", type=int, default=1, help="the core the lab runs are pinned to")
    parser.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        print(json.dumps(one_mode(args.tokens, args.child, args.threads)))
        return
    if args.lab_steps:
        lab_steps(args.lab_steps, args.lab_chunk, args.cpu)
        return
    memory(args.tokens, [int(c) for c in args.chunks.split(",")], args.threads)


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    main()
