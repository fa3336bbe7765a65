"""Sample text in the report's tables is data: Markdown and LaTeX show its characters and nothing it spells runs
or renders as markup (issue 64)."""

from __future__ import annotations

import re

import pyarrow as pa
import pyarrow.parquet as pq

from workflow_lib.report import escape
from workflow_lib.report.tables import examples, write_table

HOSTILE = "a | b \\ c $x$ #1 {y} ^z ~w _v_ & 5% <b>bold</b> `code` *em* [link](http://e)\nnext line"


def markdown_cells(row: str) -> list[str]:
    """A Markdown table row's cells: split on the pipes that are not backslash-escaped."""
    return re.split(r"(?<!\\)\|", row.strip())[1:-1]


def latex_cells(row: str) -> list[str]:
    return re.split(r"(?<!\\)&", row.removesuffix(r" \\"))


def test_markdown_escapes_every_character_that_is_markup_in_a_cell():
    cell = escape.markdown(HOSTILE)
    assert "\n" not in cell and "<b>" not in cell and "`code`" not in cell and "[link]" not in cell
    # Unescaping (CommonMark: a backslash before ASCII punctuation is that character) gives the text back.
    assert re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", cell) == HOSTILE.replace("\n", " ")
    assert len(markdown_cells(f"| {cell} | x |")) == 2


def test_latex_escapes_every_special_character():
    cell = escape.latex(HOSTILE + " ± 1")
    bare = cell.removesuffix(r"$\pm$ 1")
    for command in (
        r"\textbackslash{}",
        r"\textasciicircum{}",
        r"\textasciitilde{}",
        r"\textless{}",
        r"\textgreater{}",
    ):
        bare = bare.replace(command, "")
    assert re.search(r"(?<!\\)[#$%&_{}^~<>]", bare) is None, bare  # each special character escaped
    assert r"\textbackslash{}" in cell and r"\$x\$" in cell and r"\{y\}" in cell and r"\%" in cell
    assert cell.endswith(r"$\pm$ 1") and "\n" not in cell


def test_a_continuation_full_of_markup_keeps_its_row_in_both_tables(tmp_path):
    rows = [{"method": "human", "continuation": HOSTILE}, {"method": "m | 2", "continuation": "plain"}]
    write_table(rows, [{}, {}], ["method", "continuation"], str(tmp_path / "t"), caption="c")
    md = (tmp_path / "t.md").read_text().splitlines()
    body = [line for line in md if line.startswith("| ") and "---" not in line][1:]
    assert len(body) == 2 and all(len(markdown_cells(line)) == 2 for line in body)
    tex = (tmp_path / "t.tex").read_text()
    data = tex.split("\\midrule\n", 1)[1].split("\n\\bottomrule", 1)[0].splitlines()
    assert len(data) == 2 and all(len(latex_cells(line)) == 2 for line in data)
    assert tex.count("{") == tex.count("}")  # nothing the text holds opens a group it does not close


def test_the_examples_table_escapes_the_prompt_and_the_samples(tmp_path):
    prompts = tmp_path / "prompts.parquet"
    pq.write_table(pa.table({"prompt_id": [0], "prefix": ["P | $1"], "reference": ["P | $1 " + HOSTILE]}), prompts)
    sample = (
        tmp_path / "results/samples/tiny/syn/mle/none/augment-m1/none-0/seed1/wt/unbiased/none/none-0-exact.parquet"
    )
    sample.parent.mkdir(parents=True)
    pq.write_table(pa.table({"prompt_id": [0], "run": [0], "text": [HOSTILE]}), sample)
    examples(str(prompts), [str(sample)], str(tmp_path / "ex"))
    md = (tmp_path / "ex.md").read_text()
    assert md.startswith("Prompt: P \\| \\$1\n")
    body = [line for line in md.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert len(body) == 2 and all(len(markdown_cells(line)) == 2 for line in body)
    assert "<b>" not in md and "<b>" not in (tmp_path / "ex.tex").read_text()
