"""The registry of what `exgrpo download --out DIR` fetches (paper §3.2, §4.1), with its pins and checksums.

Every released file is fetched at one commit of the release (ElliottYan/LUFFY 01f4ae0...,
`RELEASE_COMMIT`), never a branch, and its bytes are checked before anything is written to the manifest:
against the sha256 recorded here, or, for the two files whose bytes were not available when the registry
was written (LUFFY's MMLU-Pro file and the release's combined OOD file), against the git blob id the
release's tree records for them (`git_blob`, a SHA-1 of the content). A mismatch stops the download with a
`ChecksumError` naming the file; `exgrpo eval` checks the files it reads against the manifest again, so a
file changed afterwards stops the evaluation.

The training set `Elliott/Openr1-Math-46k-8192` (paper §3.2) lives on the Hugging Face hub. The commit the
release trained on is not known and none could be found without hub access, so its `revision` is None: the
workflow's download refuses it until its lock (config/locks/openr1_math_46k.json) pins a commit, which
`exgrpo download --out DIR --only openr1_math_46k --lock-dir config/locks --pin` records once, with hub access
(README, "Pinned inputs").

Table 2's prompts (paper §5.3: "7k WildChat-IF prompts") are, inferred, the WildChat-IF subset of Tulu 3 as
RLMT (the setup §5.3 follows: WildChat-IF, Skywork reward model, ArenaHardV2/IFEval/IFBench) names it,
`allenai/tulu-3-wildchat-if-on-policy-8b` (10.8k rows; the paper's 7k selection is not published). Its commit is
not known either: `revision` None, refused the same way until config/locks/wildchat_if.json pins one. It is
data `chat_if`: only `exgrpo download --only wildchat_if` fetches it (rule download_chat_if), so the math studies'
download never waits for it. No published commit of it was found (searched public code for a revision or a hub-cache
snapshot folder of the repo, 2026-12-07).

Table 2's evaluation sets (data `chat_if_eval`, rule download_chat_if_eval, `exgrpo download --only
ifeval,ifbench,arenahard_v2`) are kind `hf_snapshot`: the hub dataset repo's own files (`patterns`), snapshotted
into the hub cache at their commit and left there, not exported, because `exgrpo eval` reads them from the cache
by repo id and commit (exgrpo.eval.chat_inputs). Their commits were read from public code, none from the hub itself
(docs/studies.md's table says where): google/IFEval `966cd89...` and allenai/IFBench_test `2e8a48d...` (each named
by several unrelated projects, as hub-cache snapshot folders or pinned revisions beside the repo id), and
lmarena-ai/arena-hard-auto `15f3746...` (pinned revisions in several projects; one of them reads
`data/arena-hard-v2.0/question.jsonl` at it). A commit without the set's files stops the download naming the file
pattern; the snapshot's files are then checked against their lock (config/locks/<name>.json, written by the first
download) like any hub item.
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
    """`hf_dataset` (ref = dataset id, the split exported to parquet), `hf_snapshot` (ref = dataset id, the files
    `patterns` kept in the hub cache as they are) or `url` (ref = URL of a parquet file)."""
    ref: str
    role: str
    """`train` or `benchmark`."""
    split: str | None = None
    expected_rows: int | None = None
    """Row count known from the released repo; a mismatch stops the download."""
    revision: str | None = None
    """Commit the file is fetched at (part of `ref` for URLs; `revision=` of the hub); None = not known:
    a hub item is then pinned by its lock (`--lock-dir`, `--pin`), or its download is refused."""
    sha256: str | None = None
    """sha256 of the file's bytes as released; a mismatch stops the download (ChecksumError)."""
    git_blob: str | None = None
    """Git blob id (SHA-1 of `blob <size>\\0<bytes>`) of the file in the release's tree: the check of files
    whose sha256 could not be recorded."""
    data: str = "math"
    """The studies it serves: `math` (what `exgrpo download` fetches by default), `chat_if` (paper §5.3's
    prompts) or `chat_if_eval` (Table 2's evaluation sets), the last two fetched only when named by `--only`."""
    patterns: tuple[str, ...] = ()
    """`hf_snapshot` only: the repo files fetched (huggingface_hub's `allow_patterns`); each must match a file at
    the commit, and `expected_rows` counts the rows of the first pattern's files."""


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
    # revision None: no commit known (module docstring); pinned by config/locks/openr1_math_46k.json
    Source("openr1_math_46k", "hf_dataset", "Elliott/Openr1-Math-46k-8192", "train", "train", revision=None),
    # revision None: no commit known (module docstring); pinned by config/locks/wildchat_if.json
    Source(
        "wildchat_if",
        "hf_dataset",
        "allenai/tulu-3-wildchat-if-on-policy-8b",
        "train",
        "train",
        revision=None,
        data="chat_if",
    ),
    # Table 2's evaluation sets, read by repo id and commit from the hub cache (module docstring)
    Source(
        "ifeval",
        "hf_snapshot",
        "google/IFEval",
        "benchmark",
        expected_rows=541,
        revision="966cd89545d6b6acfd7638bc708b98261ca58e84",
        data="chat_if_eval",
        patterns=("ifeval_input_data.jsonl",),
    ),
    Source(
        "ifbench",
        "hf_snapshot",
        "allenai/IFBench_test",
        "benchmark",
        expected_rows=300,
        revision="2e8a48de45ff3bf41242f927254ca81b59ca3ae2",
        data="chat_if_eval",
        patterns=("data/train-*.parquet",),
    ),
    Source(
        "arenahard_v2",
        "hf_snapshot",
        "lmarena-ai/arena-hard-auto",
        "benchmark",
        revision="15f3746e21432264ce9b453999bde4f3c946d2e6",
        data="chat_if_eval",
        # v2.0's questions and the answers of its two categories' baselines (exgrpo.eval.arena_hard_protocol),
        # not the repo's other versions, answers and judgments
        patterns=(
            "data/arena-hard-v2.0/question.jsonl",
            "data/arena-hard-v2.0/model_answer/o3-mini-2025-01-31.jsonl",
            "data/arena-hard-v2.0/model_answer/gemini-2.0-flash-001.jsonl",
        ),
    ),
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
