"""The simulation study (rules/simulation.smk): the paper's bigram experiment, where the truth is known.

- `study`: the `simulation_fit` rule's command line: truth, data, perturbation, the fits of one |V|.
- `model`: the bigram model and its training with perturbation.
- `regulariser`: the control arm, the unperturbed fit shrunk toward uniform, tuned on held-out sequences.
- `summary`: the `simulation_summary` rule's command line: the replications summarised into tables.
- `statistics`: the paired tests on unseen pairs and on the held-out log-loss, Holm's correction, the smallest
  detectable differences, what each perturbed copy reaches of the unseen pairs.
- `conclusions`: those tests as plain sentences.
- `figure`: the simulation figure (the paper's Figure 2, with the controls).
"""
