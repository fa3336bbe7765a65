"""The featuriser's three forms read by one type (workflow_lib/featuriser.py)."""

from __future__ import annotations

import pytest

from workflow_lib.evaluate.settings import featuriser_settings
from workflow_lib.featuriser import Featuriser

CONFIG = {"models": {"smol": {"name": "HuggingFaceTB/SmolLM2-135M", "revision": "abc123"}}}


@pytest.mark.parametrize(
    ("chosen", "path_id", "label", "source"),
    [
        ("minilm", "minilm", "minilm", ("minilm", None)),
        ("models/my-encoder/", "local-my-encoder", "models/my-encoder/", ("models/my-encoder/", None)),
        ({"model": "smol"}, "model-smol", "smol", ("HuggingFaceTB/SmolLM2-135M", "abc123")),
    ],
)
def test_each_form_has_its_id_label_and_source(chosen, path_id, label, source):
    featuriser = Featuriser.of(chosen)
    assert (featuriser.id, featuriser.label, featuriser.source(CONFIG)) == (path_id, label, source)
    settings = featuriser_settings({**CONFIG, "evaluation": {"featuriser": chosen}})
    assert settings == {"featuriser": source[0], "featuriser_revision": source[1], "featuriser_label": label}


def test_a_study_model_and_a_folder_of_its_name_are_different_featurisers():
    assert Featuriser.of({"model": "minilm"}).id != Featuriser.of("minilm").id
