"""Readers on small hand-made files: exact rows, undecodable-byte counts and error messages."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from workflow_lib.data.readers import (
    FORMATS,
    read_jsonl,
    read_parquet_text,
    read_plain_text,
    read_rows,
    read_wikitext_raw,
    read_writingprompts,
)


def write(tmp_path, name: str, data: bytes) -> str:
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


# --- WikiText ----------------------------------------------------------------------------------------------


def test_wikitext_rows_match_hub_semantics(tmp_path):
    path = write(
        tmp_path,
        "wiki.test.raw",
        b" \n = Valkyria Chronicles III = \n \n Senj\xc5\x8d no Valkyria 3 , he said . \n\n \t \nno newline at end",
    )
    assert read_wikitext_raw(path) == [
        "",
        " = Valkyria Chronicles III = \n",
        "",
        " Senjō no Valkyria 3 , he said . \n",
        "",
        "",
        "no newline at end",
    ]


def test_wikitext_universal_newlines_but_not_unicode_line_separators(tmp_path):
    # \r\n and \r end a line (Python text mode, as the hub loader); U+2028 and form feed do not.
    path = write(tmp_path, "w.raw", "a\r\nb\rc\u2028d\x0ce\n".encode())
    assert read_wikitext_raw(path) == ["a\n", "b\n", "c\u2028d\x0ce\n"]


def test_wikitext_empty_file(tmp_path):
    assert read_wikitext_raw(write(tmp_path, "empty.raw", b"")) == []


def test_undecodable_bytes_are_replaced_and_counted(tmp_path):
    path = write(tmp_path, "bad.raw", b"good\nbad \xff byte\ntwo \xfe\xfe bad\nreal \xef\xbf\xbd char\n")
    rows, stats = read_rows("wikitext", [path])
    # errors="replace" gives one U+FFFD per invalid byte here; a genuine U+FFFD in the file is not a failure.
    assert rows == ["good\n", "bad \ufffd byte\n", "two \ufffd\ufffd bad\n", "real \ufffd char\n"]
    assert stats == {"rows": 4, "undecodable_rows": 2}


def test_truncated_multibyte_sequence_is_replaced(tmp_path):
    # "é" is C3 A9; a lone C3 before the newline is one maximal invalid subpart -> one U+FFFD.
    path = write(tmp_path, "trunc.raw", b"caf\xc3\nok\n")
    assert read_rows("wikitext", [path]) == (["caf\ufffd\n", "ok\n"], {"rows": 2, "undecodable_rows": 1})


# --- JSONL -------------------------------------------------------------------------------------------------


def test_jsonl_reads_field_in_order_and_skips_blank_lines(tmp_path):
    path = write(
        tmp_path,
        "webtext.test.jsonl",
        b'{"id": 0, "text": "First doc.\\nSecond line.", "length": 5}\n'
        b"\n"
        b'{"id": 1, "text": "  keeps spaces  "}\n'
        b'{"id": 2, "text": "caf\\u00e9 \\ud83d\\ude00"}\n',
    )
    assert read_jsonl(path) == ["First doc.\nSecond line.", "  keeps spaces  ", "café 😀"]


def test_jsonl_other_field(tmp_path):
    path = write(tmp_path, "x.jsonl", b'{"text": "no", "body": "yes"}\n{"body": "again"}\n')
    assert read_jsonl(path, field="body") == ["yes", "again"]
    assert read_rows("jsonl", [path], text_field="body") == (["yes", "again"], {"rows": 2, "undecodable_rows": 0})


def test_jsonl_bad_json_names_file_and_line(tmp_path):
    path = write(tmp_path, "broken.jsonl", b'{"text": "ok"}\n{"text": "unterminated\n')
    with pytest.raises(ValueError, match=r"broken\.jsonl, line 2: invalid JSON"):
        read_jsonl(path)


def test_jsonl_missing_field_names_file_and_line(tmp_path):
    path = write(tmp_path, "missing.jsonl", b'{"text": "a"}\n\n{"body": "b"}\n')
    # line numbers count the blank line too: they point into the file as an editor shows it
    with pytest.raises(ValueError, match=r"missing\.jsonl, line 3: no field 'text'"):
        read_jsonl(path)


def test_jsonl_non_object_or_non_string_field(tmp_path):
    with pytest.raises(ValueError, match=r"line 1: no field 'text'"):
        read_jsonl(write(tmp_path, "list.jsonl", b'["text"]\n'))
    with pytest.raises(ValueError, match=r"line 1: field 'text' is int, not a string"):
        read_jsonl(write(tmp_path, "int.jsonl", b'{"text": 3}\n'))


def test_jsonl_undecodable_bytes_and_lone_surrogate_escapes(tmp_path):
    path = write(tmp_path, "bad.jsonl", b'{"text": "a\xffb"}\n{"text": "lone \\ud800 half"}\n{"text": "fine"}\n')
    assert read_rows("jsonl", [path]) == (
        ["a\ufffdb", "lone \ufffd half", "fine"],
        {"rows": 3, "undecodable_rows": 2},
    )


# --- WritingPrompts ----------------------------------------------------------------------------------------


def test_writingprompts_joins_stripped_prompt_and_story(tmp_path):
    source = write(tmp_path, "test.wp_source", b"[ WP ] A prompt . \n[ EU ] Second prompt\n")
    target = write(tmp_path, "test.wp_target", b" Story `` one '' . <newline> More . \nStory two\n")
    assert read_writingprompts(source, target) == [
        "[ WP ] A prompt . Story `` one '' . <newline> More .",
        "[ EU ] Second prompt Story two",
    ]
    assert read_rows("writingprompts", [source, target]) == (
        ["[ WP ] A prompt . Story `` one '' . <newline> More .", "[ EU ] Second prompt Story two"],
        {"rows": 2, "undecodable_rows": 0},
    )


def test_writingprompts_line_count_mismatch(tmp_path):
    source = write(tmp_path, "s.wp_source", b"p1\np2\np3\n")
    target = write(tmp_path, "t.wp_target", b"s1\ns2\n")
    with pytest.raises(ValueError, match=r"s\.wp_source has 3, .*t\.wp_target has 2"):
        read_writingprompts(source, target)


def test_writingprompts_needs_two_files(tmp_path):
    source = write(tmp_path, "s.wp_source", b"p1\n")
    with pytest.raises(ValueError, match="exactly two files"):
        read_rows("writingprompts", [source])


def test_writingprompts_counts_a_pair_once(tmp_path):
    source = write(tmp_path, "s.wp_source", b"bad \xff prompt\nok\n")
    target = write(tmp_path, "t.wp_target", b"bad \xff story\nok \xfe\n")
    assert read_rows("writingprompts", [source, target]) == (
        ["bad \ufffd prompt bad \ufffd story", "ok ok \ufffd"],
        {"rows": 2, "undecodable_rows": 2},
    )


# --- Plain text --------------------------------------------------------------------------------------------


def test_plain_text_paragraphs(tmp_path):
    path = write(
        tmp_path,
        "book.txt",
        b"\n\nFirst paragraph, line one\r\n  line two indented\n\n \t\n\nSecond paragraph.\nEnd without newline",
    )
    assert read_plain_text(path) == [
        "First paragraph, line one\n  line two indented",
        "Second paragraph.\nEnd without newline",
    ]


def test_plain_text_blank_only_file(tmp_path):
    assert read_plain_text(write(tmp_path, "blank.txt", b"\n \n\t\n")) == []


def test_plain_text_counts_paragraphs_with_bad_bytes(tmp_path):
    path = write(tmp_path, "bad.txt", b"one \xff\ntwo \xfe\n\nclean\n")
    assert read_rows("text", [path]) == (["one \ufffd\ntwo \ufffd", "clean"], {"rows": 2, "undecodable_rows": 1})


# --- Parquet -----------------------------------------------------------------------------------------------


def test_parquet_column_with_nulls(tmp_path):
    path = str(tmp_path / "shard.parquet")
    pq.write_table(pa.table({"text": ["a\n", None, ""], "body": ["x", "y", "z"]}), path)
    assert read_parquet_text(path) == ["a\n", "", ""]
    assert read_parquet_text(path, column="body") == ["x", "y", "z"]
    assert read_rows("parquet", [path], text_field="body") == (["x", "y", "z"], {"rows": 3, "undecodable_rows": 0})


def test_parquet_missing_column_lists_columns(tmp_path):
    path = str(tmp_path / "shard.parquet")
    pq.write_table(pa.table({"body": ["x"]}), path)
    with pytest.raises(ValueError, match=r"no column 'text' \(columns: \['body'\]\)"):
        read_parquet_text(path)


# --- Dispatcher --------------------------------------------------------------------------------------------


def test_read_rows_concatenates_files_in_order(tmp_path):
    first = write(tmp_path, "a.raw", b" x \n\n")
    second = write(tmp_path, "b.raw", b" y \xff\n")
    assert read_rows("wikitext", [first, second]) == ([" x \n", "", " y \ufffd\n"], {"rows": 3, "undecodable_rows": 1})


def test_read_rows_unknown_format_lists_allowed():
    with pytest.raises(ValueError, match="allowed formats: wikitext, jsonl, writingprompts, text, lines, parquet"):
        read_rows("csv", ["whatever.csv"])
    assert FORMATS == ("wikitext", "jsonl", "writingprompts", "text", "lines", "parquet")


def test_read_rows_missing_file_names_path(tmp_path):
    present = write(tmp_path, "a.raw", b"x\n")
    absent = str(tmp_path / "nowhere" / "wiki.test.raw")
    with pytest.raises(FileNotFoundError, match="nowhere/wiki.test.raw"):
        read_rows("wikitext", [present, absent])


def test_read_rows_needs_files():
    with pytest.raises(ValueError, match="no input files"):
        read_rows("wikitext", [])


def test_lines_format_is_one_document_per_line_where_text_is_one_per_paragraph(tmp_path):
    path = tmp_path / "docs.txt"
    path.write_text("first document\nsecond document\n\nthird document\n")
    assert read_rows("lines", [path]) == (
        ["first document", "second document", "third document"],
        {"rows": 3, "undecodable_rows": 0},
    )
    assert read_rows("text", [path])[1]["rows"] == 2  # text joins lines up to a blank line
