"""A perturbation that happened, measured: the realised share of perturbed positions beside the nominal intensity.

Realised: the positions the job's T selected over its perturbable ones (every position that is not a special
token); its expectation is alpha times the share of those that are eligible, so a synonym table that covers few
tokens shows as a share far below alpha. NEFTune noises every position (`Strategy.every_position`): its share is 1.
`check_realised` stops a job whose perturbation did not happen (no eligible position, or, at an expected count of
at least MIN_EXPECTED, a share below STOP_FRACTION of alpha), naming the synonym table's settings. `Tally` adds the
counts up without a Python loop over tokens. The definitions, the stop rule and why chance does not trip it:
docs/method.md §1, "Realised against nominal".
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from workflow_lib.cli import StageError

# A realised share below this fraction of the nominal intensity stops the job (a perturbation that did not happen);
# one above it, however far below alpha (a table covering a tenth of the tokens realises a tenth of alpha), runs and
# shows in the summary's "Perturbation realised" ...
STOP_FRACTION = 0.05
MIN_EXPECTED = 20  # ... where the expected count of perturbed positions (nominal * perturbable) is at least this
SETTINGS_KEY = b"synonym_settings"  # a synonym table Parquet's metadata: its source and settings (synonyms rule)
REALISED_KEY = b"realised"  # a samples Parquet's metadata: its `Realised` counts


@dataclass(frozen=True)
class Realised:
    """One job's perturbation, counted: `selected` of `perturbable` positions (not special), of which `eligible`
    could be selected (None where not counted), against the nominal intensity."""

    nominal: float
    perturbable: int
    selected: int
    eligible: int | None = None
    every_position: bool = False  # NEFTune: every position noised by the trainer, nothing selected in the data

    @property
    def share(self) -> float:
        """The realised share of perturbed positions (1 for a strategy that perturbs every position)."""
        if self.every_position:
            return 1.0 if self.nominal > 0 else 0.0
        return self.selected / self.perturbable if self.perturbable else 0.0

    @property
    def expected(self) -> float:
        """The expected number of perturbed positions were every position eligible: nominal * perturbable."""
        return self.nominal * self.perturbable

    def as_dict(self) -> dict:
        return {
            "nominal_intensity": self.nominal,
            "realised_share": self.share,
            "selected_positions": self.selected,
            "perturbable_positions": self.perturbable,
            "eligible_positions": self.eligible,
            "every_position": self.every_position,
        }

    @classmethod
    def from_dict(cls, data: dict) -> Realised:
        return cls(
            float(data["nominal_intensity"]),
            int(data["perturbable_positions"]),
            int(data["selected_positions"]),
            None if data.get("eligible_positions") is None else int(data["eligible_positions"]),
            bool(data.get("every_position", False)),
        )

    def __add__(self, other: Realised) -> Realised:
        """Two parts of one job (a sampling job's shards) counted together."""
        if (self.nominal, self.every_position) != (other.nominal, other.every_position):
            raise ValueError("realised counts of different perturbations do not add up")
        eligible = None if self.eligible is None or other.eligible is None else self.eligible + other.eligible
        return Realised(
            self.nominal,
            self.perturbable + other.perturbable,
            self.selected + other.selected,
            eligible,
            self.every_position,
        )

    def stop_reason(self) -> str | None:
        """Why this perturbation did not happen as named (the module docstring's rule), or None."""
        if self.nominal <= 0 or self.every_position or self.perturbable == 0:
            return None
        if self.eligible == 0:
            return f"no position of {self.perturbable} could be perturbed (none has a synonym)"
        if self.expected >= MIN_EXPECTED and self.share < STOP_FRACTION * self.nominal:
            return (
                f"{self.selected} of {self.perturbable} positions perturbed, a realised share of {self.share:.4g}, "
                f"below {STOP_FRACTION} x the nominal intensity {self.nominal:g} (expected count "
                f"{self.expected:.1f} >= {MIN_EXPECTED})"
            )
        return None


class Tally:
    """Selected, perturbable and eligible positions added up over a job's perturbations (ints, numpy or torch
    scalars: no device sync until `realised`)."""

    def __init__(self) -> None:
        self.selected: Any = 0
        self.perturbable: Any = 0
        self.eligible: Any = 0

    def add(self, selected: Any, perturbable: Any, eligible: Any) -> None:
        self.selected = self.selected + selected
        self.perturbable = self.perturbable + perturbable
        self.eligible = self.eligible + eligible

    def realised(self, nominal: float, every_position: bool = False) -> Realised:
        return Realised(nominal, int(self.perturbable), int(self.selected), int(self.eligible), every_position)


def count_positions(values: Any, special_ids: Any, has_synonyms: Any = None) -> tuple[Any, Any]:
    """(perturbable, eligible) positions of a flat array of token ids (numpy or torch): those that are not special,
    and of them those with a synonym where `has_synonyms` ([V] bool) is given (a strategy that writes one)."""
    from workflow_lib.perturb.backends import backend

    xp = backend(values)
    perturbable = ~xp.isin(values, xp.tensor(list(special_ids), values))
    eligible = perturbable & has_synonyms[xp.as_int(values)] if has_synonyms is not None else perturbable
    return perturbable.sum(), eligible.sum()


def table_settings(metadata: dict | None) -> dict | None:
    """The source and settings a synonym table was built with, from its Parquet metadata (None: not recorded)."""
    if not metadata or SETTINGS_KEY not in metadata:
        return None
    return json.loads(metadata[SETTINGS_KEY])


def settings_hint(settings: dict | None, path: str | None = None) -> str:
    """The config keys that shaped a synonym table, with their values where known: what to change."""
    where = f"the synonym table {path}" if path else "the synonym table"
    if settings is None:
        return f"{where} (see its source and synonyms.k, synonyms.min_count)"
    source = settings.get("source", "?")
    keys = f"synonyms.k = {settings.get('k')}, synonyms.min_count = {settings.get('min_count')}"
    if source.startswith("distributional"):
        advice = "a token needs synonyms.min_count occurrences in the training split to have or be a synonym"
    elif source.startswith("embedding"):
        advice = "its synonyms are the synonyms.k nearest tokens in synonyms.embedding_model's embeddings"
    elif source == "file":
        advice = "its pairs are synonyms.file's"
    else:
        advice = "its synonyms come from the source itself"
    return f"{where} of source {source!r} ({keys}; {advice})"


def check_realised(realised: Realised, condition: str, settings: dict | None, path: str | None = None) -> None:
    """Stop the job (StageError) where its perturbation did not happen as named (`Realised.stop_reason`)."""
    reason = realised.stop_reason()
    if reason is not None:
        raise StageError(
            f"{condition}: the perturbation did not happen: {reason}. It would pass the unperturbed data for a "
            f"perturbed condition. Check {settings_hint(settings, path)}"
        )
