"""The addition task (`grpoctl train addition`): integer arithmetic problems such as `47+38`.

Built to let a tiny character-level model learn visibly within minutes on a CPU:
compact questions (the model sees every character), exact integer answers, and
difficulty knobs (digits per operand, operators, number of operands).

Train/eval split. A problem belongs to "eval" iff a stable hash of its question
string falls in the eval slice (~10%), whatever the seed, the knobs or the split
asked for. So no eval problem can ever be a training prompt or a warm-start SFT
example, across any seeds: the seed only chooses which problems of a split to draw.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import random
from collections.abc import Iterable, Iterator, Sequence

from grpoctl.config_checks import SYNTHETIC_OPERATORS as OPERATORS  # canonical order: ("*", "+") == ("+", "*")
from grpoctl.data.examples import Example

SPLITS = ("train", "eval")
EVAL_PER_MILLE = 100  # 10% of all problems are eval-only

# Below this many problems the whole space is listed and sampled without
# replacement; above it, problems are drawn at random (duplicates are then rare
# and skipped). Listing 8,100 two-digit sums takes milliseconds.
ENUMERATE_LIMIT = 200_000

_KIND = {"+": "add", "-": "sub", "*": "mul"}


def split_of(question: str) -> str:
    """ "train" or "eval" for a canonical question string; sha256 rather than
    Python's hash(), which changes from one process to the next."""
    digest = hashlib.sha256(f"grpoctl-synthetic:{question}".encode()).digest()
    return "eval" if int.from_bytes(digest[:8], "big") % 1000 < EVAL_PER_MILLE else "train"


def evaluate(operands: Sequence[int], operators: Sequence[str]) -> int:
    """The value of `a op b op c ...` with the usual precedence (* before + -),
    computed exactly on integers."""
    total, term = 0, operands[0]
    sign = 1
    for op, value in zip(operators, operands[1:], strict=True):
        if op == "*":
            term *= value
        else:
            total += sign * term
            sign, term = (1 if op == "+" else -1), value
    return total + sign * term


def make_example(operands: Sequence[int], operators: Sequence[str], with_solution: bool) -> Example:
    """One problem as an Example. The solution is the completion a model should
    write after an r1_zero prompt that ends in `<think>`; it is kept to one
    equation because a long scratchpad hurt the tiny model in earlier runs."""
    question = str(operands[0]) + "".join(op + str(v) for op, v in zip(operators, operands[1:], strict=True))
    answer = str(evaluate(operands, operators))
    kinds = {_KIND[op] for op in operators}
    kind = kinds.pop() if len(kinds) == 1 else "mix"
    solution = f" {question}={answer} </think> <answer>{answer}</answer>" if with_solution else None
    return Example(id=f"{kind}:{question}", question=question, answer=answer, solution=solution)


class _Space:
    """All problems with `num_operands` operands of min..max digits and the given
    operators: their count, a listing, and a random draw."""

    def __init__(self, min_digits: int, max_digits: int, ops: Sequence[str], num_operands: int):
        # 1-digit operands include 0; longer ones have no leading zero (10..99).
        self.low = 0 if min_digits == 1 else 10 ** (min_digits - 1)
        self.high = 10**max_digits - 1
        self.ops = tuple(ops)
        self.num_operands = num_operands
        per_operand = self.high - self.low + 1
        self.size = per_operand**num_operands * len(self.ops) ** (num_operands - 1)

    def all(self) -> Iterator[tuple[tuple[int, ...], tuple[str, ...]]]:
        values = range(self.low, self.high + 1)
        for operands in itertools.product(values, repeat=self.num_operands):
            for operators in itertools.product(self.ops, repeat=self.num_operands - 1):
                yield operands, operators

    def draw(self, rng: random.Random) -> tuple[tuple[int, ...], tuple[str, ...]]:
        operands = tuple(rng.randint(self.low, self.high) for _ in range(self.num_operands))
        operators = tuple(rng.choice(self.ops) for _ in range(self.num_operands - 1))
        return operands, operators


def _check(
    split: str, n: int | None, min_digits: int, max_digits: int, ops: Iterable[str], num_operands: int
) -> tuple[str, ...]:
    """Validate the arguments; return the operators in canonical order."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(SPLITS)}, got {split!r}")
    if n is not None and n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    if not 1 <= min_digits <= max_digits:
        raise ValueError(f"need 1 <= min_digits <= max_digits, got {min_digits} and {max_digits}")
    if num_operands < 2:
        raise ValueError(f"num_operands must be >= 2, got {num_operands}")
    unknown = set(ops) - set(OPERATORS)
    if not ops or unknown:
        raise ValueError(f"ops must be among {' '.join(OPERATORS)}, got {' '.join(map(str, ops)) or 'none'}")
    return tuple(op for op in OPERATORS if op in ops)


def problem_count(min_digits: int = 2, max_digits: int = 2, ops: Sequence[str] = ("+",), num_operands: int = 2) -> int:
    """How many problems these knobs make (both splits); above ENUMERATE_LIMIT a split
    cannot be listed whole, only drawn from (`n` given)."""
    return _Space(
        min_digits, max_digits, _check("train", None, min_digits, max_digits, ops, num_operands), num_operands
    ).size


def synthetic_examples(
    split: str,
    n: int | None,
    seed: int,
    min_digits: int = 2,
    max_digits: int = 2,
    ops: Sequence[str] = ("+",),
    num_operands: int = 2,
    with_solution: bool = True,
) -> list[Example]:
    """`n` arithmetic problems of `split`, the same ones in the same order for the
    same arguments.

    Sampling is without replacement whenever the split has enough problems. Past
    that, "train" repeats the whole shuffled pool as often as needed (every problem
    equally often, give or take one) and "eval" raises, since repeated eval
    problems would only fake a bigger eval set. `n=None` means the whole split
    (only for spaces small enough to list).
    """
    ops = _check(split, n, min_digits, max_digits, ops, num_operands)
    space = _Space(min_digits, max_digits, ops, num_operands)
    rng = random.Random(f"grpoctl-synthetic:{split}:{seed}")
    expected_pool = space.size * (EVAL_PER_MILLE if split == "eval" else 1000 - EVAL_PER_MILLE) // 1000

    if n is None and space.size > ENUMERATE_LIMIT:
        raise ValueError(f"{space.size:,} synthetic problems is too many to use them all: give n")

    # List the split when it is small, or when n is a large share of it (random
    # draws would then mostly hit problems already taken).
    if space.size <= ENUMERATE_LIMIT or n is None or n * 4 > expected_pool:
        problems = [p for p in space.all() if split_of(make_example(*p, False).question) == split]
        if n is None:
            n = len(problems)
        if n <= len(problems):
            chosen = rng.sample(problems, n)
        elif split == "eval":
            raise ValueError(
                f"the synthetic eval split has only {len(problems)} problems with "
                f"min_digits={min_digits} max_digits={max_digits} ops={''.join(ops)} "
                f"num_operands={num_operands}; asked for {n}"
            )
        else:
            rounds = math.ceil(n / len(problems))
            chosen = [p for _ in range(rounds) for p in rng.sample(problems, len(problems))][:n]
        return [make_example(*p, with_solution) for p in chosen]

    # A space too big to list: draw at random, keep problems of this split, skip repeats.
    examples: list[Example] = []
    seen: set[str] = set()
    while len(examples) < n:
        example = make_example(*space.draw(rng), with_solution)
        if example.question not in seen and split_of(example.question) == split:
            seen.add(example.question)
            examples.append(example)
    return examples
