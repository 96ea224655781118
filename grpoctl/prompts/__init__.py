"""Prompt templates: plain text files with a `{question}` placeholder.

The packaged templates live next to this file as `NAME.prompt`:

- `r1_zero`: the DeepSeek-R1-Zero conversation template. The prompt ends in
  `<think>`, so the model's response continues the reasoning and is expected to
  look like ` ... </think> <answer>...</answer>`.
- `r1_zero_compact`: the same response format without the long preamble, for the
  tiny character-level default model, where every character is a token.
- `question_only`: just the question; the answer is the last `\\boxed{...}`.

A template is also any file a user points at. Its hash goes into the registry so
that two runs whose prompts differ by one character are told apart.
"""

from __future__ import annotations

import hashlib
from importlib import resources
from pathlib import Path

PLACEHOLDER = "{question}"
_SUFFIX = ".prompt"


def available_templates() -> list[str]:
    """Names of the templates shipped with grpoctl, sorted."""
    files = resources.files(__name__).iterdir()
    return sorted(f.name[: -len(_SUFFIX)] for f in files if f.name.endswith(_SUFFIX))


def load_template(name_or_path: str | Path) -> str:
    """The text of a packaged template (`r1_zero`) or of a template file.

    The text is returned exactly as stored: a trailing newline would become part
    of every prompt, so the packaged files have none.
    """
    name = str(name_or_path)
    if name in available_templates():
        text = resources.files(__name__).joinpath(name + _SUFFIX).read_text(encoding="utf-8")
    elif Path(name).is_file():
        text = Path(name).read_text(encoding="utf-8")
    else:
        raise ValueError(
            f"unknown prompt template {name!r}: not a packaged template "
            f"({', '.join(available_templates())}) and not a file"
        )
    if PLACEHOLDER not in text:
        # Without the placeholder every prompt would be the same text: fail now
        # rather than train on nothing.
        raise ValueError(f"prompt template {name!r} has no {PLACEHOLDER} placeholder")
    return text


def format_prompt(template: str, question: str) -> str:
    """The prompt for one question.

    str.replace, not str.format: questions are full of braces (`\\frac{1}{2}`,
    `\\{1, 2\\}`) that str.format would take for fields.
    """
    return template.replace(PLACEHOLDER, question)


def template_hash(text: str) -> str:
    """A short, stable fingerprint of a template's text (first 12 hex digits of sha256)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


__all__ = ["PLACEHOLDER", "available_templates", "format_prompt", "load_template", "template_hash"]
