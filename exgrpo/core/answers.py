"""Answer extraction for the training reward: pure string functions, linear time, no math-verify.

- `select_region`: the graded text (after `</think>`, as released).
- `find_boxes` / `box_spans`: balanced `\\boxed{...}` / `\\fbox{...}` in text order.
- `release_box_view`: the region rewritten so that math-verify 0.9.0 reads the boxes the way
  math-verify 0.6.0 (pinned by the release) read them, see its docstring.
- `extract_choice`: a final letter A-J for multiple choice.

Everything here is decidable without math-verify, so the reward runs it in the caller and sends only
what needs math-verify to the worker pool.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

THINK_CLOSE = "</think>"

_BOX_RE = re.compile(r"\\(?:boxed|fbox)\s*\{")
_PLAIN_INT_RE = re.compile(r"[+-]?\d{1,300}")
_TEXT_WRAP_RE = re.compile(r"\\(?:text|textbf|mathrm|mathbf|texttt)\s*\{([^{}]*)\}")
_LETTER_RE = re.compile(r"\(?([A-J])(?:[).:]|\s|$)")
_ANSWER_LETTER_RE = re.compile(r"(?i:answer)(?:\s*(?i:is))?\s*[:：]?[\s*$]*\(?\s*([A-J])(?![A-Za-z0-9])")
# math-verify 0.6.0 joins bare boxes into one answer only across these connectors (its boxed regex:
# `\s*(?:and|or|,)\s*` between boxes); any other text between two bare boxes makes the last one win.
_BOX_CONNECTOR_RE = re.compile(r"\s*(?:and|or|,)\s*")
_MATH_DELIMS_RE = re.compile(r"\\\$|\$\$|\$|\\\[|\\\]|\\\(|\\\)")
_ONLY_BOX_RE = re.compile(
    r"\s*(?:\$\$|\$|\\\[|\\\()?\s*\\boxed\{([^{}]*)\}\s*(?:\$\$|\$|\\\]|\\\))?\s*\.?\s*"
)


@dataclass(frozen=True)
class Box:
    """One balanced box: `text[start:end]` is `\\boxed{content}`; `content` is what is inside."""

    start: int
    end: int
    content: str


def select_region(response: str, region: str = "after_think", require_think_close: bool = True) -> str | None:
    """The graded text: after the first `</think>` up to the next one (released `split(...)[1]`),
    or the whole response for `full`. None when `</think>` is required but missing."""
    if region == "full":
        return response
    if THINK_CLOSE in response:
        return response.split(THINK_CLOSE, 2)[1]
    return None if require_think_close else response


def box_spans(text: str) -> list[Box]:
    """All balanced `\\boxed{...}` / `\\fbox{...}` in text order (nested ones too).

    One pass over the braces (escaped `\\{` `\\}` are literal set braces), so adversarial inputs
    stay linear. Unclosed boxes are skipped.
    """
    close_of: dict[int, int] = {}
    stack: list[int] = []
    for m in re.finditer(r"(?<!\\)[{}]", text):
        if m.group() == "{":
            stack.append(m.start())
        elif stack:
            close_of[stack.pop()] = m.start()
    boxes = []
    for m in _BOX_RE.finditer(text):
        open_at = m.end() - 1
        if open_at in close_of:
            boxes.append(Box(m.start(), close_of[open_at] + 1, text[open_at + 1 : close_of[open_at]]))
    return boxes


def find_boxes(text: str) -> list[tuple[int, str]]:
    """`box_spans` as (start offset, content) pairs."""
    return [(b.start, b.content) for b in box_spans(text)]


def _in_math(text: str, positions: list[int]) -> list[bool]:
    """For each sorted offset: whether it lies inside `$...$`, `$$...$$`, `\\[...\\]` or `\\(...\\)`."""
    out: list[bool] = []
    open_delim: str | None = None
    marks = iter(_MATH_DELIMS_RE.finditer(text))
    mark = next(marks, None)
    for pos in positions:
        while mark is not None and mark.start() < pos:
            d = mark.group()
            if d != "\\$":
                if open_delim is None and d in ("$$", "$", "\\[", "\\("):
                    open_delim = d
                elif (
                    open_delim is not None
                    and d == {"$$": "$$", "$": "$", "\\[": "\\]", "\\(": "\\)"}[open_delim]
                ):
                    open_delim = None
            mark = next(marks, None)
        out.append(open_delim is not None)
    return out


def release_box_view(text: str) -> str:
    """`text` with the `\\boxed{}` wrapper removed from every bare box but the last group.

    Why: math-verify 0.6.0 (the release's) and 0.9.0 (installed here) read several boxes
    differently. 0.6.0 reads boxes outside math delimiters ("bare") as one answer only when they are
    joined by `and`, `or` or `,` (`\\boxed{1}, \\boxed{2}` -> {1, 2}); otherwise the last box wins
    (`Step: \\boxed{3}. Final: \\boxed{5}` -> 5). 0.9.0 merges nearby bare boxes whatever is between
    them (-> {3, 5}). Unwrapping the earlier bare groups leaves 0.9.0 one group to read, so it gives
    0.6.0's answer; boxes inside one math environment (`$\\boxed{a} \\quad \\boxed{b}$`) are read as a
    set by both versions and are left alone, and so is any text after the last box (a final answer
    written after it still counts, as in both versions). Nested boxes are left alone.
    """
    boxes = box_spans(text)
    top = [b for i, b in enumerate(boxes) if not any(o.start < b.start < o.end for o in boxes[:i])]
    bare = [b for b, inside in zip(top, _in_math(text, [b.start for b in top])) if not inside]
    if len(bare) < 2:
        return text
    last_group_start = len(bare) - 1
    while last_group_start > 0 and _BOX_CONNECTOR_RE.fullmatch(
        text[bare[last_group_start - 1].end : bare[last_group_start].start]
    ):
        last_group_start -= 1
    if last_group_start == 0:
        return text
    pieces, at = [], 0
    for b in bare[:last_group_start]:
        pieces += [text[at : b.start], b.content]
        at = b.end
    return "".join([*pieces, text[at:]])


def only_boxed_content(text: str) -> str | None:
    """The content when `text` is nothing but one flat box (optionally in `$`/`\\[`, with a final
    period), else None. Used by the integer fast path: for such a region every rule reads that box."""
    m = _ONLY_BOX_RE.fullmatch(text)
    return None if m is None else m.group(1)


def plain_int(text: str) -> tuple[str, str] | None:
    """(sign, digits) of a plain integer literal (at most 300 digits), canonical (no leading zeros,
    no -0); else None."""
    text = text.strip()
    if not _PLAIN_INT_RE.fullmatch(text):
        return None
    sign = "-" if text[0] == "-" else ""
    digits = text.lstrip("+-").lstrip("0") or "0"
    return ("" if digits == "0" else sign), digits


def choice_letter(text: str) -> str | None:
    """A choice letter from short text such as `C`, `(C)`, `\\text{C}`, `C) 42`."""
    text = _TEXT_WRAP_RE.sub(r"\1", text).replace("$", "").strip()
    m = _LETTER_RE.match(text)
    return m.group(1) if m else None


def extract_choice(text: str) -> str | None:
    """The final letter A-J: the last of a boxed letter, `ANSWER: C` or `answer is (C)`; a region
    that is just a letter also counts. None when there is none."""
    candidates = [(pos, choice_letter(content)) for pos, content in find_boxes(text)]
    candidates += [(m.start(), m.group(1)) for m in _ANSWER_LETTER_RE.finditer(text)]
    candidates = [c for c in candidates if c[1] is not None]
    if candidates:
        return max(candidates)[1]
    stripped = text.strip()
    return choice_letter(stripped) if len(stripped) <= 12 else None


__all__ = [
    "THINK_CLOSE",
    "Box",
    "box_spans",
    "choice_letter",
    "extract_choice",
    "find_boxes",
    "only_boxed_content",
    "plain_int",
    "release_box_view",
    "select_region",
]
