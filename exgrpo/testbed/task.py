"""Synthetic verifiable task for the CPU testbed: integer arithmetic with checkable steps.

A problem is an expression of d operations from {+, -, *} over integers 1-9 (d = difficulty),
evaluated with operator precedence; any intermediate |value| > 99 is rejected. The canonical
solution reduces the leftmost `*` first, then the leftmost `+`/`-`, writing one step per
operation, and ends with the answer boxed after the think block (paper §3.5-3.6 format):

    question  3+4*2-5
    response  4*2=8;3+8=11;11-5=6</think>\\boxed{6}

The prompt is the paper's chat form (system/user/assistant roles, the assistant turn opens with
`<think>`, paper §G.1), with three departures for tiny models:
- the long LUFFY system text is dropped (as the released evaluation does with `--remove_system`):
  the messages are a single user turn holding the question;
- no spaces or newlines around `</think>` and `\\boxed{` (each is one token; spaces cost tokens);
- "reasoning correct" is decided exactly by `check_reasoning` (steps equal the canonical ones)
  instead of the paper's LLM judge (paper §F.2).

Splits (`exgrpo.testbed.splits.make_splits`): `train` (RL questions), `validation`, `test` (ID, d = 1..4), three OOD
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
  model trained on d <= 4 scores near zero here, docs/testbed.md).
The three OOD sets re-render expressions of the ID `test` split (a paired design: the OOD-vs-ID
gap is the surface form alone). Expressions are disjoint between `train`, `validation` and the
test group (test, OOD, probe); no question text appears in two splits. There are only 243
distinct d=1 problems, so `train` gets the d=1 problems the held-out splits leave, and its
missing d=1 share is spread over d = 2..4.

`noisy_solution` is the SFT teacher (docs/testbed.md): each step is wrong with p_noise,
off by δ ∈ {±1, ±2}; with p_prop the wrong value is carried on (wrong answer), otherwise it is a
"slip" (wrong value written, right value carried), which produces lucky hits.
"""

from __future__ import annotations

import hashlib
import itertools
import random
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
        return " ".join(
            [str(self.operands[0])] + [f"{WORDS[op]} {b}" for op, b in zip(self.ops, self.operands[1:])]
        )


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
        values[j : j + 2] = [result + delta if carry else result]
        del ops[j]
    return steps, values[0]


def is_valid(expr: Expression) -> bool:
    """All intermediate values (and the answer) within ±VALUE_LIMIT."""
    values, ops = list(expr.operands), list(expr.ops)
    while ops:
        j = _next_index(ops)
        values[j : j + 2] = [_apply(values[j], ops[j], values[j + 1])]
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
        expr = Expression(
            tuple(rng.randint(lo, hi) for _ in range(difficulty + 1)),
            tuple(rng.choice(OPERATORS) for _ in range(difficulty)),
        )
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
    """A noisy-teacher response (docs/testbed.md): see the module docstring."""
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
    the answer is the content of the last `\\boxed{...}` after `</think>` (the release's grading region, docs/evaluation.md).
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
    return think, after[start + len(BOXED) : end].strip()


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
        think = think[: -len(tag)]
    return [s.strip() for s in think.split(";")] == problem["steps"]


def step_matches(steps: list[str] | tuple[str, ...], kind: str, answer: str, response: str) -> int:
    """How many reasoning steps of `response` equal the canonical step at the same position (0 without
    `</think>`); a choice problem's trailing lookup tag `(X)` is not a step. The continuous reward's part."""
    think, _ = split_response(response)
    if think is None:
        return 0
    if kind == "choice" and think.endswith(f"({answer})"):
        think = think[: -len(f"({answer})")]
    given = [s.strip() for s in think.split(";")]
    return sum(1 for i, step in enumerate(steps) if i < len(given) and given[i] == step)


def step_credit(
    steps: list[str] | tuple[str, ...], kind: str, answer: str, response: str, answer_reward: float
) -> float:
    """The tiny task's continuous reward (`ExGRPOConfig.reward_kind="step_credit"`, the Table 2 analogue):
    (steps right at their position + `answer_reward`, the binary grade) / (number of canonical steps + 1)."""
    return (step_matches(steps, kind, answer, response) + float(answer_reward)) / (len(steps) + 1)


def classify(problem: dict, response: str) -> str:
    """`logical` (right answer, all steps right), `lucky` (right answer, a wrong step) or `wrong`."""
    if not answer_correct(problem, response):
        return "wrong"
    return "logical" if check_reasoning(problem, response) else "lucky"
