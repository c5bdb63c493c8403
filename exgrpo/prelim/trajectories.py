"""Trajectory analysis of the preliminary study: which questions and trajectories are worth replaying.

Paper §3.2 (Fig. 1b/c, Fig. 10, Tables 11-12): sample K rollouts per training question from a trained
model, bucket each question by its rollout correctness k/K into Hard (0, 25%], Medium (25%, 75%) and
Easy [75%, 100%) (the buckets of masked GRPO, Eq. 14, and of `exgrpo.core.advantages.difficulty_mask`),
and for every correct-answer trajectory record its mean token entropy and perplexity under the model,
whether its reasoning is correct (a `Judge`) and whether it contains code (`code_rules`, R1-R17).
The records are `results/<source>/prelim/<backbone>/trajectories*.parquet` (results/README.md).

Departures from the paper, stated up front:
- Questions with k = 0 or k = K belong to no bucket (as in Eq. 14) and give no records; `summary` counts them.
- The bucket boundaries default to `ExGRPOConfig.mask_hard_high` / `mask_easy_low` (0.25 / 0.75), the
  boundaries the masked-GRPO runs use, rather than the paper's inconsistent §3.2 text
  (Fig. 10 labels Medium (25%, 75%), the text (25%, 75%]).
- Answer correctness is the training reward (`exgrpo.core.reward.Verifier`, region after `</think>`).
"""

from __future__ import annotations

import json
import math
import random
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from exgrpo.core.config import ConfigError, ExGRPOConfig
from exgrpo.prelim.code_rules import detect
from exgrpo.prelim.judge import Judge, JudgeItem
from exgrpo.prelim.policies import Policy, Sample, TokenStats

BUCKETS = ("hard", "medium", "easy")


# ------------------------------------------------------------------------------------------ buckets
@dataclass(frozen=True)
class BucketBounds:
    """Hard = (0, hard_high], Medium = (hard_high, easy_low), Easy = [easy_low, 1) (paper Eq. 14)."""

    hard_high: float = 0.25
    easy_low: float = 0.75

    def __post_init__(self) -> None:
        if not 0.0 <= self.hard_high < self.easy_low <= 1.0:
            raise ConfigError(
                "mask_hard_high", f"need 0 <= hard_high ({self.hard_high}) < easy_low ({self.easy_low}) <= 1"
            )

    @classmethod
    def from_config(cls, cfg: ExGRPOConfig) -> BucketBounds:
        return cls(cfg.mask_hard_high, cfg.mask_easy_low)


def bucket_of(n_correct: int, n_rollouts: int, bounds: BucketBounds = BucketBounds()) -> str | None:
    """The difficulty bucket of a question with `n_correct` of `n_rollouts` correct, or None (k = 0 or K).

    Same comparisons as `exgrpo.core.advantages.difficulty_mask` on the accuracy k/K (tests check agreement).
    """
    if n_rollouts < 1 or not 0 <= n_correct <= n_rollouts:
        raise ValueError(
            f"need 0 <= n_correct <= n_rollouts and n_rollouts >= 1, got {n_correct}/{n_rollouts}"
        )
    acc = n_correct / n_rollouts
    if n_correct == 0 or n_correct == n_rollouts:
        return None
    if acc <= bounds.hard_high:
        return "hard"
    if acc < bounds.easy_low:
        return "medium"
    return "easy"


# ------------------------------------------------------------------------------------------ questions
@dataclass
class Question:
    """One training question: chat prompt, gold answer, and the raw row (the step judge reads `steps`)."""

    problem_id: str
    messages: list[dict[str, str]]
    question: str
    answer: str
    kind: str = "math"
    difficulty: int | None = None
    row: dict[str, Any] | None = None


def _from_tiny(row: dict[str, Any]) -> Question:
    return Question(
        str(row["qid"]),
        list(row["prompt"]),
        str(row["question"]),
        str(row["answer"]),
        str(row.get("kind", "math")),
        row.get("difficulty"),
        row,
    )


def _from_verl(row: dict[str, Any], index: int, path: Path) -> Question:
    """A verl-format row as in the released parquets (prompt = chat messages, reward_model.ground_truth = gold)."""
    prompt, reward = row.get("prompt"), row.get("reward_model") or {}
    if not isinstance(prompt, list) or not prompt or "ground_truth" not in reward:
        raise ConfigError(
            "data",
            f"{path}: row {index} is not verl format (needs 'prompt' messages and "
            "'reward_model.ground_truth')",
        )
    extra = row.get("extra_info") or {}
    pid = extra.get("index", index) if isinstance(extra, dict) else index
    user = [m["content"] for m in prompt if m.get("role") == "user"]
    return Question(
        str(pid),
        [dict(m) for m in prompt],
        user[-1] if user else prompt[-1]["content"],
        str(reward["ground_truth"]),
        "math",
        None,
        None,
    )


def load_questions(data: str | Path, split: str) -> list[Question]:
    """Questions of `split`: a `make-data` directory (manifest.json) or verl parquet (`DIR/<split>.parquet`
    or a .parquet file). FileNotFoundError names what is missing."""
    data = Path(data)
    if (data / "manifest.json").exists():
        from exgrpo.testbed.splits import load_split

        try:
            return [_from_tiny(r) for r in load_split(data, split)]
        except KeyError as err:
            raise ConfigError("split", str(err).strip("'\"")) from None
    path = data if data.suffix == ".parquet" else data / f"{split}.parquet"
    if not path.exists():
        raise FileNotFoundError(
            f"{data}: neither a make-data directory (manifest.json) nor verl data ({path})"
        )
    import pyarrow.parquet as pq

    return [_from_verl(r, i, path) for i, r in enumerate(pq.read_table(path).to_pylist())]


def choose_questions(questions: list[Question], n: int, seed: int) -> list[Question]:
    """A seeded random subset of n questions in data order (n = 0 or n >= len: all of them)."""
    if n < 0:
        raise ConfigError("questions", f"must be >= 0, got {n}")
    if n == 0 or n >= len(questions):
        return list(questions)
    keep = sorted(random.Random(f"prelim/{seed}").sample(range(len(questions)), n))
    return [questions[i] for i in keep]


# ------------------------------------------------------------------------------------------ analysis
Grader = Callable[[list[str], list[str], list[str]], list[float]]
"""(responses, golds, kinds) -> rewards in {0, 1}."""


def default_grader() -> Grader:
    """The training reward (paper §3.5) with the default ExGRPOConfig reward settings."""
    from exgrpo.core.reward import Verifier

    verifier = Verifier.from_config(ExGRPOConfig())
    return lambda responses, golds, kinds: [float(s) for s in verifier.scores(responses, golds, kinds)]


def analyze(
    policy: Policy,
    questions: Sequence[Question],
    *,
    k: int,
    judge: Judge,
    seed: int,
    grader: Grader | None = None,
    bounds: BucketBounds = BucketBounds(),
    log: Callable[[str], None] | None = None,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Sample, grade, bucket, measure, judge and detect code (paper §3.2). Returns (records, summary).

    One record per correct-answer trajectory of a bucketed question: the `record_schema()` columns plus
    `response` (the text; written to parquet only with `write_records(..., keep_text=True)`).
    The policy is closed (GPU freed) before the judge runs.
    """
    if k < 2:
        raise ConfigError("k", f"need at least 2 rollouts per question to bucket by k/K, got {k}")
    if not questions:
        raise ConfigError("questions", "no questions to analyse")
    say = log or (lambda _msg: None)
    grader = grader or default_grader()
    say(f"sampling {k} rollouts for {len(questions)} questions")
    keep, n_correct, buckets = _correct_trajectories(policy, questions, k, grader, bounds)
    say(f"measuring {len(keep)} correct-answer trajectories")
    stats = policy.measure(keep)
    policy.close()
    say(f"judging with {judge.name}")
    verdicts = judge.judge(
        [
            JudgeItem(questions[s.question_index].question, s.text, questions[s.question_index].row)
            for s in keep
        ]
    )
    records = [
        _record(
            questions[s.question_index],
            s,
            st,
            verdict,
            n_correct=n_correct[s.question_index],
            k=k,
            bucket=buckets[s.question_index],
            judge=judge.name,
            seed=seed,
        )
        for s, st, verdict in zip(keep, stats, verdicts)
    ]
    summary = _summary(len(questions), k, buckets, n_correct, records)
    return records, summary


def _correct_trajectories(
    policy: Policy, questions: Sequence[Question], k: int, grader: Grader, bounds: BucketBounds
) -> tuple[list[Sample], Counter[int], dict[int, str | None]]:
    """Sample k rollouts per question and grade them: (the correct-answer trajectories of bucketed
    questions, the number correct per question index, each question's bucket or None)."""
    groups = policy.sample([q.messages for q in questions], k)
    flat: list[Sample] = [s for group in groups for s in group]
    rewards = grader(
        [s.text for s in flat],
        [questions[s.question_index].answer for s in flat],
        [questions[s.question_index].kind for s in flat],
    )
    correct = [r == 1.0 for r in rewards]
    n_correct = Counter(s.question_index for s, ok in zip(flat, correct) if ok)
    buckets = {qi: bucket_of(n_correct[qi], k, bounds) for qi in range(len(questions))}
    keep = [s for s, ok in zip(flat, correct) if ok and buckets[s.question_index] is not None]
    return keep, n_correct, buckets


def _record(
    q: Question,
    s: Sample,
    st: TokenStats,
    verdict: bool | None,
    *,
    n_correct: int,
    k: int,
    bucket: str | None,
    judge: str,
    seed: int,
) -> dict[str, Any]:
    """One trajectory's record (`record_schema()` columns plus `response`)."""
    rules = detect(s.text)
    return {
        "problem_id": q.problem_id,
        "sample_index": s.sample_index,
        "n_correct": n_correct,
        "n_rollouts": k,
        "accuracy": n_correct / k,
        "bucket": bucket,
        "difficulty": q.difficulty,
        "entropy": st.entropy,
        "nll": st.nll,
        "ppl": st.ppl,
        "reasoning_correct": verdict,
        "has_code": bool(rules),
        "code_rules": ",".join(rules),
        "answer_correct": True,
        "n_tokens": len(s.response_ids),
        "truncated": s.truncated,
        "judge": judge,
        "seed": seed,
        "response": s.text,
    }


def _summary(
    n_questions: int,
    k: int,
    buckets: dict[int, str | None],
    n_correct: Counter[int],
    records: list[dict[str, Any]],
) -> dict[str, Any]:
    per_bucket = Counter(b for b in buckets.values() if b is not None)
    verdicts = Counter(
        "yes" if r["reasoning_correct"] else "no" if r["reasoning_correct"] is False else "none"
        for r in records
    )
    return {
        "questions": n_questions,
        "k": k,
        "questions_per_bucket": {b: per_bucket[b] for b in BUCKETS},
        "all_wrong": sum(1 for qi in buckets if n_correct[qi] == 0),
        "all_correct": sum(1 for qi in buckets if n_correct[qi] == k),
        "trajectories": len(records),
        "trajectories_per_bucket": {b: sum(r["bucket"] == b for r in records) for b in BUCKETS},
        "verdicts": {v: verdicts[v] for v in ("yes", "no", "none")},
        "with_code": sum(r["has_code"] for r in records),
    }


# ------------------------------------------------------------------------------------------ records
def record_schema(keep_text: bool = False) -> Any:
    """pyarrow schema of the records: the results contract's five columns first, then the extras
    (and the response text with `keep_text`; off by default, paper-scale texts would bloat results/)."""
    import pyarrow as pa

    text = [("response", pa.string())] if keep_text else []
    return pa.schema(
        [
            ("bucket", pa.string()),
            ("entropy", pa.float64()),
            ("ppl", pa.float64()),
            ("reasoning_correct", pa.bool_()),
            ("has_code", pa.bool_()),
            ("problem_id", pa.string()),
            ("sample_index", pa.int64()),
            ("n_correct", pa.int64()),
            ("n_rollouts", pa.int64()),
            ("accuracy", pa.float64()),
            ("difficulty", pa.int64()),
            ("nll", pa.float64()),
            ("code_rules", pa.string()),
            ("answer_correct", pa.bool_()),
            ("n_tokens", pa.int64()),
            ("truncated", pa.bool_()),
            ("judge", pa.string()),
            ("seed", pa.int64()),
            *text,
        ]
    )


def write_records(
    path: str | Path,
    records: list[dict[str, Any]],
    metadata: dict[str, Any] | None = None,
    keep_text: bool = False,
) -> Path:
    """Write records as zstd parquet, atomically; `metadata` (provenance, summary) goes in the footer as
    JSON under the key `exgrpo`. Non-finite entropy/ppl values are an error (the loader rejects them)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from exgrpo.records.io import atomic_path

    for i, r in enumerate(records):
        for col in ("entropy", "ppl"):
            if not math.isfinite(r[col]):
                raise ValueError(f"record {i} ({r['problem_id']}#{r['sample_index']}): {col} is {r[col]}")
    schema = record_schema(keep_text)
    if metadata is not None:
        schema = schema.with_metadata({"exgrpo": json.dumps(metadata, sort_keys=True, default=str)})
    table = pa.Table.from_pylist(records, schema=schema)
    path = Path(path)
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp, compression="zstd")
    return path


def read_metadata(path: str | Path) -> dict[str, Any]:
    """The `exgrpo` footer metadata written by `write_records` ({} when absent)."""
    import pyarrow.parquet as pq

    meta = pq.read_schema(path).metadata or {}
    return json.loads(meta[b"exgrpo"]) if b"exgrpo" in meta else {}


__all__ = [
    "BUCKETS",
    "BucketBounds",
    "Question",
    "analyze",
    "bucket_of",
    "choose_questions",
    "default_grader",
    "load_questions",
    "read_metadata",
    "record_schema",
    "write_records",
]
