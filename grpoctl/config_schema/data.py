"""The data's keys: the task, its source and splits, and the prompt template.

Part of the config tree; grpoctl/config_schema/__init__.py says how the tree works.
"""

from __future__ import annotations

from dataclasses import dataclass

from grpoctl.config_keys import (
    DATA_SOURCES,
    key,
    section,
)


@dataclass
class SyntheticConfig:
    """The synthetic arithmetic task."""

    min_digits: int = key(2, "fewest digits per operand", range="[1, 18]")
    max_digits: int = key(2, "most digits per operand", range="[1, 18]")
    ops: list[str] = key(["+"], "operators drawn from")
    num_operands: int = key(2, "operands per problem", range="[2, 16]")


@dataclass
class CurriculumConfig:
    """The curriculum by level (data/curriculum.py)."""

    enabled: bool = key(
        False,
        "draw training problems level by level (the lab's levels, MATH's level field), weighted towards "
        "levels whose groups are mixed by a running pass rate per level",
        neutral=True,
    )
    decay: float = key(
        0.8,
        "weight of a level's old pass rate at each step that draws it (the running mean's decay)",
        range="[0, 1)",
        neutral=True,
    )
    uniform_share: float = key(
        0.2,
        "share of the weight spread evenly over the levels, so a solved level is still drawn now and then",
        range="[0, 1]",
        neutral=True,
    )


@dataclass
class DataConfig:
    """Training and eval problems."""

    source: str = key(
        "synthetic",
        "synthetic | lab (graded + and - chains, data/lab.py) | lab-hard (its levels 6-10) | math | gsm8k | jsonl | hub",
        choices=DATA_SOURCES,
    )
    train_path: str | None = key(None, "jsonl file, or hub dataset name for source=hub", non_empty=True)
    eval_path: str | None = key(None, "jsonl file, or hub dataset name for source=hub", non_empty=True)
    train_split: str = key("train", "the hub dataset's split to train on (source=hub)", non_empty=True)
    eval_split: str = key("test", "the hub dataset's split to evaluate on (source=hub)", non_empty=True)
    question_field: str = key("problem", "the record's key holding the question", non_empty=True)
    answer_field: str = key("answer", "the record's key holding the answer", non_empty=True)
    train_size: int | None = key(
        None,
        "cap on training examples (synthetic: how many to draw)",
        range="[1, inf)",
        note="null for all of them",
        nullable=True,
    )
    # For training on one dataset and evaluating on another (GSM8K, then MATH500).
    eval_source: str | None = key(
        None,
        "the eval data's own format; null: the same as source",
        choices=DATA_SOURCES,
        null_means="the same as data.source",
        neutral=True,
    )
    eval_question_field: str | None = key(
        None, "the eval data's question key; null: question_field", non_empty=True, neutral=True
    )
    eval_answer_field: str | None = key(
        None, "the eval data's answer key; null: answer_field", non_empty=True, neutral=True
    )
    synthetic: SyntheticConfig = section(SyntheticConfig)
    curriculum: CurriculumConfig = section(CurriculumConfig)


@dataclass
class PromptConfig:
    """The prompt template and its reward."""

    template: str = key(
        "r1_zero_compact",
        "a packaged template (r1_zero_compact, r1_zero, question_only) or a path to a file",
        non_empty=True,
        aliases=("template",),
    )
    reward: str = key(
        "r1_zero",
        "r1_zero | question_only (must match the template's answer format), or a reward plugin: "
        "package.module:function or path/to/file.py:function (grpoctl/reward_specs.py)",
        aliases=("reward",),
    )
