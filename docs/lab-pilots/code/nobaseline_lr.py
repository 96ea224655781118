"""THROWAWAY: issue 40's pilot P40-1 (docs/lab-pilots/README.md): no_baseline at a lower lr
on the recipe sanity check's problems, run exactly as tests/test_recipe_sanity.py runs it.

usage:
  python nobaseline_lr.py prepare WORKDIR            # the test's problems, into WORKDIR
  python nobaseline_lr.py run WORKDIR ARM LR STEPS OUT.jsonl

Run pinned: OMP_NUM_THREADS=1 taskset -c 0 python ... . `run` appends one line to OUT.jsonl.
The per-prompt right counts come from an observer of the trainer's group summary
(grpoctl.train.scoring.summarize_group_rewards): it reads the step's answer rewards and
passes every argument on unchanged.
"""

import json
import resource
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "tests"))

import test_recipe_sanity as sanity  # noqa: E402
from cli import invoke  # noqa: E402

from grpoctl import metrics  # noqa: E402


def prepare(workdir: Path) -> None:
    workdir.mkdir(parents=True, exist_ok=True)
    sanity.write_problems(workdir)


def run(workdir: Path, arm: str, lr: float, steps: int, out: Path) -> None:
    import grpoctl.train.scoring as scoring

    summarize = scoring.summarize_group_rewards
    right_per_prompt: list[list[int]] = []

    def observed(raw_rewards, group_size, format_rewards=None, answer_rewards=None):
        counts = (answer_rewards.reshape(-1, group_size) > 0).sum(dim=1)
        right_per_prompt.append([int(c) for c in counts])
        return summarize(raw_rewards, group_size, format_rewards=format_rewards, answer_rewards=answer_rewards)

    scoring.summarize_group_rewards = observed
    db = workdir / f"no_baseline-{arm}.db"
    assert not db.exists(), db
    cpu0 = time.process_time()
    result = invoke(*sanity.train_args(workdir, "no_baseline", steps, {}, lr, db), cwd=workdir)
    train_cpu = time.process_time() - cpu0
    assert result.returncode == 0, result.stderr[-3000:]
    answer = sanity.step_series(db, metrics.ANSWER_REWARD)
    entropy = sanity.step_series(db, metrics.TOKEN_ENTROPY)
    assert len(answer) == len(entropy) == len(right_per_prompt) == steps, (len(answer), len(right_per_prompt))
    group = 8
    all_wrong = [sum(c == 0 for c in step) for step in right_per_prompt]
    all_right = [sum(c == group for c in step) for step in right_per_prompt]
    usage = resource.getrusage(resource.RUSAGE_SELF)
    row = {
        "pilot": "P40-1",
        "arm": arm,
        "loss": "no_baseline",
        "lr": lr,
        "steps": steps,
        "reached": sanity._reached(answer),
        "final_3_step_mean": round(statistics.mean(answer[-3:]), 4),
        "last50_all_wrong_prompts": round(statistics.mean(all_wrong[-50:]), 3),
        "last50_all_right_prompts": round(statistics.mean(all_right[-50:]), 3),
        "last50_token_entropy": round(statistics.mean(entropy[-50:]), 4),
        "first50_all_wrong_prompts": round(statistics.mean(all_wrong[:50]), 3),
        "train_cpu_s": round(train_cpu, 1),
        "process_cpu_s": round(usage.ru_utime + usage.ru_stime, 1),
        "answer_reward": [round(v, 4) for v in answer],
        "token_entropy": [round(v, 4) for v in entropy],
        "right_per_prompt": right_per_prompt,
    }
    with out.open("a") as f:
        f.write(json.dumps(row) + "\n")
    print({k: v for k, v in row.items() if not isinstance(v, list)})


if __name__ == "__main__":
    if sys.argv[1] == "prepare":
        prepare(Path(sys.argv[2]))
    else:
        _, _, workdir, arm, lr, steps, out = sys.argv
        run(Path(workdir), arm, float(lr), int(steps), Path(out))
