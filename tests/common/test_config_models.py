"""Config validation of models and what trains and samples them: training settings, objectives, a scratch model's
architecture, the featuriser, decoders, and local folders named as models or tokenizers."""

from __future__ import annotations

import pytest

from support.config_errors import check, error_of
from support.workflow_runs import tiny_config


def test_training_hyperparameters_are_checked_before_any_job():
    config = tiny_config()
    config["training"] = {"learning_rate": 0}
    message = error_of(config)
    assert "training.learning_rate" in message and "exclusiveMinimum 0" in message
    config = tiny_config()
    config["models"]["tiny"]["training"] = {"learning_rate": -1.0}
    assert "models.tiny.training.learning_rate" in error_of(config)
    config["models"]["tiny"]["training"] = {"learnin_rate": 1.0}
    assert "models.tiny.training: unknown key(s) 'learnin_rate'" in error_of(config)


def test_unknown_objective_names_key_and_allowed():
    config = tiny_config()
    config["experiments"]["main"]["objectives"] = ["mle", "focal"]
    message = error_of(config)
    assert "experiments.main.objectives[1]" in message and "'focal'" in message and "brier" in message
    config["objectives"] = {"focal": {"loss": "focal"}}
    assert "objectives.focal.loss" in error_of(config)


def test_user_objectives_extend_the_predefined_ones():
    config = tiny_config()
    config["objectives"] = {"alpha3": {"loss": "alpha_power", "alpha": 3}}
    config["experiments"]["main"]["objectives"] = ["mle", "alpha3"]
    filled = check(config)
    assert set(filled["objectives"]) >= {"mle", "brier", "mixce", "tvd", "emo", "alpha3"}


def with_architecture(**changes) -> dict:
    config = tiny_config()
    arch = {**config["models"]["tiny"]["architecture"], **changes}
    config["models"]["tiny"]["architecture"] = {k: v for k, v in arch.items() if v is not ...}
    return config


@pytest.mark.parametrize(
    "changes, expected",
    [
        ({"n_embd": 30, "n_head": 4}, ["models.tiny.architecture: n_embd = 30 is not divisible by n_head = 4"]),
        ({"n_head": ...}, ["n_embd = 16 is not divisible by n_head = 12 (unset: GPT2Config's default)"]),
        ({"n_heads": 2}, ["models.tiny.architecture: unknown key(s) 'n_heads'", "allowed keys:", "n_head,"]),
        ({"vocab_size": 300}, ["models.tiny.architecture: unknown key(s) 'vocab_size'", "come from the tokenizer"]),
        ({"n_layer": 0}, ["models.tiny.architecture.n_layer", "minimum 1"]),
        ({"n_inner": 0}, ["models.tiny.architecture.n_inner", "minimum 1"]),
        ({"attn_pdrop": 1.5}, ["models.tiny.architecture.attn_pdrop", "exclusiveMaximum 1"]),
        ({"activation_function": "gelu2"}, ["models.tiny.architecture.activation_function", "'gelu_new'"]),
        ({"n_embd": "wide"}, ["models.tiny.architecture.n_embd", "integer"]),
        ({"n_embd": 16.0}, ["models.tiny.architecture.n_embd: GPT2Config takes an integer", "write 16"]),
        (
            {"layer_norm_epsilon": 1},
            ["models.tiny.architecture.layer_norm_epsilon: GPT2Config takes a float", "write 1.0"],
        ),
    ],
)
def test_scratch_architecture_that_cannot_be_built_is_refused_before_any_job(changes, expected):
    message = error_of(with_architecture(**changes))
    assert all(part in message for part in expected), message


def test_scratch_architecture_with_every_kind_of_key_is_valid():
    config = with_architecture(
        n_layer=2,
        n_head=4,
        n_embd=32,
        n_positions=32,
        n_inner=None,
        activation_function="relu",
        resid_pdrop=0,
        embd_pdrop=0.0,
        attn_pdrop=0.2,
        layer_norm_epsilon=1.0e-5,
        initializer_range=0.02,
        scale_attn_weights=True,
        scale_attn_by_inverse_layer_idx=False,
        reorder_and_upcast_attn=False,
        tie_word_embeddings=False,
    )
    assert check(config)["models"]["tiny"]["architecture"]["n_inner"] is None


def test_architecture_of_a_pretrained_model_is_refused():
    config = tiny_config()
    config["models"]["gpt2"] = {"source": "hf", "name": "gpt2", "tokenizer": "bpe", "architecture": {"n_layer": 2}}
    message = error_of(config)
    assert "models.gpt2.architecture" in message and "source: scratch" in message


def test_featuriser_is_a_known_name_or_a_local_model_folder(tmp_path):
    config = tiny_config()
    config["evaluation"]["featuriser"] = "models/my-encoder"
    message = error_of(config, tmp_path)
    assert "evaluation.featuriser" in message and "'models/my-encoder'" in message
    assert "'minilm', 'gpt2-large'" in message and "config.json" in message
    (tmp_path / "models/my-encoder").mkdir(parents=True)
    assert "evaluation.featuriser" in error_of(config, tmp_path)  # a folder, but no model in it
    (tmp_path / "models/my-encoder/config.json").write_text("{}")
    assert check(config, tmp_path)["evaluation"]["featuriser"] == "models/my-encoder"
    config["evaluation"]["featuriser"] = "gpt2-large"
    check(config, tmp_path)


@pytest.mark.parametrize(
    "change, expected",
    [
        (
            lambda c: c["sampling"].update(top_p=0.9),
            "config key sampling.top_p: decoding settings are now named decoders",
        ),
        (
            lambda c: c["experiments"]["main"].update(decoders=["greedy"]),
            "experiments.main.decoders[0]: unknown decoder 'greedy'",
        ),
        (lambda c: c.update(decoders={"unbiased": {"top_k": 40}}), "decoders.unbiased: the name is reserved"),
        (lambda c: c.update(decoders={"hot": {"temperature": 0}}), "decoders.hot.temperature"),
        (
            lambda c: c["experiments"]["main"].update(objectives=["untrained"]),
            "experiments.main.objectives[0]: 'untrained' evaluates a pretrained model as it is, but model 'tiny' is source: scratch",
        ),
        (lambda c: c.update(objectives={"untrained": {"loss": "mle"}}), "objectives.untrained: the name is reserved"),
    ],
)
def test_decoders_and_untrained_models_are_checked_before_any_job(change, expected):
    config = tiny_config()
    change(config)
    assert expected in error_of(config)


def test_decoders_are_named_and_unbiased_is_predefined():
    config = tiny_config()
    config["decoders"] = {"top-p-0.9": {"top_p": 0.9}}
    config["experiments"]["main"]["decoders"] = ["unbiased", "top-p-0.9"]
    filled = check(config)
    assert filled["decoders"]["unbiased"] == {}
    assert filled["decoders"]["top-p-0.9"] == {"top_p": 0.9, "top_k": 0, "temperature": 1.0, "typical_p": 1.0}
    assert check(tiny_config())["experiments"]["main"]["decoders"] == ["unbiased"]


def test_an_integer_temperature_is_a_float_and_samples():
    """`temperature: 2` passes the schema (a number); transformers' TemperatureLogitsWarper refuses an int, so
    the config makes it 2.0, and the decoder draws from softmax(logits / 2)."""
    import torch

    from workflow_lib.sample.decoding import decoded_probs, draw

    config = tiny_config()
    config["decoders"] = {"hot": {"temperature": 2, "top_p": 1}}
    config["experiments"]["main"]["decoders"] = ["hot"]
    hot = check(config)["decoders"]["hot"]
    assert hot["temperature"] == 2.0 and isinstance(hot["temperature"], float) and isinstance(hot["top_p"], float)
    logits = torch.tensor([[2.0, 0.0, -1.0, 0.5]])
    assert torch.allclose(decoded_probs(logits, hot), torch.softmax(logits.double() / 2, dim=-1))
    tokens = draw(logits.repeat(4, 1), torch.tensor([0.05, 0.4, 0.7, 0.99], dtype=torch.float64), hot)
    assert tokens.tolist() == [0, 0, 2, 3]  # inverse CDF of (0.485, 0.178, 0.108, 0.229)


@pytest.mark.parametrize(
    "section, entry",
    [
        ("models", {"source": "hf", "name": "./checkpoints/missing", "tokenizer": "bpe"}),
        ("tokenizers", {"source": "hf", "name": "../tokenizers/missing"}),
    ],
)
def test_a_local_folder_that_does_not_exist_fails_at_plan_time_naming_the_key(tmp_path, section, entry):
    config = tiny_config()
    config[section]["local"] = entry
    assert error_of(config, tmp_path).startswith(
        f"config key {section}.local.name: '{entry['name']}' is a path, and no such folder exists"
    )
    (tmp_path / entry["name"]).mkdir(parents=True)  # the same config with the folder there plans
    check(config, tmp_path)
    config[section]["local"]["name"] = "someone/hub-model"  # a hub id is not checked here (the hub may have it)
    check(config, tmp_path)
