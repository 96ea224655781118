"""A run's data, from its config: the training problems, the eval subset and the template.

Train and eval data may come in different formats (`data.source` and `data.eval_source`,
each with its own field names): GSM8K to train on and MATH500 to evaluate, say. Wherever
the two overlap, the eval problems are removed from training, whatever format each came
in: an eval problem is never trained on.

Problems whose prompt leaves the model no room to answer are dropped first, train and eval
alike (data/prompt_length.py), before the eval subset is drawn.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from grpoctl.data.examples import DataError, Example
from grpoctl.data.fingerprints import file_hash
from grpoctl.data.lab import LAB_SOURCES, LAB_TASK_VERSION
from grpoctl.data.load import load_examples
from grpoctl.data.prompt_length import PromptBudget, describe_drop, drop_overlong
from grpoctl.data.subsets import eval_subset
from grpoctl.data.synthetic import ENUMERATE_LIMIT, problem_count
from grpoctl.errors import UserError
from grpoctl.prompts import load_template

if TYPE_CHECKING:
    from grpoctl.config import RunConfig
    from grpoctl.config_schema import DataConfig
    from grpoctl.formatting import Say


@dataclass
class EvalSetSpec:
    """Where one eval set comes from: an entry of eval.sets with data.eval_* filled in."""

    name: str  # "" for the one unnamed set of a run without eval.sets
    source: str
    path: str | None
    split: str
    question_field: str
    answer_field: str
    subset: int


@dataclass
class EvalSet:
    """One eval set, loaded: its subset and what makes two of its evals comparable."""

    name: str  # "" for the one unnamed set of a run without eval.sets (metrics unprefixed)
    examples: list[Example]
    source: str
    data_hash: str
    overlong_dropped: int = 0


@dataclass
class RunData:
    train: list[Example]
    eval: list[Example]
    template_name: str
    template: str
    data_hash: str  # of the eval data: what makes two evals comparable
    eval_source: str  # the eval data's source (recorded with each eval)
    # Problems dropped at load because their prompt did not fit the context (prompt_length.py).
    overlong_train_dropped: int = 0
    overlong_eval_dropped: int = 0
    train_hash: str = ""  # of the training data, as data_hash is of the eval data
    # Every eval set, the headline (the first; the fields above) included (eval.sets).
    sets: list[EvalSet] = field(default_factory=list)
    # How training problems are drawn when not by one shuffle of them all: the curriculum's
    # settings and the problems of each level (data.curriculum.*); None for the shuffle.
    curriculum: dict | None = None

    def __post_init__(self) -> None:
        if not self.sets:  # one unnamed set: the eval subset above (a RunData made by hand, say)
            self.sets = [EvalSet("", self.eval, self.eval_source, self.data_hash, self.overlong_eval_dropped)]

    def fingerprint(self) -> dict:
        """What the run trained and evaluated on, stored with its row (Run.data_fingerprint):
        each side's source and hash, the problems kept, and those dropped for their length;
        with a curriculum, how the training problems were drawn; with several eval sets
        (eval.sets), each set's under "sets"."""
        record: dict = {
            "train": {
                "hash": self.train_hash,
                "problems": len(self.train),
                "overlong_dropped": self.overlong_train_dropped,
            },
            "eval": {
                "source": self.eval_source,
                "hash": self.data_hash,
                "subset": len(self.eval),
                "overlong_dropped": self.overlong_eval_dropped,
            },
        }
        if self.curriculum is not None:
            record["train"]["curriculum"] = self.curriculum
        if any(s.name for s in self.sets):
            record["sets"] = [
                {
                    "name": s.name,
                    "source": s.source,
                    "hash": s.data_hash,
                    "subset": len(s.examples),
                    "overlong_dropped": s.overlong_dropped,
                }
                for s in self.sets
            ]
        return record


def eval_set_specs(cfg: RunConfig) -> list[EvalSetSpec]:
    """The run's eval sets: eval.sets with data.eval_* and eval.subset filling what an entry
    leaves out; without eval.sets, the one unnamed set of data.eval_*."""
    d = cfg.data
    default = EvalSetSpec(
        name="",
        source=d.eval_source or d.source,
        path=d.eval_path,
        split=d.eval_split,
        question_field=d.eval_question_field or d.question_field,
        answer_field=d.eval_answer_field or d.answer_field,
        subset=cfg.eval.subset,
    )
    out = []
    for entry in cfg.eval.sets:
        given = {k: v for k, v in dict(entry).items() if v is not None}
        out.append(
            EvalSetSpec(
                name=str(given["name"]),
                source=given.get("source", default.source),
                path=given.get("path", default.path),
                split=given.get("split", default.split),
                question_field=given.get("question_field", default.question_field),
                answer_field=given.get("answer_field", default.answer_field),
                subset=int(given.get("subset", default.subset)),
            )
        )
    return out or [default]


def load_run_data(
    cfg: RunConfig, need_train: bool = True, warn: Say | None = None, budget: PromptBudget | None = None
) -> RunData:
    """The run's train problems (none when not `need_train`: an eval of a checkpoint), eval
    subset and template; `warn` hears of a subset larger than the eval data (all of it is
    used) and of problems dropped for their length. `budget` (the model's tokenizer and
    context) drops overlong problems; without it none is dropped."""
    specs = eval_set_specs(cfg)
    try:
        template = load_template(cfg.prompt.template)
    except (ValueError, OSError) as exc:
        raise UserError(str(exc)) from None
    try:
        train = _train_examples(cfg) if need_train else []
        pools = [_eval_pool(cfg, spec) for spec in specs]
    except DataError as exc:
        raise UserError(str(exc)) from None
    except ImportError as exc:  # data.source=hub without the `datasets` package
        raise UserError(str(exc).splitlines()[0]) from None
    except ValueError as exc:  # the synthetic task's own argument checks
        raise UserError(f"data.synthetic: {exc}") from None
    # No eval problem is ever trained on, even when a user's files overlap: the whole pool
    # of every eval set (an overlong problem included) is held out, so another --subset or
    # seed later never scores trained-on problems.
    held_out = {ex.question.strip() for pool, _ in pools for ex in pool}
    train_dropped = 0
    if budget is not None:
        train, train_dropped = _fitting(train, template, budget, cfg.rollout.max_tokens, "training problems", warn)
    sets = []
    for spec, (pool, data_hash) in zip(specs, pools, strict=True):
        what = f"eval set {spec.name}'s problems" if spec.name else "eval problems"
        eval_dropped = 0
        if budget is not None:
            pool, eval_dropped = _fitting(pool, template, budget, cfg.eval.max_tokens, what, warn)
        if warn is not None and spec.subset > len(pool):
            key = f"eval.sets {spec.name}: subset" if spec.name else "eval.subset"
            warn(f"warning: {key}={spec.subset} but the eval data has {len(pool)} problems: evaluating on all of them")
        evals = eval_subset(pool, spec.subset, cfg.eval.subset_seed)
        sets.append(EvalSet(spec.name, evals, spec.source, data_hash, eval_dropped))
    train = [ex for ex in train if ex.question.strip() not in held_out]
    if need_train and not train:
        raise UserError("no training examples left after removing the eval problems")
    curriculum = _curriculum_record(cfg, train) if need_train and cfg.data.curriculum.enabled else None
    headline = sets[0]
    return RunData(
        train=train,
        eval=headline.examples,
        template_name=cfg.prompt.template,
        template=template,
        data_hash=headline.data_hash,
        eval_source=headline.source,
        overlong_train_dropped=train_dropped,
        overlong_eval_dropped=headline.overlong_dropped,
        sets=sets,
        train_hash=_train_hash(cfg) if need_train else "",
        curriculum=curriculum,
    )


def _curriculum_record(cfg: RunConfig, train: list[Example]) -> dict:
    """The curriculum's settings and the training problems of each level, for the data
    fingerprint; a problem without a level is refused in one line."""
    unlevelled = [ex for ex in train if ex.level is None]
    if unlevelled:
        raise UserError(
            f"data.curriculum.enabled needs a level on every training problem (the lab's, or a record's "
            f"'level' field): {len(unlevelled)} of {len(train)} have none, e.g. {unlevelled[0].id}"
        )
    c = cfg.data.curriculum
    per_level = {str(level): n for level, n in sorted(Counter(ex.level for ex in train).items())}
    return {"by": "level", "decay": c.decay, "uniform_share": c.uniform_share, "problems_per_level": per_level}


def _fitting(
    examples: list[Example], template: str, budget: PromptBudget, max_new: int, what: str, warn: Say | None
) -> tuple[list[Example], int]:
    """`examples` without the overlong ones, and their count; none left is refused in one line."""
    key = "rollout.max_tokens" if what.startswith("training") else "eval.max_tokens"
    kept, dropped = drop_overlong(examples, template, budget, max_new)
    if examples and not kept:
        raise UserError(f"nothing to run on: {describe_drop(what, dropped, len(examples), budget, key, max_new)}")
    if dropped and warn is not None:
        warn(f"note: dropping {describe_drop(what, dropped, len(examples), budget, key, max_new)}")
    return kept, dropped


def _synthetic_knobs(d: DataConfig) -> dict:
    return dict(
        min_digits=d.synthetic.min_digits,
        max_digits=d.synthetic.max_digits,
        ops=tuple(d.synthetic.ops),
        num_operands=d.synthetic.num_operands,
    )


def _fields(source: str, question: str, answer: str) -> dict:
    """The field names `load_examples` takes for `source` (GSM8K's are fixed)."""
    if source in ("jsonl", "math"):
        return dict(question_key=question, answer_key=answer)
    if source == "hub":
        return dict(question_field=question, answer_field=answer)
    return {}


def _train_examples(cfg: RunConfig) -> list[Example]:
    d = cfg.data
    if d.source == "synthetic":
        knobs = _synthetic_knobs(d)
        n = d.train_size
        if problem_count(**knobs) > ENUMERATE_LIMIT:
            # Too many problems to list: draw what the run can use. The split is a hash of
            # the question, so this draw and the eval's never share a problem.
            n = n or cfg.loop.n_grpo_steps * (cfg.rollout.rollout_batch_size // cfg.rollout.group_size)
        return load_examples("synthetic", split="train", n=n, seed=cfg.seed, **knobs)
    if d.source in LAB_SOURCES:
        return load_examples(d.source, split="train", n=d.train_size, seed=cfg.seed)
    train = load_examples(
        d.source,
        path=d.train_path,
        split=d.train_split,
        seed=cfg.seed,
        **_fields(d.source, d.question_field, d.answer_field),
    )
    return train[: d.train_size] if d.train_size else train


def _source_hash(source: str, path: str | None, split: str, d: DataConfig) -> str:
    """A short fingerprint of where problems come from: a file's bytes, a hub dataset's name
    and split, or the generator and its knobs for the embedded tasks."""
    if source == "synthetic":
        return "synthetic:" + ",".join(f"{k}={v}" for k, v in sorted(_synthetic_knobs(d).items()))
    if source in LAB_SOURCES:
        return f"{source}:v{LAB_TASK_VERSION}"
    if path is not None and Path(path).is_file():
        return file_hash(path)
    return f"hub:{path}:{split}"


def _train_hash(cfg: RunConfig) -> str:
    d = cfg.data
    return _source_hash(d.source, d.train_path, d.train_split, d)


def _eval_pool(cfg: RunConfig, spec: EvalSetSpec) -> tuple[list[Example], str]:
    """Every problem of an eval set (its subset is drawn from these), and the hash of where they came from."""
    d, source = cfg.data, spec.source
    if source == "synthetic":
        knobs = _synthetic_knobs(d)
        if problem_count(**knobs) <= ENUMERATE_LIMIT:
            pool = load_examples("synthetic", split="eval", n=None, seed=0, **knobs)
        else:
            pool = load_examples("synthetic", split="eval", n=spec.subset, seed=cfg.eval.subset_seed, **knobs)
        return pool, _source_hash(source, None, "", d)
    if source in LAB_SOURCES:
        return load_examples(source, split="eval"), _source_hash(source, None, "", d)
    if spec.path is None:
        if spec.name:
            raise UserError(f"eval.sets {spec.name}: source={source} needs a path (a jsonl file or hub dataset)")
        key = "data.eval_source" if d.eval_source else "data.source"
        raise UserError(f"{key}={source} needs data.eval_path (a held-out jsonl or hub dataset)")
    fields = _fields(source, spec.question_field, spec.answer_field)
    pool = load_examples(source, path=spec.path, split=spec.split, seed=0, **fields)
    return pool, _source_hash(source, spec.path, spec.split, d)
