"""SFT "pre-training" of the tiny backbones on noisy-teacher solutions (docs/testbed.md).

Stands in for the pre-training and instruction tuning the paper's backbones received: it gives
each base a partial accuracy that falls with difficulty, plus "lucky hits" (right answer, a wrong
step) from teacher slips, so RLVR has something to sharpen and the entropy finding of paper §3.2
has both kinds of correct trajectory to compare.

Data: questions are drawn on the fly (d uniform in 1..4, surface forms mixed by `form_mix`)
and never include an expression of a held-out split of the data directory (validation, test,
OOD, probe), so evaluation stays clean; RL `train` questions may appear, as pre-training corpora
may contain RL questions. A small share of word-form and multiple-choice questions stands in for
the broad pre-training that lets the paper's models answer ARC-c / GPQA / MMLU-Pro at all; RL
then trains on symbolic questions only, so OOD gains must transfer through the shared step format.
Loss on response tokens only (the answer after `<think>`, incl. eos); AdamW; linear warm-up then
cosine decay to `min_lr_ratio`; gradient-norm clip.

Departures from the prototype's recipe (docs/testbed.md), for the budget of ~8 single-thread
CPU minutes for all five backbones: batches of 64 sequences (not 128) at lr 6e-3 (not 4e-3) for
~1000 steps, about a third of the prototype's compute for similar base accuracy (lr 1e-2 was
unstable); 20 % of examples are word / multiple-choice forms; length-sorted micro-batches.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from exgrpo.core.declared import ConfigError, check_fields, setting
from exgrpo.testbed import task
from exgrpo.testbed.tokenizer import encode_questions, encode_responses

DEFAULT_FORM_MIX = {"symbolic": 0.8, "words": 0.08, "choice4": 0.06, "choice10": 0.06}


@dataclass
class SFTSettings:
    """Every SFT knob, each declared once (`exgrpo.core.declared.setting`); `steps` and `lr` come from the
    backbone entry's `sft` block (config/backbones.yaml)."""

    steps: int = setting(lo=1)
    """Optimizer steps."""
    lr: float = setting(lo=0, lo_open=True)
    """Peak learning rate (AdamW), reached after `warmup` steps, then cosine decay to `min_lr_ratio` of it."""
    batch_size: int = setting(64, lo=1)
    """Examples per optimizer step."""
    micro_batch: int = setting(16, lo=1)
    """Examples per forward pass (gradient accumulation over batch_size / micro_batch)."""
    warmup: int = setting(50, lo=0)
    """Linear warm-up steps (at most a tenth of `steps`)."""
    min_lr_ratio: float = setting(0.1, lo=0.0, hi=1.0)
    """Final learning rate as a fraction of `lr`."""
    weight_decay: float = setting(0.1, lo=0.0)
    """AdamW decoupled weight decay."""
    betas: tuple[float, float] = setting((0.9, 0.98), items={"lo": 0.0, "hi": 1.0, "hi_open": True})
    """AdamW (β1, β2), each in [0, 1)."""
    grad_clip: float = setting(1.0, lo=0.0)
    """Gradient-norm clip."""
    p_noise: float = setting(0.2, lo=0.0, hi=1.0)
    """Probability that the noisy teacher writes a step's result off by ±1 or ±2 (each step on its own)."""
    p_prop: float = setting(0.7, lo=0.0, hi=1.0)
    """Probability that a wrong step's value is carried on (a wrong answer) rather than corrected."""
    difficulties: tuple[int, ...] = setting(task.ID_DIFFICULTIES, items={"lo": 1})
    """Numbers of operations of the SFT problems."""
    form_mix: dict[str, float] = setting(default_factory=lambda: dict(DEFAULT_FORM_MIX))
    """Prompt form -> sampling weight (>= 0) over symbolic / words / choice4 / choice10."""
    seed: int = 0
    """torch seed of the run (the model's initialisation and batching)."""

    def __post_init__(self) -> None:
        self.betas = tuple(self.betas)  # type: ignore[assignment]  # JSON/YAML give lists
        self.difficulties = tuple(self.difficulties)

    def validate(self) -> SFTSettings:
        """Check every field against its declaration, then the form mix; ConfigError names `sft.<field>`."""
        try:
            check_fields(self)
        except ConfigError as err:
            raise ConfigError(f"sft.{err.field}", err.reason) from None
        unknown = set(self.form_mix) - {"symbolic", "words", "choice4", "choice10"}
        if unknown or not self.form_mix or min(self.form_mix.values()) < 0:
            raise ConfigError(
                "sft.form_mix", f"weights >= 0 over symbolic/words/choice4/choice10, got {self.form_mix}"
            )
        return self


class NoisyTeacherStream:
    """Endless stream of (prompt ids, response ids) SFT examples, deterministic in `seed`."""

    def __init__(
        self, tokenizer: Any, heldout: set[task.Expression], settings: SFTSettings, stream_seed: str
    ):
        self.tokenizer, self.heldout, self.settings = tokenizer, heldout, settings
        self.rng = random.Random(stream_seed)
        # d=1,2 spaces are small: sample from the enumerated non-held-out problems
        self.pools = {
            d: [e for e in task.enumerate_expressions(d) if e not in heldout]
            for d in settings.difficulties
            if d <= 2
        }
        self.forms = list(settings.form_mix)
        self.weights = [settings.form_mix[f] for f in self.forms]

    def _expression(self, d: int) -> task.Expression:
        if d in self.pools:
            return self.rng.choice(self.pools[d])
        while True:
            expr = task.random_expression(d, self.rng)
            if expr not in self.heldout:
                return expr

    def problems(self, size: int) -> list[dict]:
        """`size` fresh problems: d uniform over `difficulties`, form drawn by `form_mix`."""
        return [
            task.make_problem(
                self._expression(self.rng.choice(self.settings.difficulties)),
                self.rng.choices(self.forms, self.weights)[0],
                "sft",
                self.rng,
            )
            for _ in range(size)
        ]

    def batch(self, size: int) -> tuple[list[list[int]], list[list[int]]]:
        """(prompt ids, response ids incl. eos) of `size` noisy-teacher examples."""
        s = self.settings
        problems = self.problems(size)
        responses = [task.noisy_solution(p, self.rng, s.p_noise, s.p_prop) for p in problems]
        return (
            encode_questions(self.tokenizer, [p["question"] for p in problems]),
            encode_responses(self.tokenizer, responses),
        )


def collate(
    prompts: list[list[int]], responses: list[list[int]], pad_id: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded input ids [B, L] and labels [B, L] (-100 on prompt and padding)."""
    length = max(len(p) + len(r) for p, r in zip(prompts, responses))
    ids = torch.full((len(prompts), length), pad_id, dtype=torch.long)
    labels = torch.full((len(prompts), length), -100, dtype=torch.long)
    for i, (p, r) in enumerate(zip(prompts, responses)):
        ids[i, : len(p) + len(r)] = torch.tensor(p + r)
        labels[i, len(p) : len(p) + len(r)] = torch.tensor(r)
    return ids, labels


def lr_at(step: int, settings: SFTSettings) -> float:
    """Linear warm-up over `warmup` steps, then cosine from lr to lr·min_lr_ratio at the last step."""
    warm = min(settings.warmup, max(settings.steps // 10, 1))
    if step < warm:
        return settings.lr * (step + 1) / warm
    progress = (step - warm) / max(settings.steps - warm - 1, 1)
    floor = settings.min_lr_ratio
    return settings.lr * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0))))


def train_sft(
    model: Any,
    tokenizer: Any,
    heldout: set[task.Expression],
    settings: SFTSettings,
    stream_seed: str,
    progress: bool = True,
) -> list[float]:
    """Run `settings.steps` SFT steps in place; returns the per-step training loss."""
    from tqdm.auto import tqdm

    settings.validate()
    torch.manual_seed(settings.seed)
    stream = NoisyTeacherStream(tokenizer, heldout, settings, stream_seed)
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2 and "embed" not in n]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2 or "embed" in n]
    optim = torch.optim.AdamW(
        [{"params": decay, "weight_decay": settings.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=settings.lr,
        betas=settings.betas,
    )
    model.train()
    losses: list[float] = []
    bar = tqdm(range(settings.steps), desc="sft", disable=not progress, mininterval=2.0)
    for step in bar:
        prompts, responses = stream.batch(settings.batch_size)
        for group in optim.param_groups:
            group["lr"] = lr_at(step, settings)
        optim.zero_grad(set_to_none=True)
        # Length-sorted micro-batches cut padding (choice prompts are 3x longer than symbolic ones);
        # summing token losses / all response tokens keeps the exact full-batch token-mean loss.
        order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]) + len(responses[i]))
        n_tokens = sum(len(r) for r in responses)
        total = 0.0
        for start in range(0, len(order), settings.micro_batch):
            part = order[start : start + settings.micro_batch]
            ids, labels = collate(
                [prompts[i] for i in part], [responses[i] for i in part], tokenizer.pad_token_id
            )
            logits = model(input_ids=ids, use_cache=False).logits[:, :-1]
            loss = (
                torch.nn.functional.cross_entropy(
                    logits.reshape(-1, logits.shape[-1]),
                    labels[:, 1:].reshape(-1),
                    ignore_index=-100,
                    reduction="sum",
                )
                / n_tokens
            )
            loss.backward()
            total += float(loss.detach())
        torch.nn.utils.clip_grad_norm_(model.parameters(), settings.grad_clip)
        optim.step()
        losses.append(total)
        if step % 20 == 0:
            bar.set_postfix(loss=f"{sum(losses[-20:]) / len(losses[-20:]):.3f}")
    model.eval()
    return losses


@torch.no_grad()
def evaluate(
    model: Any,
    tokenizer: Any,
    rows: list[dict],
    *,
    temperature: float,
    n_samples: int = 1,
    seed: int = 0,
    max_new_tokens: int = 72,
    batch_size: int = 256,
) -> dict[str, Any]:
    """Accuracy (exact boxed answer) and logical rate (all steps right) overall and per difficulty."""
    from exgrpo.testbed.rollout import generate

    generator = torch.Generator().manual_seed(seed)
    prompts = encode_questions(tokenizer, [r["question"] for r in rows])
    flat = [(r, p) for r, p in zip(rows, prompts) for _ in range(n_samples)]
    verdicts: list[tuple[int, str]] = []
    for start in range(0, len(flat), batch_size):
        chunk = flat[start : start + batch_size]
        out = generate(
            model,
            tokenizer,
            [p for _, p in chunk],
            max_new_tokens=max_new_tokens,
            temperature=temperature,
            generator=generator,
        )
        verdicts += [(r["difficulty"], task.classify(r, text)) for (r, _), text in zip(chunk, out.texts)]

    def summary(items: list[str]) -> dict[str, float]:
        n = max(len(items), 1)
        return {
            "accuracy": sum(v != "wrong" for v in items) / n,
            "logical": items.count("logical") / n,
            "lucky": items.count("lucky") / n,
            "n": len(items),
        }

    result: dict[str, Any] = {
        "temperature": temperature,
        "n_samples": n_samples,
        **summary([v for _, v in verdicts]),
    }
    result["by_difficulty"] = {
        str(d): summary([v for dd, v in verdicts if dd == d]) for d in sorted({d for d, _ in verdicts})
    }
    return result


def read_heldout(data_dir: str | Path) -> tuple[set[task.Expression], dict[str, list[dict]]]:
    """Held-out expressions of a `make-data` directory, and its held-out rows by split."""
    from exgrpo.testbed import splits as task_splits

    manifest = task_splits.load_manifest(data_dir)
    splits = {name: task_splits.load_split(data_dir, name) for name in manifest["splits"] if name != "train"}
    return task_splits.heldout_expressions(splits), splits


def settings_dict(settings: SFTSettings) -> dict[str, Any]:
    return asdict(settings)


def run_sft(
    backbone: str,
    data_dir: str | Path,
    out_dir: str | Path,
    *,
    steps: int | None = None,
    init: str | Path | None = None,
    seed: int = 0,
    threads: int = 1,
    backbones_path: str | Path | None = None,
    eval_rows: int = 200,
    progress: bool = True,
    overrides: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """SFT one tiny backbone and save it (HF dir + sft.json). Returns the sft.json record.

    A backbone whose entry has `sft.init` continues from that backbone's checkpoint: `init` (a
    directory) or, when omitted, the sibling `<out_dir>/../<sft.init>`. Its sft.json must name that
    backbone. `overrides` sets other SFTSettings fields (tests, sweeps).
    """
    from exgrpo.records.provenance import provenance
    from exgrpo.testbed.models import count_parameters, save_checkpoint, tiny_entry

    torch.set_num_threads(threads)
    entry = tiny_entry(backbone, backbones_path)
    settings = SFTSettings(
        steps=steps or entry["sft"]["steps"], lr=float(entry["sft"]["lr"]), seed=seed, **(overrides or {})
    ).validate()
    heldout, heldout_rows = read_heldout(data_dir)
    start = _start_model(backbone, entry, init, out_dir, seed)
    model, tokenizer = start.model, start.tokenizer
    wall, cpu = time.perf_counter(), time.process_time()
    losses = train_sft(model, tokenizer, heldout, settings, f"sft/{backbone}/{seed}", progress=progress)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    record: dict[str, Any] = {
        "backbone": backbone,
        "family": entry["family"],
        "arch": entry["arch"],
        "parameters": count_parameters(model),
        "settings": settings_dict(settings),
        "init": start.init_field(),
        "steps": settings.steps,
        "steps_total": settings.steps + (start.record.get("steps_total", 0) if start.record else 0),
        "final_loss": sum(losses[-20:]) / len(losses[-20:]),
        "loss_curve": {str(i): losses[i] for i in range(0, len(losses), max(len(losses) // 50, 1))},
        "wall_seconds": round(wall, 1),
        "cpu_seconds": round(cpu, 1),
        "threads": threads,
    }
    if eval_rows > 0:
        rows = heldout_rows["validation"][:eval_rows]
        record["validation"] = {
            "t1_mean@2": evaluate(model, tokenizer, rows, temperature=1.0, n_samples=2, seed=seed),
            "greedy": evaluate(model, tokenizer, rows, temperature=0.0, seed=seed),
        }
    record["provenance"] = provenance(
        config=entry, seed=seed, data_manifest=str(Path(data_dir) / "manifest.json")
    )
    save_checkpoint(model, tokenizer, out_dir, extra_files={"sft.json": record})
    return record


@dataclass
class _Start:
    """The model SFT starts from: a fresh build, or the SFT checkpoint of the backbone's `sft.init` parent
    (its name, folder and sft.json record)."""

    model: Any
    tokenizer: Any
    parent: str | None = None
    init_dir: Path | None = None
    record: dict[str, Any] | None = None

    def init_field(self) -> dict[str, Any] | None:
        """sft.json's `init`: None from scratch, else the parent, its folder and its total SFT steps."""
        if self.parent is None:
            return None
        return {
            "backbone": self.parent,
            "path": str(self.init_dir),
            "steps_total": (self.record or {}).get("steps_total"),
        }


def _start_model(
    backbone: str, entry: dict[str, Any], init: str | Path | None, out_dir: str | Path, seed: int
) -> _Start:
    """Load the `sft.init` parent's checkpoint (`init`, or the sibling `<out_dir>/../<parent>`), checking its
    sft.json names the parent, or build the backbone from scratch (refusing an `init` it has no use for)."""
    from exgrpo.core.config import ConfigError
    from exgrpo.records.io import read_json
    from exgrpo.testbed.models import build_model, load_checkpoint
    from exgrpo.testbed.tokenizer import build_tokenizer
    from exgrpo.tiny.inputs import sft_init_dir

    init_dir = sft_init_dir(backbone, entry, init, out_dir)
    if init_dir is not None:
        parent = entry["sft"]["init"]
        init_record = read_json(init_dir / "sft.json")
        if init_record.get("backbone") != parent:
            raise ConfigError(
                "init", f"{init_dir} holds {init_record.get('backbone')!r}, expected {parent!r}"
            )
        model, tokenizer = load_checkpoint(init_dir)
        return _Start(model, tokenizer, parent, init_dir, init_record)
    tokenizer = build_tokenizer()
    return _Start(build_model(entry["family"], entry["arch"], tokenizer, seed=seed), tokenizer)
