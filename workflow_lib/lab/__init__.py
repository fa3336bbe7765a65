"""The theory lab (rules/lab.smk): the paper's Section 3 quantities on the builtin grammar, whose true law is known.

- `prefix_sets`: the `lab_sets` rule's content: prefixes at an exact distance from the training support, their truth.
- `perturbation`: the lab's T on words, with keyed draws; its exact constants alpha and C, and the Proposition's.
- `laws`: the `lab_sets` and `lab_laws` rules' command line: each model's next-word law on every prefix.
- `premise`: model classes that meet the theorems' premise, and their U_base(delta), U_perturb(delta) as exact sups.
- `theorems`: each theorem's verdict from those sups, in the premise table (the lab's rows beside them as a sample).
- `bounds`: the trained models' disagreement and TV to the truth (descriptive), and the coupling assertion.
- `verdicts`: the `lab` rule: the tables, their findings and the figure.
"""
