"""The names the workflow's modules share: one home for each, imported everywhere else.

Standard library only, and importing nothing of the package: the config check, the grid, the rules, the report and
the cost model all read these, and it sits below every one of them.
"""

from __future__ import annotations

# The config's names (the schema's pattern for a dataset, model, eval set, decoder, strategy, ...): output paths
# hold them, and workflow_lib/layout.py reads them back. Here, not in layout.py, because the perturbation
# strategies check their names with it: a job's code digest (module_deps.code_digest) then does not include the
# layout, whose edits would otherwise rerun every sampling job.
NAME = r"[A-Za-z0-9][A-Za-z0-9_.-]*"
# An experiment's objective that evaluates a pretrained model as it is: no training job, the baseline condition's
# paths. A name a user's `objectives` may not take.
UNTRAINED = "untrained"
# The train_dataset of a zero-shot experiment that names none (its output paths say so). A reserved dataset name.
# The paper's T, a name perturb/strategies.py registers: Table 1, the headline and the perturbation family read it,
# and intensity 0 runs it.
PAPER_STRATEGY = "insertion"
NO_TRAIN_DATASET = "none"
# The splits of a builtin dataset; `reach` only where builtin.context_fraction > 0 (grid.dataset_splits).
BUILTIN_SPLITS = ("train", "validation", "test", "ood", "reach")
# Featurisers by name (docs/method.md §4); any other `evaluation.featuriser` is a local model folder.
FEATURISERS = ("minilm", "gpt2-large")
# The synonym sources of a perturbation (workflow_lib/perturb/synonyms.py builds each; the rules' wildcards read them).
# A `-words` source is its base source on the tokens that spell a whole word (perturb/synonyms.py `word_tokens`);
# `file` reads the user's pairs (synonyms.file, perturb/synonym_file.py).
SYNONYM_SOURCES = (
    "embedding",
    "distributional",
    "uniform",
    "oracle",
    "embedding-words",
    "distributional-words",
    "file",
)
# What a source's job reads besides the tokenizer: the train split's tokens, or a model's input embeddings.
SYNONYMS_FROM_TOKENS = ("distributional", "distributional-words", "embedding-words")
SYNONYMS_FROM_EMBEDDINGS = ("embedding", "embedding-words")
