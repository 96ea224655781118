"""Math problems for GRPO: local jsonl files (MATH, GSM8K, any jsonl), Hugging Face
hub datasets, and the embedded synthetic arithmetic task; plus deterministic eval
subsets, content hashes for the registry, and a resumable prompt stream."""

from grpoctl.data.answers import split_gsm8k
from grpoctl.data.examples import DataError, Example
from grpoctl.data.files import load_gsm8k_jsonl, load_jsonl, load_math_jsonl
from grpoctl.data.fingerprints import file_hash, subset_hash
from grpoctl.data.hub import load_hub_dataset
from grpoctl.data.load import SOURCES, load_examples
from grpoctl.data.stream import PromptStream
from grpoctl.data.subsets import eval_subset
from grpoctl.data.synthetic import ENUMERATE_LIMIT, problem_count, split_of, synthetic_examples
from grpoctl.rewards.extract import last_boxed  # MATH answers are found as the rewards find them

__all__ = [
    "SOURCES",
    "DataError",
    "ENUMERATE_LIMIT",
    "Example",
    "PromptStream",
    "eval_subset",
    "file_hash",
    "last_boxed",
    "load_examples",
    "load_gsm8k_jsonl",
    "load_hub_dataset",
    "load_jsonl",
    "load_math_jsonl",
    "problem_count",
    "split_gsm8k",
    "split_of",
    "subset_hash",
    "synthetic_examples",
]
