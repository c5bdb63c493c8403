"""Fixtures for the evaluation tests: benchmark files in each source's schema, and a fake lm-eval LM.

The fake LM knows the gold answer of every fixture question and answers the i-th copy of a prompt
(lm-eval sends k copies) with the i-th entry of `SCRIPT`: correct, wrong, truncated, unboxed.
(pytest runs with --import-mode=importlib, so tests reach these through fixtures, not imports.)
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

# Two problems per paper benchmark, in the hub dataset's own columns (gold as the grader must read it).
PAPER_ROWS: dict[str, list[dict]] = {
    "aime24": [
        {
            "id": 60,
            "problem": "Find the number of widgets w.",
            "solution": "...",
            "answer": "204",
            "url": "u",
            "year": "2024",
        },
        {
            "id": 61,
            "problem": "Find the remainder r.",
            "solution": "...",
            "answer": "25",
            "url": "u",
            "year": "2024",
        },
    ],
    "aime25": [
        {"id": "0", "problem": "Find the sum of all bases b.", "answer": "70"},
        {"id": "1", "problem": "Find the area of the heptagon.", "answer": "588"},
    ],
    "amc": [
        {"id": 0, "problem": "What is the value of the expression?", "answer": 142.0, "url": "u"},
        {"id": 1, "problem": "How many positive divisors?", "answer": 36.0, "url": "u"},
    ],
    "math500": [
        {
            "problem": "Convert the point to polar coordinates.",
            "solution": "...",
            "answer": "\\frac{14}{3}",
            "subject": "Precalculus",
            "level": 2,
            "unique_id": "test/precalculus/807.json",
        },
        {
            "problem": "Solve for x in the equation.",
            "solution": "...",
            "answer": "\\sqrt{2}",
            "subject": "Algebra",
            "level": 1,
            "unique_id": "test/algebra/1.json",
        },
    ],
    "minerva": [
        {"question": "Compute the luminosity ratio.", "answer": "7.5"},
        {"question": "Find the wavelength in nm.", "answer": "400"},
    ],
    "olympiadbench": [
        {
            "id": 1606,
            "question": "Determine the probability p.",
            "final_answer": ["$\\frac{1}{2}$"],
            "solution": ["..."],
            "context": None,
        },
        {
            "id": 1607,
            "question": "Find the smallest n.",
            "final_answer": ["$12$"],
            "solution": ["..."],
            "context": None,
        },
    ],
    "arc_c": [
        {
            "id": "Mercury_1",
            "question": "Which gas do plants absorb?",
            "choices": {
                "text": ["oxygen", "nitrogen", "carbon dioxide", "helium"],
                "label": ["A", "B", "C", "D"],
            },
            "answerKey": "C",
        },
        {
            "id": "Mercury_2",
            "question": "Which is a mammal?",
            "choices": {"text": ["shark", "whale", "trout", "eel"], "label": ["1", "2", "3", "4"]},
            "answerKey": "2",
        },
    ],
    "gpqa_diamond": [
        {
            "Record ID": "rec1",
            "Question": "Which particle mediates the strong force?",
            "Correct Answer": "gluon",
            "Incorrect Answer 1": "photon",
            "Incorrect Answer 2": "W boson",
            "Incorrect Answer 3": "graviton",
        },
        {
            "Record ID": "rec2",
            "Question": "What is the ground-state spin of the deuteron?",
            "Correct Answer": "1",
            "Incorrect Answer 1": "0",
            "Incorrect Answer 2": "1/2",
            "Incorrect Answer 3": "3/2",
        },
    ],
    "mmlu_pro": [
        {
            "question_id": 70,
            "question": "Find the characteristic of the ring 2Z.",
            "options": ["0", "30", "3", "10", "12", "50", "2", "100", "20", "5"],
            "answer": "A",
            "answer_index": 0,
            "cot_content": "",
            "category": "math",
            "src": "ori_mmlu",
        },
        {
            "question_id": 71,
            "question": "Which statement is true?",
            "options": ["a", "b", "c", "d"],
            "answer": "D",
            "answer_index": 3,
            "cot_content": "",
            "category": "math",
            "src": "ori_mmlu",
        },
    ],
}

# Gold answers as the documents must carry them (independent of the loader code).
PAPER_GOLDS: dict[str, list[str]] = {
    "aime24": ["204", "25"],
    "aime25": ["70", "588"],
    "amc": ["142", "36"],
    "math500": ["\\frac{14}{3}", "\\sqrt{2}"],
    "minerva": ["7.5", "400"],
    "olympiadbench": ["\\frac{1}{2}", "12"],
    "arc_c": ["C", "B"],
    "mmlu_pro": ["A", "D"],
}

SCRIPT = ("correct", "wrong", "truncated", "unboxed")
"""What the fake LM answers to the 1st, 2nd, 3rd, 4th copy of a prompt."""


def write_rows(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def completion(kind: str, gold: str, role: str, max_tokens: int) -> str:
    """The fake model's answer of type `role` for a gold answer (one character = one token)."""
    if role == "truncated":
        return ("I keep thinking " * (max_tokens // 16 + 1))[:max_tokens]
    if kind == "choice":
        wrong = "A" if gold != "A" else "B"
        return {
            "correct": f"Reasoning.</think>\nThe answer is \\boxed{{{gold}}}.",
            "wrong": f"Reasoning.</think>\nThe answer is \\boxed{{{wrong}}}.",
            "unboxed": f"Reasoning.</think>\nANSWER: {gold}",
        }[role]
    return {
        "correct": f"Let me compute.</think>\nSo the answer is \\boxed{{{gold}}}.",
        "wrong": "Let me compute.</think>\nSo the answer is \\boxed{99991}.",
        "unboxed": f"Let me compute.</think>\nThe final answer is ${gold}$.",
    }[role]


def make_fake_lm(golds_by_question: dict[str, tuple[str, str]], max_tokens: int, script=SCRIPT):
    """A fake lm-eval LM: `golds_by_question` maps question text -> (kind, gold)."""
    from lm_eval.api.model import LM

    class FakeLM(LM):
        def __init__(self) -> None:
            super().__init__()
            self.seen: dict[str, int] = {}
            self.chats: list[list[dict]] = []

        def apply_chat_template(self, chat_history, add_generation_prompt=True):
            self.chats.append(chat_history)
            return (
                "".join(f"<|{m['role']}|>{m['content']}<|end|>" for m in chat_history)
                + "<|assistant|><think>\n"
            )

        @property
        def tokenizer_name(self) -> str:
            return "fake-chars"

        def chat_template(self, chat_template=False):
            return "fake"

        def tok_encode(self, text: str) -> list[int]:
            return [ord(c) for c in text]

        def generate_until(self, requests, disable_tqdm=False):
            out = []
            for req in requests:
                prompt = req.args[0]
                question = next(q for q in golds_by_question if q in prompt)
                i = self.seen.get(prompt, 0)
                self.seen[prompt] = i + 1
                kind, gold = golds_by_question[question]
                out.append(completion(kind, gold, script[i % len(script)], max_tokens))
            return out

        def loglikelihood(self, requests, disable_tqdm=False):
            raise NotImplementedError

        def loglikelihood_rolling(self, requests, disable_tqdm=False):
            raise NotImplementedError

    return FakeLM()


@pytest.fixture
def paper_data(tmp_path: Path) -> Path:
    """A data folder with one `<benchmark>.jsonl` per paper benchmark, in the hub schema."""
    folder = tmp_path / "data"
    for name, rows in PAPER_ROWS.items():
        write_rows(folder / f"{name}.jsonl", rows)
    return folder


@pytest.fixture(scope="session")
def paper_rows() -> dict[str, list[dict]]:
    return PAPER_ROWS


@pytest.fixture(scope="session")
def paper_golds() -> dict[str, list[str]]:
    return PAPER_GOLDS


@pytest.fixture(scope="session")
def fake_lm():
    """`fake_lm(golds_by_question, max_tokens)` -> a fake lm-eval LM following `SCRIPT`."""
    return make_fake_lm


@pytest.fixture(scope="session")
def fake_completion():
    """`fake_completion(kind, gold, role, max_tokens)` -> the text the fake LM writes."""
    return completion


@pytest.fixture()
def captured_build_lm(monkeypatch):
    """Replace backends.build_lm with a stub that records its arguments and stops the command there.

    Returns (seen, Stop): `seen` receives backend/model_args/batch_size/device; the command raises Stop.
    """
    from exgrpo.eval import backends

    seen: dict = {}

    class Stop(Exception):
        pass

    def fake_build_lm(backend, model_args, batch_size, device=None):
        seen.update(backend=backend, model_args=model_args, batch_size=batch_size, device=device)
        raise Stop

    monkeypatch.setattr(backends, "build_lm", fake_build_lm)
    return seen, Stop
