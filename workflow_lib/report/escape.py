"""Text as a Markdown table cell and a LaTeX table cell show it: sample text and labels are data, never markup.

A continuation can hold `|` (which would split a Markdown row), `<b>` (raw HTML), `$x$` (MkDocs' maths) or `\\`,
`{`, `%` (which would break or rewrite a LaTeX table); each is escaped so that the cell reads as the characters
it holds, and line breaks become spaces so that a cell stays on its row."""

from __future__ import annotations

# Markdown: CommonMark lets any ASCII punctuation be escaped with a backslash; these are the ones that mean
# something inside a table cell (emphasis, code, links, HTML, maths, strikethrough, entities, the cell rule).
MARKDOWN_CHARS = "\\`*_|<>[]$~^{}&#"
_MARKDOWN = {c: "\\" + c for c in MARKDOWN_CHARS}
_LATEX = {
    "\\": r"\textbackslash{}",
    "{": r"\{",
    "}": r"\}",
    "$": r"\$",
    "#": r"\#",
    "%": r"\%",
    "&": r"\&",
    "_": r"\_",
    "^": r"\textasciicircum{}",
    "~": r"\textasciitilde{}",
    "<": r"\textless{}",
    ">": r"\textgreater{}",
    "±": r"$\pm$",
}
_BREAKS = {"\n": " ", "\r": " ", "\t": " "}
MARKDOWN = str.maketrans(_MARKDOWN | _BREAKS)
LATEX = str.maketrans(_LATEX | _BREAKS)


def markdown(text: str) -> str:
    """`text` as a Markdown table cell shows it."""
    return text.translate(MARKDOWN)


def latex(text: str) -> str:
    """`text` as a LaTeX cell (or a `%` comment line) shows it; `±` as the maths symbol."""
    return text.translate(LATEX)
