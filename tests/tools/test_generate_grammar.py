"""`corral generate --grammar FILE` in the quick form (corral.tools.cli), on the byte-level
stand-in model: every answer parses with the `lark` parser; a grammar error names its line and
column, before any model is loaded."""

from __future__ import annotations

import json

import lark
import pytest
from corral.tools import cli
from corral.tools.cli import main
from corral.tools.grammar import GrammarCompiler
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


def depth(value) -> int:
    """How deep objects nest in a JSON value (an independent count)."""
    if isinstance(value, dict):
        return 1 + max((depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return max((depth(v) for v in value), default=0)
    return 0


def test_json_object_depth_bounds_the_lines_that_set_none(tmp_path, capsys, stand_in, monkeypatch):
    keys = []  # the grammars the run compiled
    index = GrammarCompiler.index
    monkeypatch.setattr(
        GrammarCompiler, "index", lambda self, g: keys.append(g.key) or index(self, g)
    )
    source = tmp_path / "in.jsonl"
    lines = []
    for i in range(8):
        body = {"messages": [{"role": "user", "content": f"JSON {i}"}], "max_tokens": 80,
                "seed": i, "response_format": {"type": "json_object"}}  # fmt: skip
        if i % 2:
            body["json_object_depth"] = 2
        line = {"custom_id": str(i), "method": "POST", "url": "/v1/chat/completions", "body": body}
        lines.append(json.dumps(line))
    source.write_text("\n".join(lines) + "\n")
    assert main(["generate", str(source), "--json-object-depth", "1", "--quiet"]) == 0
    for text in (tmp_path / "in.output.jsonl").read_text().splitlines():
        out = json.loads(text)
        choice = out["response"]["body"]["choices"][0]
        if choice["finish_reason"] == "stop":
            assert depth(json.loads(choice["message"]["content"])) <= 1 + int(out["custom_id"]) % 2
    assert set(keys) == {'{"json_object":1}', '{"json_object":2}'}


@pytest.mark.parametrize(
    "argv, piece",
    [
        (["in.jsonl", "--json-object-depth", "0"], "must be 1 to 7"),
        (["in.jsonl", "--json-object-depth", "8"], "must be 1 to 7"),
        (["--regex", "a", "--prompt", "x", "--json-object-depth", "2"], "not quick"),
    ],
)
def test_a_bad_json_object_depth_flag_is_refused(tmp_path, capsys, monkeypatch, argv, piece):
    monkeypatch.setattr(cli, "load_model", lambda *a, **k: pytest.fail("the model was loaded"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "in.jsonl").write_text("")
    assert main(["generate", *argv]) == 2
    assert piece in capsys.readouterr().err
