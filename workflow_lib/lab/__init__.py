"""The theory lab (rules/lab.smk): the paper's extrapolation uncertainty measured on the builtin grammar.

- `prefix_sets`: the `lab_sets` rule's content: prefixes at an exact distance from the training support, their truth.
- `perturbation`: the lab's T on words, with keyed draws, and its constants alpha and C.
- `laws`: the `lab_sets` and `lab_laws` rules' command line: each model's next-word law on every prefix.
- `bounds`: U(delta), the TVs and the bounds, computed from the laws.
- `report`: the `lab` rule: the table, its findings and the figure.
"""
