"""The embedded models: a tiny Qwen2 with a character-level tokenizer.

It is saved as an ordinary Hugging Face model directory (config.json, safetensors,
tokenizer.json), so it loads through `AutoModelForCausalLM` / `AutoTokenizer` from a path,
exactly as Qwen2.5-Math-1.5B does, and vLLM can serve it. One token per character keeps
the vocabulary small and makes stop strings land exactly on token boundaries.

The tokenizer is Qwen2's byte-level BPE with no merges: one token per byte, which is one
per character for ASCII. Keeping Qwen2's byte-level scheme (rather than a bespoke
character vocabulary) matters because transformers and vLLM pick the tokenizer class from
the model type, and Qwen2's class re-applies byte-level pre-tokenization on load.
"""

from __future__ import annotations

from pathlib import Path

PAD, EOS = "<|pad|>", "<|endoftext|>"
SHIPPED = Path(__file__).parent / "shipped"  # the warm starts the package ships (grpoctl/warmstart/)
TINY_MAX_POSITIONS = 1024  # the tiny model's context: prompt and response together


def build_tokenizer():
    """A fast tokenizer with one token per byte (byte-level BPE, no merges)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {PAD: 0, EOS: 1}
    for ch in sorted(pre_tokenizers.ByteLevel.alphabet()):
        vocab[ch] = len(vocab)
    core = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=None, fuse_unk=False))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    core.add_special_tokens([PAD, EOS])
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token=PAD,
        eos_token=EOS,
        bos_token=None,
        model_max_length=4096,
        padding_side="left",  # batched generation pads prompts on the left
        clean_up_tokenization_spaces=False,
    )


# The lab's tokenizer (tiny/lab_warmstart.py) adds, as ordinary (non-special) tokens that
# decode as text: one token per format tag, so the answer format costs a few tokens rather
# than most of a short response, and one per number 0..LAB_NUMBER_MAX, as a BPE vocabulary
# holds short numbers, so a working line `47+8=55` is 6 tokens. Added tokens match
# leftmost-longest: "144" is one token; a larger number falls back to bytes.
LAB_TAGS = ("User:", "\nAssistant:", " <think>", " </think>", " <answer>", "</answer>", " \\boxed{")
LAB_NUMBER_MAX = 199  # the lab's largest number is 144 (154 with a slip)


def build_lab_tokenizer():
    """The byte-level tokenizer plus the lab's tags and numbers (vocabulary 455)."""
    from tokenizers import AddedToken

    tokenizer = build_tokenizer()
    extra = [*LAB_TAGS, *(str(i) for i in range(LAB_NUMBER_MAX + 1))]
    tokenizer.add_tokens([AddedToken(t, normalized=False, special=False) for t in extra])
    return tokenizer


# The tiny addition model's default shape (the config's model.tiny section overrides it).
TINY_SIZES = dict(
    hidden_size=128, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1, intermediate_size=512
)


def build_model(tokenizer, seed: int = 0, **sizes):
    """A randomly initialised Qwen2ForCausalLM with `sizes` (Qwen2Config's hidden_size,
    num_hidden_layers, num_attention_heads, num_key_value_heads, intermediate_size; each
    TINY_SIZES's when not given; head_dim = hidden / heads) and `tokenizer`'s vocabulary."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    special = {"pad_token_id": tokenizer.pad_token_id, "eos_token_id": tokenizer.eos_token_id}
    config = Qwen2Config(
        **(TINY_SIZES | sizes),
        **special,
        bos_token_id=tokenizer.eos_token_id,
        vocab_size=len(tokenizer),
        max_position_embeddings=TINY_MAX_POSITIONS,
        tie_word_embeddings=True,
        torch_dtype="float32",
    )
    torch.manual_seed(seed)
    return Qwen2ForCausalLM(config)


def save_model_dir(model, tokenizer, path: str | Path) -> Path:
    """Write a Hugging Face model directory that AutoModelForCausalLM and vLLM can load."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path, safe_serialization=True)
    tokenizer.save_pretrained(path)
    model.generation_config.save_pretrained(path)
    return path


def create_tiny_model_dir(path: str | Path, seed: int = 0, **sizes) -> Path:
    """A randomly initialised tiny model directory (tests and the warm-start's starting point)."""
    tokenizer = build_tokenizer()
    return save_model_dir(build_model(tokenizer, seed=seed, **sizes), tokenizer, path)


def create_lab_model_dir(path: str | Path, seed: int = 0) -> Path:
    """A randomly initialised model of the lab's shape and tokenizer (tests; the lab's base starts here)."""
    from grpoctl.tiny.lab_recipe import LAB_SIZES

    tokenizer = build_lab_tokenizer()
    return save_model_dir(build_model(tokenizer, seed=seed, **LAB_SIZES), tokenizer, path)
