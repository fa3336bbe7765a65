"""The theory lab (rules/lab.smk): the paper's Section 3 quantities on the builtin grammar, whose true law is known.

`prefix_sets` (the `lab_sets` rule's content): prefixes at an exact distance from the support, with their truth;
`perturbation`: the lab's keyed T on words, its exact constants alpha and C and the Proposition's; `laws` (the
`lab_sets` and `lab_laws` rules' command line): each model's next-word law on every prefix; `premise`: classes that
meet the theorems' premise, with exact sups U_base(delta), U_perturb(delta); `theorems`: each theorem's verdict;
`bounds`: the trained models' disagreement and TV to the truth, and the coupling assertion; `verdicts` (the `lab`
rule's command line): reads the laws, writes tables, Markdown and figure; `premise_views`: the premise table per (T,
family, delta) and per (class, T, delta); `tables`, `findings`, `figure`: what the summary shows. docs/theory.md.
"""
