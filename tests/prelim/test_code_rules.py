"""R1-R17 code detector: every rule fires on its own example, and plain math with LaTeX fires none."""

from __future__ import annotations

import pytest

from exgrpo.prelim.code_rules import CODE_RULES, RULE_IDS, detect, has_code

# One firing example per rule, written as a model would embed code in a math answer.
POSITIVE = {
    "R1": "Let me check numerically.\n```python\nx = 3\n```\n",
    "R2": "```output\n42\n```\nSo the answer is 42.",
    "R3": "def solve(n):\n    pass",
    "R4": "class Solver(object):\n    pass",
    "R5": "import numpy as np",
    "R6": "from sympy import symbols, solve",
    "R7": "The script does print(total) at the end.",
    "R8": "so the count is len(divisors) here",
    "R9": "we loop over range(1, n+1) to count",
    "R10": "for i in range(10):\n    s += i",
    "R11": "if n % 2 == 0:\n    n //= 2",
    "R12": "while n > 1:\n    n -= 1",
    "R13": "try:\n    y = 1 / x\nexcept ZeroDivisionError:\n    y = 0",
    "R14": "    return total",
    "R15": "squares = [k * k for k in nums]",
    "R16": "counts = {'red': 3, 'blue': 5}",
    "R17": "root = math.sqrt(49)",
}

# Plain math: LaTeX sets, function notation, intervals, set-builder, cases, capitalised "For"/"If"
# sentences ending in a colon, decimals and abbreviations. None of R1-R17 may fire.
PLAIN_MATH = r"""<think>
Let $f(x) = x^2 - 3x + 2$. We need the set \{1, 2\} of roots, so f(1) = f(2) = 0.
For each x in the interval [0, 1]:
the value f(x) lies in [0, 2], i.e. the range of f on [0, 1] is [0, 2].
If x > 2, then:
$$ g(x) = \begin{cases} x & \text{if } x > 0 \\ -x & \text{otherwise} \end{cases} $$
Consider the set $S = \{x : x > 0\}$ and $T = \{(a, b) : a + b = 5\}$.
We print the result on paper, e.g. 3.5 (approximately), and compute \sqrt{49} = 7.
The list of values is 1, 2, 3, and the length (number of terms) is 3.
From this we import nothing new. Return to the equation $\frac{a}{b} = 2$.
While this holds, we try another approach: set $h(t) = \log(t)$ for $t \in (0, \infty)$.
</think>
The answer is $\boxed{3}$."""


def test_there_are_seventeen_numbered_rules():
    assert tuple(f"R{i}" for i in range(1, 18)) == RULE_IDS
    assert all(rule.origin in ("paper-family", "added") for rule in CODE_RULES)
    assert {rule.rule_id for rule in CODE_RULES if rule.origin == "added"} == {"R2", "R14"}
    assert set(POSITIVE) == set(RULE_IDS)


@pytest.mark.parametrize("rule_id", RULE_IDS)
def test_each_rule_fires_on_its_example(rule_id):
    fired = detect(POSITIVE[rule_id])
    assert rule_id in fired, f"{rule_id} did not fire; fired: {fired}"
    assert has_code(POSITIVE[rule_id])


def test_plain_math_with_latex_fires_nothing():
    assert detect(PLAIN_MATH) == []
    assert not has_code(PLAIN_MATH)


@pytest.mark.parametrize(
    "text",
    [
        r"the set \{1,2\} has two elements",  # LaTeX set braces (R16)
        r"$\{x: x \in \mathbb{R}\}$",  # set-builder (R16)
        "f(x) = g(x) + h(2x)",  # function notation (R17)
        "the interval [0, 1] and [a, b]",  # intervals (R15)
        "For x in S:",  # capitalised prose (R10)
        "If this holds:",  # capitalised prose (R11)
        r"for $x$ in $S$:",  # LaTeX in a for-like line (R10)
        r"\text{if } x > 0:",  # cases (R11)
        "e.g. f(x), i.e. g(y)",  # abbreviations before calls (R17)
        "3.5(x + 1)",  # decimal times a bracket (R17)
        r"\operatorname{len}(S) = 3",  # LaTeX operator, not len( (R8)
    ],
)
def test_near_misses_do_not_fire(text):
    assert detect(text) == []


def test_realistic_code_answer_fires_the_expected_rules():
    answer = (
        "To verify, I'll compute it in Python.\n```python\nimport math\n\ndef f(n):\n"
        "    return math.comb(n, 2)\n\nprint(f(10))\n```\n```output\n45\n```\n"
        "</think>The answer is \\boxed{45}."
    )
    assert detect(answer) == ["R1", "R2", "R3", "R5", "R7", "R14", "R17"]


def test_detect_rejects_non_text():
    with pytest.raises(TypeError, match="str"):
        detect(None)  # type: ignore[arg-type]
