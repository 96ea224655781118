"""Loading problems from a Hugging Face hub dataset, by name and split.

`datasets` is an optional dependency (`pip install 'grpoctl[hub]'`): it is heavy and
the embedded default never needs it, so it is imported only when this is called.
"""

from __future__ import annotations

from types import ModuleType

from grpoctl.data.examples import DataError, Example
from grpoctl.data.records import example_from_record

INSTALL_HINT = "loading a hub dataset needs the 'datasets' package: pip install 'grpoctl[hub]'"


def _import_datasets() -> ModuleType:
    try:
        import datasets
    except ImportError:
        raise ImportError(INSTALL_HINT) from None
    return datasets


def load_hub_dataset(
    name: str,
    split: str,
    question_field: str,
    answer_field: str,
    config: str | None = None,
) -> list[Example]:
    """Examples from `datasets.load_dataset(name, config, split=split)`.

    `split` is anything `datasets` accepts ("train", "test", "train[:90%]").
    With `answer_field="solution"` the answer is the last `\\boxed{}` of the
    solution (full MATH); an answer with a `####` line is read GSM8K style.
    Ids are the row's `unique_id`/`id`, else `<name>:<split>:<row>`.
    """
    datasets = _import_datasets()
    label = f"{name}" + (f" ({config})" if config else "") + f" [{split}]"
    try:
        rows = datasets.load_dataset(name, name=config, split=split)
    except Exception as exc:  # network, auth, unknown name or split: one line for the CLI
        first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise DataError(f"{label}: could not load from the hub ({first_line})") from exc

    examples = [
        example_from_record(
            dict(row),
            f"{label} row {index}",
            question_key=question_field,
            answer_key=answer_field,
            default_id=f"{name}{'/' + config if config else ''}:{split}:{index}",
        )
        for index, row in enumerate(rows)
    ]
    if not examples:
        raise DataError(f"{label}: empty split")
    return examples
