"""MAUVE's featuriser as a config names it (`evaluation.featuriser`, docs/config.md): a name the featuriser knows
(`constants.FEATURISERS`), a local model folder, or one of the study's pretrained models (`{model: key}`). One type
reads the three forms, so that no stage asks which one it holds. Standard library only (the plan reads it).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from workflow_lib.constants import FEATURISERS


@dataclass(frozen=True)
class Featuriser:
    """The featuriser of a normalised config: `model`, a study model's key, or `name`, a known name or a folder."""

    name: str | None = None
    model: str | None = None

    @classmethod
    def of(cls, chosen: str | dict) -> Featuriser:
        """From `evaluation.featuriser` after `config.normalise` (which resolved `auto`)."""
        return cls(model=chosen["model"]) if isinstance(chosen, dict) else cls(name=chosen)

    @classmethod
    def from_config(cls, config: dict) -> Featuriser:
        return cls.of(config["evaluation"]["featuriser"])

    @property
    def id(self) -> str:
        """A path-safe name (the `featuriser` wildcard of results/features/ and results/controls/): a study model's
        key, a known name, or a local folder's last component."""
        if self.model is not None:
            return f"model-{self.model}"
        assert self.name is not None
        return self.name if self.name in FEATURISERS else f"local-{os.path.basename(os.path.normpath(self.name))}"

    @property
    def label(self) -> str:
        """How the report names it."""
        return self.model if self.model is not None else str(self.name)

    def source(self, config: dict) -> tuple[str, str | None]:
        """What loads it, and at which revision: a study model's hub id or folder (a GGUF model's dequantised folder,
        workflow_lib/pretrained.py), else the name or folder itself."""
        if self.model is not None:
            model = config["models"][self.model]
            return model["name"], model.get("revision")
        assert self.name is not None
        return self.name, None
