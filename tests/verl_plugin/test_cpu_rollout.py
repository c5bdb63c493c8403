"""The CPU rollout server on its own (no Ray): verl's generate contract, and weight updates change the rollouts."""

from __future__ import annotations

import asyncio
import hashlib
import importlib.util
import math
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("verl", reason="verl==0.9.1 not installed; pip install -e '.[verl]'")
torch = pytest.importorskip("torch")

from exgrpo.verl_plugin.cpu.demo import TOY_REWARDS, write_demo, write_tiny_model  # noqa: E402
from exgrpo.verl_plugin.cpu.rollout import HFRolloutServer, max_new_tokens, weights_fingerprint  # noqa: E402

PROMPT = [1, 88, 74, 67, 86, 97, 75, 85, 97, 21, 97, 33, 2, 98, 1, 67]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return write_tiny_model(tmp_path_factory.mktemp("cpu_rollout") / "model", seed=3)


def _server(model_dir, load_format="auto"):
    config = SimpleNamespace(
        load_format=load_format, seed=0, prompt_length=32, response_length=12, max_model_len=None
    )
    model = SimpleNamespace(path=str(model_dir), local_path=str(model_dir), local_tokenizer_path=None)
    return HFRolloutServer(config, model, replica_rank=0)


def _generate(server, n=6, step=5):
    async def go():
        await server.set_global_steps(step)
        return await asyncio.gather(
            *[
                server.generate(
                    f"r{i}",
                    prompt_ids=PROMPT,
                    sampling_params={
                        "temperature": 1.0,
                        "top_p": 1.0,
                        "top_k": -1,
                        "repetition_penalty": 1.0,
                        "logprobs": True,
                    },
                )
                for i in range(n)
            ]
        )

    return asyncio.run(go())


def test_generate_returns_tokens_and_logprobs(model_dir):
    outs = _generate(_server(model_dir))
    for out in outs:
        assert 1 <= len(out.token_ids) <= 12 and len(out.log_probs) == len(out.token_ids)
        assert all(lp <= 0 and math.isfinite(lp) for lp in out.log_probs)
        assert out.extra_fields["global_steps"] == 5


def test_logprobs_are_the_models(model_dir):
    """The returned log-probs are log softmax of the server model's logits at temperature 1 (teacher forcing)."""
    server = _server(model_dir)
    out = _generate(server, n=1)[0]
    ids = torch.tensor([PROMPT + out.token_ids])
    with torch.no_grad():
        logp = torch.log_softmax(server.model(input_ids=ids).logits[0].float(), -1)
    want = [float(logp[len(PROMPT) - 1 + j, t]) for j, t in enumerate(out.token_ids)]
    assert out.log_probs == pytest.approx(want, abs=1e-4)


def test_rollouts_change_after_a_weight_update(model_dir):
    server = _server(model_dir)
    before = [o.token_ids for o in _generate(server)]
    assert [o.token_ids for o in _generate(server)] == before  # same weights, same step seed: same samples
    named = [(n, p.detach().clone()) for n, p in server.model.named_parameters()]
    version, fp = server.get_weights_version(), server.fingerprint()
    torch.manual_seed(1)
    update = [(n, t + 0.5 * torch.randn_like(t)) for n, t in named]
    record = asyncio.run(server.update_weights(update, global_steps=5))
    assert record["version"] == version + 1 and record["fingerprint"] != fp
    assert record["fingerprint"] == weights_fingerprint(update)
    after = [o.token_ids for o in _generate(server)]
    assert after != before


def test_update_must_cover_the_model(model_dir):
    server = _server(model_dir)
    named = [(n, p.detach().clone()) for n, p in server.model.named_parameters()]
    with pytest.raises(KeyError, match="misses parameters"):
        asyncio.run(server.update_weights(named[1:]))
    with pytest.raises(KeyError, match="not in the rollout model"):
        asyncio.run(server.update_weights([*named, ("model.bogus", torch.zeros(1))]))


def test_dummy_load_format_starts_from_random_weights(model_dir):
    """verl's default load_format=dummy: the server holds no real weights until the actor's arrive."""
    assert _server(model_dir, "dummy").fingerprint() != _server(model_dir).fingerprint()


def test_max_new_tokens_follows_verl():
    kw = {"prompt_length": 32, "response_length": 12, "max_model_len": None}
    assert max_new_tokens({}, 10, **kw) == 12
    assert max_new_tokens({}, 40, **kw) == 4
    assert max_new_tokens({"max_tokens": 3}, 10, **kw) == 3
    assert max_new_tokens({}, 10, prompt_length=32, response_length=12, max_model_len=15) == 5


def _toy_score(rule: str, text: str, folder: Path) -> float:
    """The rule's `compute_score` on `text`, loaded from a file as verl's custom reward loader does."""
    path = folder / f"{rule}.py"
    path.write_text(TOY_REWARDS[rule])
    spec = importlib.util.spec_from_file_location(f"toy_{rule}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.compute_score("toy", text, "0")["score"]


def test_the_digest_parity_toy_reward_mixes_a_group_of_equal_length_answers(tmp_path):
    """tiny-math-h32's answers to the toy questions have one length, so the even-length rule grades them all
    alike; the digest rule grades each text by the parity of its sha256's first byte."""
    answers = ["6*3=18</think>\\boxed{18}", "7*3=29</think>\\boxed{29}", "7*3=21</think>\\boxed{21}"]
    assert {_toy_score("even_length", a, tmp_path) for a in answers} == {1.0}
    expected = [float(hashlib.sha256(a.encode()).digest()[0] % 2 == 0) for a in answers]
    assert [_toy_score("digest_parity", a, tmp_path) for a in answers] == expected
    assert len(set(expected)) == 2
    with pytest.raises(ValueError, match="reward 'exact'"):
        write_demo(tmp_path / "demo", reward="exact")
