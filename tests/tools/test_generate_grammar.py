"""`corral generate --grammar FILE` in the quick form (corral.tools.cli), on the byte-level
stand-in model: every answer parses with the `lark` parser; a grammar error names its line and
column, before any model is loaded."""

from __future__ import annotations

import lark
import pytest
from corral.tools import cli
from corral.tools.cli import main
from stand_in_model import StandInModel

SUM_LARK = """start: expr
expr: NUMBER | "(" NUMBER " + " expr ")"
NUMBER: /[0-9]{1,3}/
"""
SUM_GBNF = r"""root ::= expr
expr ::= num | "(" num " + " expr ")"
num ::= [0-9] | [0-9] [0-9] | [0-9] [0-9] [0-9]
"""


@pytest.fixture
def stand_in(monkeypatch):
    monkeypatch.setattr(cli, "load_model", lambda path=None, **kwargs: StandInModel())


FILES = [
    ("sum.lark", SUM_LARK, []),
    ("sum.gbnf", SUM_GBNF, []),
    ("t", SUM_LARK, ["--syntax", "lark"]),
]


@pytest.mark.parametrize("name, text, syntax", FILES)
def test_every_answer_of_a_grammar_parses_with_lark(tmp_path, capsys, stand_in, name, text, syntax):
    path = tmp_path / name
    path.write_text(text)
    argv = ["generate", "--grammar", str(path), *syntax, "--prompt", "hi", "-n", "6"]
    assert main([*argv, "--max-tokens", "60", "--quiet"]) == 0
    answers = capsys.readouterr().out.splitlines()
    assert len(answers) == 6
    parser = lark.Lark(SUM_LARK)
    for answer in answers:
        parser.parse(answer)


@pytest.mark.parametrize(
    "argv, piece",
    [
        (["--grammar", "{g}", "--regex", "a"], "give one of --schema, --regex and --grammar"),
        (["--regex", "a", "--syntax", "lark"], "--syntax is --grammar's"),
        (["--grammar", "{g}"], "need --prompt"),
        (["--grammar", "{g}", "--prompt", "hi"], "line 2 column 7"),
    ],
)
def test_bad_grammar_command_lines_fail_with_one_line_before_loading(
    tmp_path, capsys, monkeypatch, argv, piece
):
    monkeypatch.setattr(cli, "load_model", lambda *a, **k: pytest.fail("the model was loaded"))
    path = tmp_path / "bad.gbnf"
    path.write_text('root ::= "a"\nb ::= [z-a]\n')
    argv = [a.replace("{g}", str(path)) for a in argv]
    assert main(["generate", *argv]) == 2
    assert piece in capsys.readouterr().err
