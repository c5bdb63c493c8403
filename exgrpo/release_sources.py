"""What `exgrpo download --out DIR` fetches: the training set and the release's benchmark files, pinned.

Every released file is named at one commit of the release (ElliottYan/LUFFY, `RELEASE_COMMIT`) with the sha256
of its bytes or, where those bytes were not available when this registry was written, the git blob id the
release's tree records (exgrpo.commands.download checks them before anything is written to the manifest).
"""

from __future__ import annotations

from dataclasses import dataclass

RELEASE_REPO = "ElliottYan/LUFFY"
RELEASE_COMMIT = "01f4ae066249e6965ce0d5512ccdf99a12895c74"
"""The released code's commit whose data files are fetched (2026-03-20, the HEAD the project was checked at)."""


def release_url(path: str, commit: str = RELEASE_COMMIT) -> str:
    """raw.githubusercontent.com URL of `path` in the release at `commit`."""
    return f"https://raw.githubusercontent.com/{RELEASE_REPO}/{commit}/{path}"


@dataclass(frozen=True)
class Source:
    """One downloadable item: a Hugging Face dataset split or a parquet file of the release."""

    name: str
    kind: str
    """`hf_dataset` (ref = dataset id) or `url` (ref = URL of a parquet file)."""
    ref: str
    role: str
    """`train` or `benchmark`."""
    split: str | None = None
    expected_rows: int | None = None
    """Row count known from the released repo; a mismatch stops the download."""
    revision: str | None = None
    """Commit the file is fetched at (part of `ref` for URLs; `revision=` of the hub); None = not known."""
    sha256: str | None = None
    """sha256 of the file's bytes as released; a mismatch stops the download (ChecksumError)."""
    git_blob: str | None = None
    """Git blob id (SHA-1 of `blob <size>\\0<bytes>`) of the file in the release's tree: the check of files
    whose sha256 could not be recorded."""


def _released(name: str, path: str, rows: int | None, sha256: str | None, git_blob: str) -> Source:
    return Source(
        name,
        "url",
        release_url(path),
        "benchmark",
        expected_rows=rows,
        revision=RELEASE_COMMIT,
        sha256=sha256,
        git_blob=git_blob,
    )


SOURCES: tuple[Source, ...] = (
    Source("openr1_math_46k", "hf_dataset", "Elliott/Openr1-Math-46k-8192", "train", split="train"),
    _released(
        "exgrpo_test_id",
        "ExGRPO/data/test.id.parquet",
        6023,
        "92503399b914212d2e3d85839882bc1376a0111652fec0dcb722e86307e97617",
        "1e1d71d380fbb4a89ed7c8cd9fec717ca9bcb0fe",
    ),
    _released(
        "exgrpo_valid",
        "ExGRPO/data/valid.parquet",
        2259,
        "7828d704c3539651f757272071c7e17cba84efe956434adceb363442b665da49",
        "8a3dea25ae463c7661b5f54fea53ee0ddb4cce54",
    ),
    _released(
        "luffy_arc_c",
        "data/valid.arc_c.parquet",
        1172,
        "7c3d1df8f11ade8be258ee0b0c7bbd6ac9a8e535dee3dbb3b5410f974f0d8fe5",
        "098365231da050f78cf5abd4e12c40ef3fbb9a32",
    ),
    _released(
        "luffy_gpqa_diamond",
        "data/valid.gpqa.parquet",
        198,
        "55bde3943eeb6906d6d569d0ab882638c2f395a716ab5fa1fa20a186e722e58b",
        "a3a1476f866957b5b0236b792a3b6404a9fa0485",
    ),
    _released(
        "luffy_mmlu_pro",
        "data/valid.mmlu_pro.parquet",
        None,
        None,
        "48cd2b38bf2690f5ebfda3695a23a188d472c6b6",
    ),
)
"""What `exgrpo download --out DIR` fetches (paper §3.2, §4.1), with the release's checksums."""


__all__ = ["RELEASE_COMMIT", "RELEASE_REPO", "SOURCES", "Source", "release_url"]
