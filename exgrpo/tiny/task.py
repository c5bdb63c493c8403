"""Synthetic verifiable task for the CPU testbed: integer arithmetic with checkable steps.

A problem is an expression of d operations from {+, -, *} over integers 1-9 (d = difficulty),
evaluated with operator precedence; any intermediate |value| > 99 is rejected. The canonical
solution reduces the leftmost `*` first, then the leftmost `+`/`-`, writing one step per
operation, and ends with the answer boxed after the think block (paper §3.5-3.6 format):

    question  3+4*2-5
    response  4*2=8;3+8=11;11-5=6</think>\\boxed{6}

The prompt is the paper's chat form (system/user/assistant roles, the assistant turn opens with
`<think>`, paper.md §3.6), with three departures for tiny models:
- the long LUFFY system text is dropped (as the released evaluation does with `--remove_system`):
  the messages are a single user turn holding the question;
- no spaces or newlines around `</think>` and `\\boxed{` (each is one token; spaces cost tokens);
- "reasoning correct" is decided exactly by `check_reasoning` (steps equal the canonical ones)
  instead of the paper's LLM judge (paper §F.2).

Splits (`make_splits`): `train` (RL questions), `validation`, `test` (ID, d = 1..4), three OOD
sets mirroring the paper's ARC-c / GPQA / MMLU-Pro columns, and a length probe:
- `ood_words`   (mirrors ARC-c): the same skill in another surface form, operators in words
  ("3 plus 4 times 2 minus 5"); same step format, numeric answer.
- `ood_choice4` (mirrors GPQA): four options A-D written `value(letter)`, e.g.
  `9*7 60(A) 65(B) 62(C) 63(D)`; the steps end with a lookup tag and the letter is boxed:
  `9*7=63(D)</think>\\boxed{D}`. Departure from real multiple choice: an option's letter is a
  fixed function of its final digit (digit mod 4 here; the digit itself for A-J), and options
  are listed in letter order. The tiny models never learned an in-context option lookup within
  the SFT budget (measured: chance level with both the `A)63` and the `63(A)` layouts and
  arbitrary order), so the letter is made computable from the value; distractors stay plausible
  slips. What RL improves ID (the value) then transfers, through a new answer format.
- `ood_choice10` (mirrors MMLU-Pro): ten options A-J, letter = final digit (A = 0 ... J = 9).
- `probe_length`: d = 5, a length-generalisation probe (not one of the paper's benchmarks; a
  model trained on d <= 4 scores near zero here, tiny-testbed.md §3).
The three OOD sets re-render expressions of the ID `test` split (a paired design: the OOD-vs-ID
gap is the surface form alone). Expressions are disjoint between `train`, `validation` and the
test group (test, OOD, probe); no question text appears in two splits. There are only 243
distinct d=1 problems, so `train` gets the d=1 problems the held-out splits leave, and its
missing d=1 share is spread over d = 2..4.

`noisy_solution` is the SFT teacher of tiny-testbed.md §1/§3: each step is wrong with p_noise,
off by δ ∈ {±1, ±2}; with p_prop the wrong value is carried on (wrong answer), otherwise it is a
"slip" (wrong value written, right value carried), which produces lucky hits.
"""

from __future__ import annotations

import hashlib
import itertools
import random
from collections.abc import Iterable
from dataclasses import dataclass

OPERATORS = ("+", "-", "*")
OPERAND_RANGE = (1, 9)
VALUE_LIMIT = 99
THINK_CLOSE = "</think>"
BOXED = "\\boxed{"
LETTERS = "ABCDEFGHIJ"
WORDS = {"+": "plus", "-": "minus", "*": "times"}

ID_DIFFICULTIES = (1, 2, 3, 4)
PROBE_DIFFICULTY = 5

SPLITS: dict[str, dict[str, object]] = {
    "train": {"form": "symbolic", "mirrors": None, "role": "RL training questions"},
    "validation": {"form": "symbolic", "mirrors": None, "role": "in-training evaluation"},
    "test": {"form": "symbolic", "mirrors": "ID math benchmarks", "role": "ID test"},
    "ood_words": {"form": "words", "mirrors": "ARC-c", "role": "OOD: operators written in words"},
    "ood_choice4": {"form": "choice4", "mirrors": "GPQA-Diamond", "role": "OOD: 4-option multiple choice"},
    "ood_choice10": {"form": "choice10", "mirrors": "MMLU-Pro", "role": "OOD: 10-option multiple choice"},
    "probe_length": {"form": "symbolic", "mirrors": None, "role": "length-generalisation probe (d=5)"},
}
"""Every split: surface form, the paper benchmark it mirrors, and its role."""

DEFAULT_SIZES = {"train": 1600, "validation": 200, "test": 400, "ood_words": 200, "ood_choice4": 200,
                 "ood_choice10": 200, "probe_length": 100}
"""Rows per split. train ≈ 200 RL steps × 16 questions / 2 visits (paper: ~2 epochs)."""


# ------------------------------------------------------------------------------------ expressions
@dataclass(frozen=True)
class Expression:
    """An arithmetic expression: operands[i] op[i] operands[i+1] ...; difficulty = len(ops)."""

    operands: tuple[int, ...]
    ops: tuple[str, ...]

    @property
    def difficulty(self) -> int:
        return len(self.ops)

    def symbolic(self) -> str:
        """`3+4*2-5`."""
        return str(self.operands[0]) + "".join(op + str(b) for op, b in zip(self.ops, self.operands[1:]))

    def words(self) -> str:
        """`3 plus 4 times 2 minus 5`."""
        return " ".join([str(self.operands[0])] + [f"{WORDS[op]} {b}" for op, b in zip(self.ops, self.operands[1:])])


def _apply(a: int, op: str, b: int) -> int:
    return a + b if op == "+" else a - b if op == "-" else a * b


def _next_index(ops: list[str]) -> int:
    """Index of the operation the canonical order reduces next: leftmost `*`, else leftmost."""
    return ops.index("*") if "*" in ops else 0


def reduce_steps(expr: Expression, noise: list[tuple[int, bool]] | None = None) -> tuple[list[str], int]:
    """Canonical reduction of `expr`: (steps like "4*2=8", final value).

    `noise[i] = (delta, carry)` perturbs step i: the written result is r + delta; if `carry`, the
    wrong value replaces r in later steps (wrong answer), else the correct r is carried (a slip).
    """
    values, ops = list(expr.operands), list(expr.ops)
    steps = []
    for i in range(expr.difficulty):
        j = _next_index(ops)
        result = _apply(values[j], ops[j], values[j + 1])
        delta, carry = noise[i] if noise else (0, True)
        steps.append(f"{values[j]}{ops[j]}{values[j + 1]}={result + delta}")
        values[j:j + 2] = [result + delta if carry else result]
        del ops[j]
    return steps, values[0]


def is_valid(expr: Expression) -> bool:
    """All intermediate values (and the answer) within ±VALUE_LIMIT."""
    values, ops = list(expr.operands), list(expr.ops)
    while ops:
        j = _next_index(ops)
        values[j:j + 2] = [_apply(values[j], ops[j], values[j + 1])]
        del ops[j]
        if abs(values[j]) > VALUE_LIMIT:
            return False
    return True


def enumerate_expressions(difficulty: int) -> list[Expression]:
    """Every valid expression of a difficulty, in a fixed order (d=1: 243; d=2: a few thousand)."""
    lo, hi = OPERAND_RANGE
    operands = range(lo, hi + 1)
    out = []
    for ops in itertools.product(OPERATORS, repeat=difficulty):
        for nums in itertools.product(operands, repeat=difficulty + 1):
            expr = Expression(tuple(nums), tuple(ops))
            if is_valid(expr):
                out.append(expr)
    return out


def random_expression(difficulty: int, rng: random.Random) -> Expression:
    """A uniformly random valid expression (rejection sampling)."""
    lo, hi = OPERAND_RANGE
    while True:
        expr = Expression(tuple(rng.randint(lo, hi) for _ in range(difficulty + 1)),
                          tuple(rng.choice(OPERATORS) for _ in range(difficulty)))
        if is_valid(expr):
            return expr


def _left_to_right(expr: Expression) -> int:
    value = expr.operands[0]
    for op, b in zip(expr.ops, expr.operands[1:]):
        value = _apply(value, op, b)
    return value


def option_slot(value: int, n_options: int) -> int:
    """Letter index of an option value: its final digit (10 options) or final digit mod 4 (4 options)."""
    digit = int(str(value)[-1])
    return digit if n_options == 10 else digit % 4


def make_choices(expr: Expression, n_options: int, rng: random.Random) -> tuple[list[int], int]:
    """`n_options` option values containing the answer, listed by `option_slot`; (values, gold index).

    Distractors are plausible slips, one per other slot: the value without operator precedence,
    then the answer ±1..±6 (the teacher's δ and carried errors), then ±7..±15, in random order.
    """
    if n_options not in (4, 10):
        raise ValueError(f"n_options must be 4 or 10, got {n_options}")
    answer = reduce_steps(expr)[1]
    near = [answer + d for d in range(-6, 7) if d != 0]
    far = [answer + d for d in range(-15, 16) if abs(d) > 6]
    rng.shuffle(near)
    rng.shuffle(far)
    slots: dict[int, int] = {option_slot(answer, n_options): answer}
    for value in [_left_to_right(expr)] + near + far:  # ±1..±15 reaches every final digit
        slots.setdefault(option_slot(value, n_options), value)
    return [slots[i] for i in range(n_options)], option_slot(answer, n_options)


# ------------------------------------------------------------------------------------ problems
def make_problem(expr: Expression, form: str, split: str, rng: random.Random) -> dict:
    """One data row (see module docstring). `form`: symbolic | words | choice4 | choice10."""
    steps, value = reduce_steps(expr)
    choices: list[int] | None = None
    if form == "symbolic":
        question, answer, kind = expr.symbolic(), str(value), "math"
    elif form == "words":
        question, answer, kind = expr.words(), str(value), "math"
    elif form in ("choice4", "choice10"):
        choices, gold = make_choices(expr, 4 if form == "choice4" else 10, rng)
        options = " ".join(f"{v}({LETTERS[i]})" for i, v in enumerate(choices))
        question, answer, kind = f"{expr.symbolic()} {options}", LETTERS[gold], "choice"
    else:
        raise ValueError(f"unknown form {form!r}")
    digest = hashlib.sha1(f"{form}|{question}".encode()).hexdigest()[:12]
    return {
        "qid": f"{split}-{digest}",
        "split": split,
        "prompt": [{"role": "user", "content": question}],
        "question": question,
        "answer": answer,
        "kind": kind,
        "form": form,
        "difficulty": expr.difficulty,
        "operands": list(expr.operands),
        "ops": list(expr.ops),
        "steps": steps,
        "value": value,
        "choices": choices,
    }


def expression_of(problem: dict) -> Expression:
    return Expression(tuple(problem["operands"]), tuple(problem["ops"]))


def target_response(problem: dict, steps: list[str] | None = None, value: int | None = None) -> str:
    """Response text (after the `<think>` that opens the turn) for given steps and final value.

    Defaults to the canonical solution. For choice problems the think block ends with a lookup
    tag `(C)` naming the option equal to `value` (the nearest option when none equals it), and the
    boxed answer is that letter.
    """
    steps = problem["steps"] if steps is None else steps
    value = problem["value"] if value is None else value
    boxed, lookup = str(value), ""
    if problem["kind"] == "choice":
        choices = problem["choices"]
        boxed = LETTERS[min(range(len(choices)), key=lambda i: (abs(choices[i] - value), i))]
        lookup = f"({boxed})"
    return ";".join(steps) + lookup + THINK_CLOSE + BOXED + boxed + "}"


def noisy_solution(problem: dict, rng: random.Random, p_noise: float = 0.2, p_prop: float = 0.7) -> str:
    """A noisy-teacher response (tiny-testbed.md §1): see the module docstring."""
    noise = []
    for _ in range(problem["difficulty"]):
        if rng.random() < p_noise:
            noise.append((rng.choice((-2, -1, 1, 2)), rng.random() < p_prop))
        else:
            noise.append((0, True))
    steps, value = reduce_steps(expression_of(problem), noise)
    return target_response(problem, steps, value)


# ------------------------------------------------------------------------------------ grading
def split_response(response: str) -> tuple[str | None, str | None]:
    """(think text, boxed answer) of a response; None for a part that is missing.

    The think text is everything before the first `</think>` (a leading `<think>` is dropped);
    the answer is the content of the last `\\boxed{...}` after `</think>` (paper.md §3.5 region).
    """
    if THINK_CLOSE not in response:
        return None, None
    think, after = response.split(THINK_CLOSE, 1)
    think = think.removeprefix("<think>").strip()
    start = after.rfind(BOXED)
    if start < 0:
        return think, None
    end = after.find("}", start + len(BOXED))
    if end < 0:
        return think, None
    return think, after[start + len(BOXED):end].strip()


def answer_correct(problem: dict, response: str) -> bool:
    """Exact-match reward: the boxed answer after `</think>` equals the gold answer string."""
    return split_response(response)[1] == problem["answer"]


def check_reasoning(problem: dict, response: str) -> bool:
    """True when every reasoning step is correct: the `;`-separated steps before `</think>` equal
    the canonical steps exactly (the reduction order is fixed, so this is step-wise correctness);
    for choice problems the think block must also end with the gold lookup tag `(C)`."""
    think, _ = split_response(response)
    if think is None:
        return False
    if problem["kind"] == "choice":  # the lookup tag must name the gold option
        tag = f"({problem['answer']})"
        if not think.endswith(tag):
            return False
        think = think[:-len(tag)]
    return [s.strip() for s in think.split(";")] == problem["steps"]


def classify(problem: dict, response: str) -> str:
    """`logical` (right answer, all steps right), `lucky` (right answer, a wrong step) or `wrong`."""
    if not answer_correct(problem, response):
        return "wrong"
    return "logical" if check_reasoning(problem, response) else "lucky"


# ------------------------------------------------------------------------------------ splits
def _draw(difficulty: int, count: int, taken: set[Expression], rng: random.Random,
          pools: dict[int, list[Expression]]) -> list[Expression]:
    """`count` new expressions of a difficulty not in `taken` (which is updated)."""
    out: list[Expression] = []
    if difficulty in pools:  # small spaces: shuffled enumeration
        free = [e for e in pools[difficulty] if e not in taken]
        rng.shuffle(free)
        out = free[:count]
    else:
        for _ in range(count * 1000):
            if len(out) == count:
                break
            expr = random_expression(difficulty, rng)
            if expr not in taken and expr not in out:
                out.append(expr)
    taken.update(out)
    return out


def _per_difficulty(total: int, difficulties: Iterable[int]) -> dict[int, int]:
    ds = list(difficulties)
    return {d: total // len(ds) + (1 if i < total % len(ds) else 0) for i, d in enumerate(ds)}


def make_splits(seed: int = 0, sizes: dict[str, int] | None = None) -> dict[str, list[dict]]:
    """All splits, deterministic in (seed, sizes). Sizes default to DEFAULT_SIZES.

    Order of drawing: test, validation, probe_length, then train; the OOD sets re-render the first
    expressions of `test` for each difficulty. Raises ValueError naming the split when a size
    cannot be met (an OOD set larger than `test`, or more d=1..2 problems than exist).
    """
    sizes = {**DEFAULT_SIZES, **(sizes or {})}
    for name, size in sizes.items():
        if name not in SPLITS:
            raise ValueError(f"unknown split {name!r}; known: {', '.join(SPLITS)}")
        if size < 0:
            raise ValueError(f"split size for {name!r} must be >= 0, got {size}")
    pools = {d: enumerate_expressions(d) for d in (1, 2)}
    taken: set[Expression] = set()
    exprs: dict[str, list[Expression]] = {}
    for name in ("test", "validation"):
        rng = random.Random(f"{seed}/{name}")
        exprs[name] = []
        for d, n in _per_difficulty(sizes[name], ID_DIFFICULTIES).items():
            got = _draw(d, n, taken, rng, pools)
            if len(got) < n:
                raise ValueError(f"split {name!r}: only {len(got)} unused d={d} problems left, need {n}")
            exprs[name] += got
    exprs["probe_length"] = _draw(PROBE_DIFFICULTY, sizes["probe_length"], taken,
                                  random.Random(f"{seed}/probe_length"), pools)
    # train: uniform over d, the d=1 shortfall spread over the other difficulties
    rng = random.Random(f"{seed}/train")
    want = _per_difficulty(sizes["train"], ID_DIFFICULTIES)
    exprs["train"] = _draw(1, want[1], taken, rng, pools)
    for d, n in _per_difficulty(sizes["train"] - len(exprs["train"]), ID_DIFFICULTIES[1:]).items():
        exprs["train"] += _draw(d, n, taken, rng, pools)
    if len(exprs["train"]) < sizes["train"]:
        raise ValueError(f"split 'train': only {len(exprs['train'])} problems available, asked {sizes['train']}")
    by_d = {d: [e for e in exprs["test"] if e.difficulty == d] for d in ID_DIFFICULTIES}
    for name in ("ood_words", "ood_choice4", "ood_choice10"):
        per_d = _per_difficulty(sizes[name], ID_DIFFICULTIES)
        if any(per_d[d] > len(by_d[d]) for d in ID_DIFFICULTIES):
            raise ValueError(f"split {name!r}: size {sizes[name]} exceeds the test split it re-renders "
                             f"({sizes['test']})")
        exprs[name] = [e for d in ID_DIFFICULTIES for e in by_d[d][:per_d[d]]]
    out: dict[str, list[dict]] = {}
    for name in SPLITS:
        rng = random.Random(f"{seed}/{name}/render")
        rows = [make_problem(e, str(SPLITS[name]["form"]), name, rng) for e in exprs[name]]
        rng.shuffle(rows)
        out[name] = rows
    return out


def heldout_expressions(splits: dict[str, list[dict]]) -> set[Expression]:
    """Expressions of every split except `train`: SFT must never see these."""
    return {expression_of(r) for name, rows in splits.items() if name != "train" for r in rows}


# ------------------------------------------------------------------------------------ files
def write_dataset(out_dir, splits: dict[str, list[dict]], fmt: str = "jsonl", meta: dict | None = None) -> dict:
    """Write one file per split (`jsonl` or `parquet`) plus manifest.json (rows, sha256, forms).

    Every file is written atomically; the manifest last, so its presence means the set is complete.
    """
    from pathlib import Path

    from exgrpo.io import atomic_path, write_json, write_jsonl

    if fmt not in ("jsonl", "parquet"):
        raise ValueError(f"format must be jsonl or parquet, got {fmt!r}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    manifest: dict = {"format": fmt, **(meta or {}), "splits": {}}
    for name, rows in splits.items():
        path = out_dir / f"{name}.{fmt}"
        if fmt == "jsonl":
            write_jsonl(path, rows)
        else:
            import pyarrow as pa
            import pyarrow.parquet as pq

            with atomic_path(path) as tmp:
                pq.write_table(pa.Table.from_pylist(rows), tmp)
        counts: dict[str, int] = {}
        for r in rows:
            counts[str(r["difficulty"])] = counts.get(str(r["difficulty"]), 0) + 1
        manifest["splits"][name] = {"file": path.name, "rows": len(rows), "sha256": _sha256(path),
                                    "difficulties": dict(sorted(counts.items())), **SPLITS[name]}
    write_json(out_dir / "manifest.json", manifest)
    return manifest


def load_manifest(data_dir) -> dict:
    """manifest.json of a `make-data` directory (FileNotFoundError naming it when absent)."""
    from pathlib import Path

    from exgrpo.io import read_json

    return read_json(Path(data_dir) / "manifest.json")


def load_split(data_dir, split: str, verify: bool = True) -> list[dict]:
    """Rows of one split; with `verify`, the file's sha256 must match the manifest."""
    from pathlib import Path

    from exgrpo.io import read_jsonl

    manifest = load_manifest(data_dir)
    if split not in manifest["splits"]:
        raise KeyError(f"{data_dir}: no split {split!r}; has {', '.join(manifest['splits'])}")
    info = manifest["splits"][split]
    path = Path(data_dir) / info["file"]
    if not path.exists():
        raise FileNotFoundError(f"{path}: split file listed in manifest.json is missing")
    if verify and _sha256(path) != info["sha256"]:
        raise ValueError(f"{path}: sha256 does not match manifest.json (file changed since make-data)")
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    return read_jsonl(path)


def _sha256(path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
