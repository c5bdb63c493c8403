"""Every tiny job checks its flags and input files before importing torch, transformers, lm-eval or pandas
(issue #47: a wrong `--data` took 7-9 s to report). Each bad call runs in a process where those libraries
cannot be imported at all, so an import that moved back in front of a check fails here with an ImportError
instead of exit status 2 and the message naming the file or field."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from exgrpo.cli import main

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "transformers", "lm_eval", "pandas", "sklearn", "matplotlib")
BLOCKED = (
    "import sys\n"
    f"for name in {HEAVY!r}:\n"
    "    sys.modules[name] = None  # `import name` raises ImportError\n"
    "from exgrpo.cli import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)
TINY_MATH = str(ROOT / "models" / "tiny" / "tiny-math")


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("startup") / "data"
    assert main(["make-data", "--out", str(out)]) == 0
    return out


def _blocked(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", BLOCKED, *argv], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


def _train(data: Path, init: str, out: Path, *extra: str) -> list[str]:
    return [
        "train",
        "--backbone",
        "tiny-math",
        "--variant",
        "exgrpo",
        "--data",
        str(data),
        "--init",
        init,
        "--out",
        str(out / "o"),
        "--ckpt",
        str(out / "c"),
        *extra,
    ]


def test_the_blocking_works():
    """Control: the harness does stop an import of torch (else every test below passes vacuously)."""
    done = subprocess.run(
        [sys.executable, "-c", BLOCKED.replace("from exgrpo.cli import main", "import torch")],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1 and "import of torch halted" in done.stderr


@pytest.mark.parametrize(
    "case, expected",
    [
        ("train_no_data", "nodata/manifest.json: file not found"),
        ("train_no_init", "noinit: no HF model (config.json) found"),
        ("train_missing_split", "validation.jsonl: split file listed in manifest.json is missing"),
        ("sft_no_data", "nodata/manifest.json: file not found"),
        ("sft_stray_init", "config field 'init': tiny-math has no sft.init"),
        ("eval_no_data", "nodata: data folder not found"),
        ("eval_no_model", "nomodel: model folder not found"),
        ("prelim_no_data", "nodata: neither a make-data directory"),
    ],
)
def test_a_bad_input_is_reported_before_any_heavy_import(case, expected, data, tmp_path):
    broken = tmp_path / "broken"
    if case == "train_missing_split":
        broken.mkdir()
        (broken / "manifest.json").write_text((data / "manifest.json").read_text())
        (broken / "train.jsonl").write_text((data / "train.jsonl").read_text())
    sft_out = str(tmp_path / "sft")
    argv = {
        "train_no_data": _train(tmp_path / "nodata", TINY_MATH, tmp_path),
        "train_no_init": _train(data, str(tmp_path / "noinit"), tmp_path),
        "train_missing_split": _train(broken, TINY_MATH, tmp_path),
        "sft_no_data": [
            *("sft", "--backbone", "tiny-math", "--data", str(tmp_path / "nodata"), "--out", sft_out)
        ],
        "sft_stray_init": [
            *("sft", "--backbone", "tiny-math", "--data", str(data), "--out", sft_out),
            *("--init", str(tmp_path / "init")),
        ],
        "eval_no_data": [
            *("eval", "--backend", "tiny", "--model", TINY_MATH, "--benchmarks", "tiny"),
            *("--profile", "tiny", "--data", str(tmp_path / "nodata"), "--out", str(tmp_path / "e")),
        ],
        "eval_no_model": [
            *("eval", "--backend", "tiny", "--model", str(tmp_path / "nomodel"), "--benchmarks", "tiny"),
            *("--profile", "tiny", "--data", str(data), "--out", str(tmp_path / "e")),
        ],
        "prelim_no_data": [
            *("prelim-analyze", "--model", TINY_MATH, "--data", str(tmp_path / "nodata")),
            *("--out", str(tmp_path / "p.parquet")),
        ],
    }[case]
    done = _blocked(*argv)
    assert done.returncode == 2, done.stderr
    assert expected in done.stderr


def test_train_keeps_sklearn_out_up_to_its_first_use_of_the_data(data, tmp_path):
    """`exgrpo train` imports transformers' Auto classes (which import the generation code) only after the
    scikit-learn switch (exgrpo.testbed.lean_transformers): a train_size larger than the split stops the run
    right after the tokenizer loads, and by then neither scikit-learn nor SciPy may have been imported."""
    code = (
        "import sys\nfrom exgrpo.cli import main\n"
        "rc = main(sys.argv[1:])\n"
        "loaded = [m in sys.modules for m in ('transformers.generation.candidate_generator', 'sklearn', 'scipy')]\n"
        "print(rc, *loaded)\n"
    )
    argv = _train(data, TINY_MATH, tmp_path, "--set", "train_size=1000000")
    done = subprocess.run(
        [sys.executable, "-c", code, *argv], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert "train_size" in done.stderr
    assert done.stdout.split() == ["2", "True", "False", "False"], done.stderr
