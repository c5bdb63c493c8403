"""The one configuration object: defaults, validation messages, named variants, docs."""

import dataclasses

import pytest

from exgrpo.core.config import CHOICES, ConfigError, ExGRPOConfig, field_docs
from exgrpo.core.release_switches import SWITCHES
from exgrpo.core.variants import ABLATIONS, config_for


def test_defaults_are_the_papers_constants():
    cfg = ExGRPOConfig().validate()
    assert (cfg.n_rollouts, cfg.rho, cfg.shaping_beta, cfg.start_threshold, cfg.clip_eps) == (
        8,
        0.5,
        0.1,
        0.35,
        0.2,
    )
    assert (cfg.entropy_coef, cfg.kl_coef, cfg.adv_std_norm) == (0.001, 0.0, False)
    assert cfg.rbound == 7 and cfg.buffer_lbound == 0  # released: 1..7 successes of 8 are stored
    assert cfg.sigma_count == 1.0  # released: σ = 1 in success-count units


def test_sigma_units_conversion():
    assert ExGRPOConfig(sigma_units="accuracy", sampler_sigma=0.125).sigma_count == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("values", "field", "fragment"),
    [
        ({"rho": 1.0}, "rho", "[0.0, 1.0)"),
        ({"rho": -0.1}, "rho", "[0.0, 1.0)"),
        ({"sampler": "normal"}, "sampler", "gaussian"),
        ({"n_rollouts": "8"}, "n_rollouts", "expected int"),
        ({"delayed_start": "yes"}, "delayed_start", "true/false"),
        ({"not_a_setting": 1}, "not_a_setting", "unknown setting"),
        ({"buffer_lbound": 7}, "buffer_rbound", "buffer_lbound"),
        ({"n_rollouts": 1}, "n_rollouts", "at least 2"),
        ({"mask_hard_high": 0.8}, "mask_hard_high", "must be in"),
    ],
)
def test_bad_values_name_the_field(values, field, fragment):
    with pytest.raises(ConfigError) as err:
        ExGRPOConfig.from_dict(values, where="methods.x.")
    assert err.value.field == f"methods.x.{field}"
    assert f"'methods.x.{field}'" in str(err.value) and fragment in str(err.value)


def test_every_variant_is_valid_and_changes_something():
    default = ExGRPOConfig().to_dict()
    for name in ABLATIONS:
        cfg = config_for(name)
        if name not in ("exgrpo", "masked_full", "on_policy"):
            assert cfg.to_dict() != default, name
    with pytest.raises(ConfigError, match="unknown variant"):
        config_for("w/o everything")


def test_every_field_has_a_docstring_and_switches_exist():
    docs = field_docs()
    names = {f.name for f in dataclasses.fields(ExGRPOConfig)}
    assert set(docs) == names
    assert all(len(d) > 10 for d in docs.values())
    assert {s.field for s in SWITCHES} <= names
    assert set(CHOICES) <= names


def test_replace_validates():
    with pytest.raises(ConfigError, match="selection_mode"):
        ExGRPOConfig().replace(selection_mode="no_such_mode")
