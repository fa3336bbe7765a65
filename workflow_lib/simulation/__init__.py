"""The simulation study (rules/simulation.smk): the paper's bigram experiment, where the truth is known.

- `study`: the `simulation` and `simulation_summary` rules' command line.
- `model`: the bigram model and its training with perturbation.
- `summary`: the replications summarised into a table.
- `figure`: the simulation figure (the paper's Figure 2).
"""
