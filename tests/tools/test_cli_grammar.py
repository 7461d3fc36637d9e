"""`corral compile --grammar FILE`: a GBNF or Lark grammar's DFA, whether it is exact or cut at a
depth (docs/grammars.md), samples that parse; a syntax error is one line naming the line and
column, status 2."""

from __future__ import annotations

import json

from corral.tools.cli import main

GRAMMAR = 'root ::= "(" root ")" | item+\nitem ::= [a-c]\n'


def test_compile_grammar_prints_depth_states_and_samples(tmp_path, capsys):
    path = tmp_path / "nest.gbnf"
    path.write_text(GRAMMAR, encoding="utf-8")
    assert main(["compile", "--grammar", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "grammar: cut at depth 5 (root)"
    assert lines[1].startswith("states: ")
    assert len(lines) == 2 + 5  # five samples by default, as for a schema
    assert main(["compile", "--grammar", str(path), "--json", "--samples", "2"]) == 0
    facts = json.loads(capsys.readouterr().out)
    assert (facts["exact"], facts["max_recursion"], facts["cut_rules"]) == (False, 5, ["root"])
    assert len(facts["samples"]) == 2


def test_compile_lark_grammar_by_extension_or_syntax(tmp_path, capsys):
    text = 'start: WORD ("," WORD)*\n%import common.WORD\n'
    for name, extra in (("words.lark", []), ("words.txt", ["--syntax", "lark"])):
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        assert main(["compile", "--grammar", str(path), "--samples", "0", *extra]) == 0
        assert capsys.readouterr().out.splitlines()[0] == "grammar: exact"


def test_compile_grammar_syntax_error_names_line_and_column(tmp_path, capsys):
    path = tmp_path / "bad.gbnf"
    path.write_text('root ::= item\nitem ::= "a" (\n', encoding="utf-8")
    assert main(["compile", "--grammar", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"corral compile: {path}: line 2 column 14: expected ')'"
    assert main(["compile", "a", "--grammar", str(path)]) == 2
    assert "--grammar FILE alone" in capsys.readouterr().err
