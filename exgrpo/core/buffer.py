"""Experience buffer storage: question id -> its stored correct trajectories (paper §4.1, Alg. 1; docs/method.md).

Only storage lives here (dedup, per-question cap, memory layout, save/load). Which trajectories are stored,
latest success counts, buckets and retirement are `ExperienceManager`'s job (experience.py).

Departures from the released code, stated up front:
- Trajectories are stored as token ids (int32) with per-token behaviour log-probs (float32), not as decoded
  text: no decode/re-tokenise round trip (the released `rstrip(eos_token)` strips a character set), and the
  memory cost is exactly 8 bytes per stored token. Dedup is on identical token ids (released: identical text).
- Optional per-question cap (`max_per_question`, oldest dropped); 0 = unlimited, as released.
- Memory layout: tokens and log-probs live in large pre-allocated chunks ("arenas", `chunk_tokens` each;
  a longer trajectory gets a chunk of its own), per-trajectory metadata in growable numpy columns
  (~44 bytes + one Python int per trajectory). Removed trajectories leave holes that are reclaimed by
  compaction once dead tokens outnumber live ones, so reserved memory stays within 2x live + one chunk.
  Arrays handed out are read-only views; compaction allocates new chunks, so old views stay valid.
- Save/load: one safetensors file (concatenated arrays + lengths) and a JSON file (question ids, settings);
  never pickle.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

DEFAULT_CHUNK_TOKENS = 1 << 20
"""Tokens per arena chunk (8 MiB for ids + log-probs). Pages are only committed once written."""

_INT32_MAX = np.iinfo(np.int32).max


@dataclass(eq=False)
class Trajectory:
    """One stored response. `token_ids`: int32 [T] (response tokens, no prompt); `logprobs`: float32 [T],
    the behaviour policy's per-token log-probs at collection (π_past of paper Eq. 4); `step`: training step
    collected; `entropy`: mean token entropy recorded at collection (NaN when not recorded)."""

    token_ids: np.ndarray
    logprobs: np.ndarray
    step: int
    entropy: float = float("nan")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Trajectory):
            return NotImplemented
        same_entropy = (
            math.isnan(self.entropy) and math.isnan(other.entropy)
        ) or self.entropy == other.entropy
        return (
            self.step == other.step
            and same_entropy
            and np.array_equal(self.token_ids, other.token_ids)
            and np.array_equal(self.logprobs, other.logprobs)
        )

    __hash__ = None  # type: ignore[assignment]  # mutable arrays


def _digest(token_ids: np.ndarray) -> int:
    """Stable 63-bit content hash of int32 token ids (dedup prefilter; equality is then checked exactly)."""
    return int.from_bytes(hashlib.blake2b(token_ids.tobytes(), digest_size=8).digest(), "little") >> 1


def _validated(qid: str, traj: Trajectory) -> tuple[np.ndarray, np.ndarray]:
    """int32 token ids and float32 log-probs of `traj`, or a ValueError naming the question.

    Runs once per stored trajectory (hundreds a step), hence dtype kinds instead of np.issubdtype. Log-probs
    are checked after the cast to float32, so a float64 value beyond float32's range is refused, not stored
    as inf.
    """
    if not isinstance(qid, str) or not qid:
        raise ValueError(f"question id must be a non-empty str, got {qid!r}")
    ids = np.asarray(traj.token_ids)
    lps = np.asarray(traj.logprobs)
    if ids.ndim != 1 or ids.size == 0:
        raise ValueError(f"question {qid!r}: token_ids must be a non-empty 1-D array, got shape {ids.shape}")
    if ids.dtype.kind not in "iu":
        raise ValueError(f"question {qid!r}: token_ids must be integers, got {ids.dtype}")
    if ids.min() < 0 or (ids.dtype != np.int32 and ids.max() > _INT32_MAX):
        raise ValueError(f"question {qid!r}: token ids must lie in [0, 2^31)")
    if lps.shape != ids.shape:
        raise ValueError(f"question {qid!r}: logprobs shape {lps.shape} != token_ids shape {ids.shape}")
    if lps.dtype.kind != "f":
        raise ValueError(f"question {qid!r}: logprobs must be finite floats")
    lps = lps.astype(np.float32, copy=False)
    if not np.isfinite(lps).all():
        raise ValueError(f"question {qid!r}: logprobs must be finite floats")
    return ids.astype(np.int32, copy=False), lps


class ExperienceBuffer:
    """Map question id -> stored trajectories, in question insertion order (oldest first).

    A question is present while it holds at least one trajectory; `remove` deletes it, and adding to it
    again appends it at the end of the insertion order (as the released dict did).
    """

    _COLUMNS = (
        ("chunk", np.int32),
        ("offset", np.int64),
        ("length", np.int64),
        ("step", np.int64),
        ("entropy", np.float64),
        ("digest", np.int64),
    )

    def __init__(self, max_per_question: int = 0, chunk_tokens: int = DEFAULT_CHUNK_TOKENS):
        if max_per_question < 0:
            raise ValueError(f"max_per_question must be >= 0, got {max_per_question}")
        if chunk_tokens < 1:
            raise ValueError(f"chunk_tokens must be >= 1, got {chunk_tokens}")
        self.max_per_question = int(max_per_question)
        self.chunk_tokens = int(chunk_tokens)
        self._tok_chunks: list[np.ndarray] = []
        self._lp_chunks: list[np.ndarray] = []
        self._tail = -1  # chunk currently being filled
        self._tail_fill = 0
        self._slots = {name: np.zeros(0, dtype) for name, dtype in self._COLUMNS}
        self._n_slots = 0  # high-water mark of slot ids
        self._free: list[int] = []
        self._questions: dict[str, list[int]] = {}
        self._live_tokens = 0
        self._dead_tokens = 0

    # ------------------------------------------------------------------ queries
    def __contains__(self, qid: object) -> bool:
        return qid in self._questions

    def __len__(self) -> int:
        """Number of questions holding at least one trajectory."""
        return len(self._questions)

    def qids(self) -> list[str]:
        """Question ids in insertion order (oldest first)."""
        return list(self._questions)

    def count(self, qid: str) -> int:
        """Stored trajectories of `qid` (0 when absent)."""
        return len(self._questions.get(qid, ()))

    @property
    def num_trajectories(self) -> int:
        return self._n_slots - len(self._free)

    @property
    def num_tokens(self) -> int:
        """Live stored tokens."""
        return self._live_tokens

    def get(self, qid: str) -> list[Trajectory]:
        """The stored trajectories of `qid`, oldest first, as read-only views. KeyError if absent."""
        if qid not in self._questions:
            raise KeyError(f"question {qid!r} has no stored trajectories")
        return [self._view(s) for s in self._questions[qid]]

    def memory(self) -> dict[str, int]:
        """Bytes: `payload` (live tokens x 8), `reserved` (allocated arena), `metadata` (per-trajectory columns)."""
        reserved = sum(c.nbytes for c in self._tok_chunks) + sum(c.nbytes for c in self._lp_chunks)
        return {
            "payload": self._live_tokens * 8,
            "reserved": reserved,
            "metadata": sum(a.nbytes for a in self._slots.values()),
            "live_tokens": self._live_tokens,
            "dead_tokens": self._dead_tokens,
        }

    # ------------------------------------------------------------------ updates
    def add(self, qid: str, traj: Trajectory) -> bool:
        """Store `traj` under `qid`. Returns False (and stores nothing) if `qid` already holds the same token ids.

        With a cap, the oldest trajectory of `qid` is dropped once it holds more than `max_per_question`.
        """
        ids, lps = _validated(qid, traj)
        digest = _digest(ids)
        slots = self._questions.get(qid)
        if slots:
            for s in slots:
                if self._slots["digest"][s] == digest and np.array_equal(self._tokens_of(s), ids):
                    return False
        slot = self._write(ids, lps, int(traj.step), float(traj.entropy), digest)
        if slots is None:
            slots = self._questions[qid] = []
        slots.append(slot)
        if self.max_per_question and len(slots) > self.max_per_question:
            self._release(slots.pop(0))
            self._maybe_compact()
        return True

    def remove(self, qid: str) -> int:
        """Delete `qid` and all its trajectories; returns how many were deleted (0 if absent)."""
        slots = self._questions.pop(qid, None)
        if not slots:
            return 0
        for s in slots:
            self._release(s)
        self._maybe_compact()
        return len(slots)

    # ------------------------------------------------------------------ save / load
    def to_arrays(self) -> tuple[dict[str, np.ndarray], list[str]]:
        """Compact plain arrays of the whole buffer, and the question ids in insertion order.

        tokens int32 [T], logprobs float32 [T], traj_lengths/traj_steps int64 [N], traj_entropy float64 [N],
        question_sizes int64 [Q]; trajectories are grouped by question (insertion order), oldest first.
        """
        order = [s for slots in self._questions.values() for s in slots]
        lengths = self._slots["length"][order].astype(np.int64)
        tokens = np.empty(int(lengths.sum()), np.int32)
        logprobs = np.empty(int(lengths.sum()), np.float32)
        pos = 0
        for s in order:
            n = int(self._slots["length"][s])
            tokens[pos : pos + n] = self._tokens_of(s)
            logprobs[pos : pos + n] = self._logprobs_of(s)
            pos += n
        arrays: dict[str, np.ndarray] = {
            "tokens": tokens,
            "logprobs": logprobs,
            "traj_lengths": lengths,
            "traj_steps": self._slots["step"][order].astype(np.int64),
            "traj_entropy": self._slots["entropy"][order].astype(np.float64),
            "question_sizes": np.array([len(v) for v in self._questions.values()], np.int64),
        }
        return arrays, list(self._questions)

    @classmethod
    def from_arrays(
        cls,
        arrays: dict[str, np.ndarray],
        qids: list[str],
        *,
        max_per_question: int = 0,
        chunk_tokens: int = DEFAULT_CHUNK_TOKENS,
        source: str = "arrays",
    ) -> ExperienceBuffer:
        """Inverse of `to_arrays` (the token arrays become one arena chunk, no copy). `source` names the input in errors."""
        need = {"tokens", "logprobs", "traj_lengths", "traj_steps", "traj_entropy", "question_sizes"}
        if missing := need - set(arrays):
            raise ValueError(f"{source}: missing arrays {sorted(missing)}")
        sizes, lengths = arrays["question_sizes"], arrays["traj_lengths"]
        n_traj, n_tok = int(sizes.sum()), int(lengths.sum())
        if (
            len(qids) != sizes.size
            or len(set(qids)) != len(qids)
            or lengths.size != n_traj
            or arrays["traj_steps"].size != n_traj
            or arrays["traj_entropy"].size != n_traj
            or arrays["tokens"].size != n_tok
            or arrays["logprobs"].size != n_tok
            or (sizes.size and sizes.min() < 1)
            or (lengths.size and lengths.min() < 1)
        ):
            raise ValueError(f"{source}: inconsistent array sizes (corrupt or mismatched files)")
        buf = cls(max_per_question=max_per_question, chunk_tokens=chunk_tokens)
        if n_traj == 0:
            return buf
        buf._tok_chunks = [np.ascontiguousarray(arrays["tokens"], np.int32)]
        buf._lp_chunks = [np.ascontiguousarray(arrays["logprobs"], np.float32)]
        buf._tail, buf._tail_fill = 0, n_tok  # full: the next add opens a new chunk
        offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
        buf._slots = {
            "chunk": np.zeros(n_traj, np.int32),
            "offset": offsets,
            "length": lengths.astype(np.int64),
            "step": arrays["traj_steps"].astype(np.int64),
            "entropy": arrays["traj_entropy"].astype(np.float64),
            "digest": np.array(
                [_digest(buf._tok_chunks[0][o : o + n]) for o, n in zip(offsets, lengths)], np.int64
            ),
        }
        buf._n_slots = n_traj
        starts = np.concatenate([[0], np.cumsum(sizes)]).tolist()
        buf._questions = {q: list(range(starts[i], starts[i + 1])) for i, q in enumerate(qids)}
        buf._live_tokens = n_tok
        return buf

    # ------------------------------------------------------------------ internals
    def _tokens_of(self, slot: int) -> np.ndarray:
        c, o, n = (int(self._slots[k][slot]) for k in ("chunk", "offset", "length"))
        return self._tok_chunks[c][o : o + n]

    def _logprobs_of(self, slot: int) -> np.ndarray:
        c, o, n = (int(self._slots[k][slot]) for k in ("chunk", "offset", "length"))
        return self._lp_chunks[c][o : o + n]

    def _view(self, slot: int) -> Trajectory:
        ids, lps = self._tokens_of(slot), self._logprobs_of(slot)
        ids.flags.writeable = False
        lps.flags.writeable = False
        return Trajectory(ids, lps, int(self._slots["step"][slot]), float(self._slots["entropy"][slot]))

    def _place(self, ids: np.ndarray, lps: np.ndarray) -> tuple[int, int]:
        """Copy one trajectory into the arena; returns (chunk, offset)."""
        n = ids.size
        if n > self.chunk_tokens:  # a dedicated chunk; the tail chunk keeps filling afterwards
            chunk, offset = len(self._tok_chunks), 0
            self._tok_chunks.append(np.empty(n, np.int32))
            self._lp_chunks.append(np.empty(n, np.float32))
        else:
            if self._tail < 0 or self._tail_fill + n > self._tok_chunks[self._tail].size:
                self._tok_chunks.append(np.empty(self.chunk_tokens, np.int32))
                self._lp_chunks.append(np.empty(self.chunk_tokens, np.float32))
                self._tail, self._tail_fill = len(self._tok_chunks) - 1, 0
            chunk, offset = self._tail, self._tail_fill
            self._tail_fill += n
        self._tok_chunks[chunk][offset : offset + n] = ids
        self._lp_chunks[chunk][offset : offset + n] = lps
        return chunk, offset

    def _write(self, ids: np.ndarray, lps: np.ndarray, step: int, entropy: float, digest: int) -> int:
        chunk, offset = self._place(ids, lps)
        slot = self._free.pop() if self._free else self._new_slot()
        for name, value in (
            ("chunk", chunk),
            ("offset", offset),
            ("length", ids.size),
            ("step", step),
            ("entropy", entropy),
            ("digest", digest),
        ):
            self._slots[name][slot] = value
        self._live_tokens += ids.size
        return slot

    def _new_slot(self) -> int:
        if self._n_slots == self._slots["chunk"].size:
            cap = max(1024, 2 * self._n_slots)
            for name, arr in self._slots.items():
                grown = np.zeros(cap, arr.dtype)
                grown[: arr.size] = arr
                self._slots[name] = grown
        self._n_slots += 1
        return self._n_slots - 1

    def _release(self, slot: int) -> None:
        n = int(self._slots["length"][slot])
        self._live_tokens -= n
        self._dead_tokens += n
        self._slots["length"][slot] = 0
        self._free.append(slot)

    def _maybe_compact(self) -> None:
        """Copy live trajectories into fresh chunks once dead tokens exceed both live tokens and one chunk."""
        if self._dead_tokens <= max(self._live_tokens, self.chunk_tokens):
            return
        old_tok, old_lp = self._tok_chunks, self._lp_chunks
        self._tok_chunks, self._lp_chunks, self._tail, self._tail_fill = [], [], -1, 0
        chunks, offsets, lengths = self._slots["chunk"], self._slots["offset"], self._slots["length"]
        for live in self._questions.values():
            for s in live:
                c, o, n = int(chunks[s]), int(offsets[s]), int(lengths[s])
                chunks[s], offsets[s] = self._place(old_tok[c][o : o + n], old_lp[c][o : o + n])
        self._dead_tokens = 0


def save_arrays(path: str | Path, arrays: dict[str, np.ndarray], metadata: dict[str, str]) -> None:
    """Write `arrays` to a safetensors file atomically (plain format, no pickle)."""
    from safetensors.numpy import save_file

    from exgrpo.core.atomic_files import atomic_path

    with atomic_path(path) as tmp:
        save_file({k: np.ascontiguousarray(v) for k, v in arrays.items()}, str(tmp), metadata=metadata)


def load_arrays(path: str | Path) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """Read a safetensors file written by `save_arrays`; returns (arrays, metadata)."""
    from safetensors import safe_open

    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: file not found")
    try:
        with safe_open(str(path), framework="np") as fh:
            return {k: fh.get_tensor(k) for k in fh.keys()}, dict(fh.metadata() or {})  # noqa: SIM118
    except Exception as err:  # safetensors raises its own error types for truncated/corrupt headers
        raise ValueError(f"{path}: corrupt safetensors file ({err})") from None


__all__ = ["DEFAULT_CHUNK_TOKENS", "ExperienceBuffer", "Trajectory", "load_arrays", "save_arrays"]
