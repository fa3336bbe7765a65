"""The simulation study (rules/simulation.smk): the paper's bigram experiment, where the truth is known.

`study` is the `simulation_fit` rule's command line (truth, data, perturbation, the fits of one |V|), `model` the
bigram model and its batched training, `regulariser` the shrinkage control, `summary` the `simulation_summary`
rule's command line, `statistics` the paired tests (unseen pairs, held-out log-loss, Holm, the smallest detectable
differences, what each copy reaches), `conclusions` those tests as sentences, `figure` the paper's Figure 2 with the
controls, `settings` what the jobs read from the config. docs/method.md §5; docs/theory.md, "The simulation study".
"""
