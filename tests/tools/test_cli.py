"""The `corral` command line's fast paths: `corral compile` for a pattern and a schema, and the
errors of `corral generate`'s arguments (the real-model runs are in test_batch.py)."""

from __future__ import annotations

import json

from corral.tools.cli import main


def test_compile_prints_the_worked_example(capsys):
    assert main(["compile", "(cat|car|dog)s?"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == (
        "states: 7  live edges: 8  accepting: [5, 6]"
    )


def test_compile_json_prints_the_whole_table(capsys):
    assert main(["compile", "ab?", "--json"]) == 0
    table = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert table["accept"] == [False, True, True]
    assert table["trans"][0][ord("a")] == 1 and table["trans"][1][ord("b")] == 2
    assert sum(t >= 0 for row in table["trans"] for t in row) == 2


def test_compile_refuses_a_bad_pattern_with_its_position(capsys):
    assert main(["compile", "a**"]) == 2
    assert "position 2" in capsys.readouterr().err


def test_compile_schema_prints_regex_size_and_samples(tmp_path, capsys):
    schema = {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}
    path = tmp_path / "s.json"
    path.write_text(json.dumps(schema))
    assert main(["compile", "--schema", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(r'\{"x":')
    samples = [line for line in lines if line.startswith('{"x":')]
    assert samples and all(isinstance(json.loads(s)["x"], int) for s in samples)


def test_compile_schema_refusal_names_the_keyword(tmp_path, capsys):
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"type": "object", "properties": {"x": {"not": {}}}}))
    assert main(["compile", "--schema", str(path)]) == 2
    err = capsys.readouterr().err
    assert "/properties/x" in err and "not" in err


def test_generate_needs_an_input_or_a_quick_form(capsys):
    assert main(["generate"]) == 2
    assert main(["generate", "--schema", "s.json"]) == 2
    assert "--prompt" in capsys.readouterr().err
