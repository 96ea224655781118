"""One entry point from a config's `data` section to a list of Examples."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from grpoctl.data.examples import Example
from grpoctl.data.files import load_gsm8k_jsonl, load_jsonl, load_math_jsonl
from grpoctl.data.hub import load_hub_dataset
from grpoctl.data.lab import LAB_SOURCES, TRAIN_SIZE, lab_eval_examples, lab_train_examples
from grpoctl.data.subsets import eval_subset
from grpoctl.data.synthetic import synthetic_examples
from grpoctl.rules import DATA_SOURCES as SOURCES


def load_examples(
    source: str,
    *,
    path: str | Path | None = None,
    split: str = "train",
    n: int | None = None,
    seed: int = 0,
    **kw: Any,
) -> list[Example]:
    """Examples from `source`:

    - synthetic: arithmetic of `split` ("train" or "eval"); `n` problems drawn with
      `seed`; kw are the difficulty knobs of `synthetic_examples`.
    - lab: the lab task (data/lab.py); "train" draws `n` problems (default TRAIN_SIZE)
      with `seed`, "eval" is its fixed held-out set (`n` keeps a subset). lab-hard: the
      same on its hard levels 6-10.
    - math / gsm8k / jsonl: the jsonl file at `path` (the file is the split);
      jsonl needs kw `question_key` and `answer_key`, math accepts them.
    - hub: the Hugging Face dataset named by `path` (as `datasets.load_dataset`
      calls it) at `split`; kw `question_field`, `answer_field` (default
      problem/answer) and `config`.

    For the non-synthetic sources, `n` keeps a deterministic subset of n examples
    (see eval_subset), the same for the same file and seed.
    """
    if source not in SOURCES:
        raise ValueError(f"unknown data source {source!r}: choose one of {', '.join(SOURCES)}")
    if source == "synthetic":
        return synthetic_examples(split, n, seed, **kw)
    if source in LAB_SOURCES:
        levels = LAB_SOURCES[source]
        if split == "train":
            return lab_train_examples(n or TRAIN_SIZE, seed, levels)
        pool = lab_eval_examples(levels=levels)
        return pool if n is None else eval_subset(pool, n, seed)
    if path is None:
        what = "a dataset name" if source == "hub" else "a file"
        raise ValueError(f"data source {source!r} needs path= ({what})")

    if source == "math":
        examples = load_math_jsonl(path, **kw)
    elif source == "gsm8k":
        examples = load_gsm8k_jsonl(path, **kw)
    elif source == "jsonl":
        examples = load_jsonl(path, **kw)
    else:
        kw.setdefault("question_field", "problem")
        kw.setdefault("answer_field", "answer")
        examples = load_hub_dataset(str(path), split, **kw)
    return examples if n is None else eval_subset(examples, n, seed)
