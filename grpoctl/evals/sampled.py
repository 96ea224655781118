"""The sampled eval: n samples per problem of a subset, scored as pass@k and maj@k.

Separate from the headline eval (evaluate.py, one greedy sample per problem), with its own
settings (`eval.sampled.*`) and its own randomness: its seed comes from (seed, step,
"eval") by a hash, and it runs inside `torch.random.fork_rng`, so the global generator
that the hf backend reseeds (and a checkpoint saves) is what it was before. Training rows
are therefore bit-identical with and without it on CPU (tests/test_sampled_eval.py compares
them). The one exception is vLLM on CPU, whose engine has a single seed and no
per-request ones (rollout/vllm.py): there a sampled eval moves the engine's stream. On a
GPU the generators are kept apart just the same, but CUDA kernels are not deterministic,
so no two runs' rows are bit-identical there, with or without it.

Grading goes through answer classes (analysis/majority.py): a sample is right when its
class's representative is, so the grader runs once per class and per pair of class
representatives, with verdicts cached for the whole eval, not once per sample.
"""

from __future__ import annotations

import hashlib
import json
import random
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from grpoctl import metrics
from grpoctl.analysis.majority import EXHAUSTIVE_LIMIT, RANDOM_SUBSETS, Verdicts, answer_classes, maj_at_k
from grpoctl.analysis.pass_at_k import check_k, pass_at_k
from grpoctl.data import Example, eval_subset
from grpoctl.prompts import format_prompt
from grpoctl.registry.models import EVAL_KINDS
from grpoctl.rewards import ANSWER_EXTRACTORS, grade, grading_stats
from grpoctl.rollout.base import SamplingSettings

if TYPE_CHECKING:
    from collections.abc import Callable

    from grpoctl.config import Config
    from grpoctl.config_schema import SampledEvalConfig
    from grpoctl.rollout.base import RolloutBackend

ACCURACY = "accuracy"  # a problem's share of right samples, in its breakdown row


def sampled_eval_seed(seed: int, step: int) -> int:
    """The sampled eval's own seed at a step: a hash of (seed, step, "eval"), never the training RNG.
    Nothing of an arm's own config enters it, so two arms run with the same seed draw their
    samples from the same random numbers at each step (common random numbers) and their
    per-problem outcomes pair problem by problem (tests/test_problem_outcomes.py)."""
    return int.from_bytes(hashlib.sha256(f"{seed}:{step}:eval".encode()).digest()[:4], "big")


def sampled_ks(sampled_cfg: SampledEvalConfig) -> list[int]:
    """The ks to report: eval.sampled.k, or 1 and n when it is empty."""
    return sorted(set(sampled_cfg.k)) or sorted({1, sampled_cfg.n})


def sampled_eval_due(cfg: Config, step: int) -> bool:
    """Every eval.sampled.every steps and at the last; at step 0 with eval.at_start. Off at n=0."""
    s = cfg.eval.sampled
    if not s.n:
        return False
    if step == 0:
        return bool(cfg.eval.at_start)
    return bool(s.every and step % s.every == 0) or step == cfg.loop.n_grpo_steps


def sampled_sampling(cfg: Config) -> SamplingSettings:
    s = cfg.eval.sampled
    return SamplingSettings(
        temperature=s.temperature,
        top_p=s.top_p,
        min_tokens=1,
        max_tokens=cfg.eval.max_tokens,
        stop=tuple(cfg.rollout.stop),
        greedy=False,
    )


def sampled_problems(cfg: Config, eval_examples: list[Example]) -> list[Example]:
    """eval.sampled.subset problems of the eval subset, drawn by eval.subset_seed (the same every eval)."""
    return eval_subset(eval_examples, cfg.eval.sampled.subset, cfg.eval.subset_seed)


@dataclass
class SampledOutcome:
    problems: int
    n: int
    ks: list[int]
    seed: int
    accuracy: float  # the share of right samples: pass@1
    pass_at: dict[int, float]
    maj_at: dict[int, float]
    format_rate: float
    mean_response_length: float
    per_problem: list[dict[str, float]]  # per problem: pass@k and maj@k by metric name
    timeouts: int = 0
    errors: int = 0
    grader_calls: int = 0
    generate_s: float = 0.0
    grade_s: float = 0.0

    def row_fields(self) -> dict:
        """This eval's own fields of its EvalResult row (kind "sampled"; evals/on_set.py adds
        the rest). `accuracy` is pass@1, the mean share of right samples, whichever ks were asked for."""
        return dict(
            kind=EVAL_KINDS[1],
            n=self.problems,
            accuracy=self.accuracy,
            format_rate=self.format_rate,
            mean_response_length=self.mean_response_length,
            grading_timeouts=self.timeouts,
            sampling=json.dumps(
                {
                    "n": self.n,
                    "k": self.ks,
                    "seed": self.seed,
                    "maj_subsets": f"every k-subset up to {EXHAUSTIVE_LIMIT}, else {RANDOM_SUBSETS} seeded random ones",
                },
                sort_keys=True,
            ),
            scores=json.dumps(self.metrics(), sort_keys=True),
        )

    def metrics(self) -> dict[str, float]:
        out = {
            metrics.SAMPLED_FORMAT_RATE: self.format_rate,
            metrics.SAMPLED_RESPONSE_LENGTH: self.mean_response_length,
        }
        for k in self.ks:
            out[metrics.pass_at(k)] = self.pass_at[k]
            out[metrics.maj_at(k)] = self.maj_at[k]
        return out


def generate_samples(
    backend: RolloutBackend,
    examples: list[Example],
    template: str,
    sampling: SamplingSettings,
    n: int,
    batch_size: int,
    seed: int,
) -> tuple[list[list[str]], list[int]]:
    """n responses per problem (and their total token count per problem), in chunks of about
    batch_size sequences; chunk seeds are seed + first problem * n, so no two share one."""
    per_call = max(1, batch_size // n)
    texts: list[list[str]] = []
    lengths: list[int] = []
    for start in range(0, len(examples), per_call):
        chunk = examples[start : start + per_call]
        prompts = [format_prompt(template, ex.question) for ex in chunk]
        out = backend.generate(prompts, n, sampling, seed=seed + start * n)
        for i in range(len(chunk)):
            rows = range(i * n, (i + 1) * n)
            texts.append([out.response_texts[j] for j in rows])
            lengths.append(sum(len(out.response_ids[j]) for j in rows))
    return texts, lengths


def score_samples(
    examples: list[Example],
    texts: list[list[str]],
    reward_name: str,
    ks: list[int],
    seed: int,
    grader: Callable[[str, str], bool] = grade,
) -> tuple[list[dict[str, float]], int, int]:
    """Per problem pass@k and maj@k; also the formatted samples' count and the grader's calls."""
    extract = ANSWER_EXTRACTORS[reward_name]
    verdicts = Verdicts(grader)
    rows, formatted = [], 0
    for index, (ex, responses) in enumerate(zip(examples, texts, strict=True)):
        answers = [extract(text) for text in responses]
        formatted += sum(a is not None for a in answers)
        classes = answer_classes(answers, ex.answer, verdicts)
        right = sum(1 for label in classes.labels if label is not None and classes.correct[label])
        rng = random.Random(f"grpoctl-maj:{seed}:{index}")
        row = {ACCURACY: right / len(responses)}  # pass@1, whichever ks are asked for
        for k in ks:
            row[metrics.pass_at(k)] = pass_at_k(len(responses), right, k)
            row[metrics.maj_at(k)] = maj_at_k(classes, k, rng)
        rows.append(row)
    return rows, formatted, verdicts.calls


def sampled_evaluate(
    backend: RolloutBackend,
    examples: list[Example],
    template: str,
    reward_name: str,
    sampling: SamplingSettings,
    *,
    n: int,
    ks: list[int],
    seed: int,
    batch_size: int,
) -> SampledOutcome:
    """n samples of every problem, then pass@k and maj@k; the global torch RNG is left as it was."""
    for k in ks:
        check_k(n, k)
    devices = list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
    before = grading_stats()
    started = time.perf_counter()
    with torch.random.fork_rng(devices=devices):
        texts, lengths = generate_samples(backend, examples, template, sampling, n, batch_size, seed)
    generated = time.perf_counter()
    rows, formatted, calls = score_samples(examples, texts, reward_name, ks, seed)
    graded, after = time.perf_counter(), grading_stats()
    total = len(examples) * n
    mean = {name: sum(row[name] for row in rows) / len(rows) for name in rows[0]} if rows else {}
    return SampledOutcome(
        problems=len(examples),
        n=n,
        ks=ks,
        seed=seed,
        accuracy=mean.get(ACCURACY, 0.0),
        pass_at={k: mean.get(metrics.pass_at(k), 0.0) for k in ks},
        maj_at={k: mean.get(metrics.maj_at(k), 0.0) for k in ks},
        format_rate=formatted / total if total else 0.0,
        mean_response_length=sum(lengths) / total if total else 0.0,
        per_problem=rows,
        timeouts=after["timeouts"] - before["timeouts"],
        errors=after["errors"] - before["errors"],
        grader_calls=calls,
        generate_s=generated - started,
        grade_s=graded - generated,
    )


def sampled_cost(problems: int, n: int, max_tokens: int, ks: list[int]) -> str:
    """What a sampled eval will cost, said before it starts: sequences and tokens to generate,
    and how many k-subsets maj@k averages over."""
    from math import comb

    subsets = sum(comb(n, k) if comb(n, k) <= EXHAUSTIVE_LIMIT else RANDOM_SUBSETS for k in ks)
    return (
        f"estimated cost: {problems * n:,} completions ({problems} problems x {n} samples, {n}x a greedy eval's), "
        f"at most {problems * n * max_tokens:,} new tokens; grading once per distinct answer and problem "
        f"(at most {problems * n:,} against the truth, plus the comparisons between a problem's distinct "
        f"answers that are not plain numbers); maj@k votes over {subsets:,} subsets per problem"
    )
