"""The floor a GRPO step of the tiny default is measured against, on this core.

Over the batch of bench_vs_trl (128 rows of 62 tokens, the tiny Qwen2 in fp32, one thread):

- train floor: one plain eager fwd+bwd+AdamW step of transformers' module over the whole
  batch (log-softmax of every position, no prompt sharing, no grad clipping or masking);
- forward floor: one plain forward over the same batch, no grad;
- matmul rate: a (7936 x 128) @ (128 x 512) product (the shape of the MLP's) and a
  2048^3 one, in GFLOP/s;
- FLOP floors: 6 N T for training and 2 N T for generating T tokens with N parameters,
  at the better matmul rate per CPU second. Generation counts 128 x 62 tokens (prompt and response).

Times are medians, in wall and CPU seconds (the machine may be shared: pin it).

    taskset -c 1 python benchmarks/bench_floor.py
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch


def timed(fn, repeats: int) -> tuple[float, float]:
    """Median wall and CPU seconds of fn() after two warm-up calls."""
    fn(), fn()
    walls, cpus = [], []
    for _ in range(repeats):
        w, c = time.perf_counter(), time.process_time()
        fn()
        walls.append(time.perf_counter() - w)
        cpus.append(time.process_time() - c)
    return statistics.median(walls), statistics.median(cpus)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=128)
    parser.add_argument("--tokens", type=int, default=62)
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    torch.set_num_threads(1)

    from grpoctl.tiny.model import build_model, build_tokenizer

    model = build_model(build_tokenizer())
    params = sum(p.numel() for p in model.parameters())
    ids = torch.randint(2, 250, (args.rows, args.tokens))
    labels = torch.randint(2, 250, (args.rows, args.tokens))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.0)

    def train_step():
        logits = model(ids).logits
        loss = -torch.log_softmax(logits, -1).gather(-1, labels[..., None]).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    def forward():
        with torch.no_grad():
            model(ids)

    a, b = torch.randn(args.rows * args.tokens, 128), torch.randn(128, 512)
    big = torch.randn(2048, 2048)
    rows = {
        "fwd+bwd+AdamW (eager)": timed(train_step, args.repeats),
        "forward (eager)": timed(forward, args.repeats),
    }
    mlp = timed(lambda: a @ b, args.repeats * 5)
    cube = timed(lambda: big @ big, max(3, args.repeats // 2))
    # GFLOP/s by wall and by CPU seconds: on a shared core only the second is the core's own rate.
    mlp_rate = [2 * a.shape[0] * 128 * 512 / t / 1e9 for t in mlp]
    cube_rate = [2 * 2048**3 / t / 1e9 for t in cube]
    rate = max(mlp_rate[1], cube_rate[1]) * 1e9
    tokens = args.rows * args.tokens
    print(
        f"tiny Qwen2, {params / 1e6:.2f}M parameters, batch {args.rows} x {args.tokens} = {tokens} tokens, "
        f"{torch.get_num_threads()} thread"
    )
    print(
        f"matmul GFLOP/s (wall / cpu): {mlp_rate[0]:.0f} / {mlp_rate[1]:.0f} at {a.shape[0]}x128 @ 128x512, "
        f"{cube_rate[0]:.0f} / {cube_rate[1]:.0f} at 2048^3"
    )
    print(f"{'floor':<28}{'wall s':>9}{'cpu s':>9}")
    for name, (wall, cpu) in rows.items():
        print(f"{name:<28}{wall:>9.3f}{cpu:>9.3f}")
    print(
        f"{'FLOPs train (6 N T)':<28}{6 * params * tokens / rate:>9.3f}{'':>9}  {6 * params * tokens / 1e9:.1f} GFLOP"
    )
    print(
        f"{'FLOPs generation (2 N T)':<28}{2 * params * tokens / rate:>9.3f}{'':>9}  "
        f"{2 * params * tokens / 1e9:.1f} GFLOP"
    )


if __name__ == "__main__":
    main()
