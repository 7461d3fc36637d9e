"""The `corral` command line: `corral compile` for a pattern and a schema; `corral generate`'s
input errors (one line, status 2, before the model loads), its data safety (never the input as
output, no overwrite, torn tails on resume) and Ctrl-C, on the stand-in model (the real-model runs
are in test_batch.py)."""

from __future__ import annotations

import codecs
import contextlib
import importlib.util
import json
import os
import re
import signal
import socket
from pathlib import Path

import pytest
from corral.tools import cli, output_file
from corral.tools.cli import main
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from stand_in_model import StandInModel


def test_compile_prints_the_worked_example(capsys):
    assert main(["compile", "(cat|car|dog)s?"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == (
        "states: 7  live edges: 8  accepting: [5, 6]"
    )


@pytest.mark.parametrize("pattern", ["(cat|car|dog)s?", r"\d{3}-\d{4}", "[é-ü]x|y+z"])
def test_compile_prints_samples_of_a_pattern_when_asked(capsys, pattern):
    """--samples honoured for a pattern as for a schema (none unless asked): each printed
    sample is a full match of the pattern (Python's `re`), in text and in --json."""
    assert main(["compile", pattern]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 1
    assert main(["compile", pattern, "--samples", "4"]) == 0
    printed = capsys.readouterr().out.splitlines()[1:]
    assert len(printed) == 4 and all(re.fullmatch(pattern, text) for text in printed)
    assert main(["compile", pattern, "--samples", "3", "--json"]) == 0
    samples = json.loads(capsys.readouterr().out)["samples"]
    assert len(samples) == 3 and all(re.fullmatch(pattern, text) for text in samples)


def test_compile_json_prints_the_whole_table(capsys):
    assert main(["compile", "ab?", "--json"]) == 0
    table = json.loads(capsys.readouterr().out)  # stdout is one JSON document
    assert table["states"] == 3 and table["accepting"] == [1, 2]
    assert table["accept"] == [False, True, True]
    assert table["trans"][0][ord("a")] == 1 and table["trans"][1][ord("b")] == 2
    assert sum(t >= 0 for row in table["trans"] for t in row) == 2


def test_compile_refuses_a_bad_pattern_with_its_position(capsys):
    assert main(["compile", "a**"]) == 2
    assert "position 2" in capsys.readouterr().err


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    before=st.text("ab()|*", max_size=8),
    byte=st.integers(0x80, 0xFF),
    after=st.text("ab", max_size=4),
)
def test_compile_names_a_byte_of_the_pattern_that_is_not_utf8(capsys, before, byte, after):
    """A pattern argument holding a byte that is not UTF-8 (Python's argv gives it as a
    surrogate escape) is refused naming the byte and its place, not "matches no string"."""
    argument = os.fsdecode(before.encode() + bytes([byte]) + after.encode())
    capsys.readouterr()
    assert main(["compile", argument]) == 2
    err = capsys.readouterr().err
    assert f"byte 0x{byte:02X} at character {len(before)}" in err and "not UTF-8" in err


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
    path.write_text(
        json.dumps({"type": "object", "properties": {"x": {"not": {"format": "email"}}}})
    )
    assert main(["compile", "--schema", str(path)]) == 2
    err = capsys.readouterr().err
    assert "/properties/x" in err and "not" in err


def test_generate_needs_an_input_or_a_quick_form(capsys):
    assert main(["generate"]) == 2
    assert main(["generate", "--schema", "s.json"]) == 2
    assert "--prompt" in capsys.readouterr().err


# --- corral generate: input errors, data safety, Ctrl-C (on the stand-in model) ---


def request_line(custom_id: str, **body) -> str:
    body.setdefault("messages", [{"role": "user", "content": "hi"}])
    return json.dumps({"custom_id": custom_id, "body": body}, ensure_ascii=False)


def write_input(path: Path, ids=("a", "b", "c"), **body) -> Path:
    path.write_text("".join(request_line(i, **body) + "\n" for i in ids), encoding="utf-8")
    return path


def deep_schema(depth: int) -> str:
    """A schema nested `depth` objects deep, as text (json.dumps cannot write it)."""
    opener = '{"type":"object","properties":{"x":'
    return opener * depth + '{"type":"integer"}' + '},"required":["x"]}' * depth


@pytest.fixture
def model_never_loads(monkeypatch):
    def fail(*args, **kwargs):
        pytest.fail("the model was loaded for a command line that has an input error")

    monkeypatch.setattr(cli, "load_model", fail)


@pytest.fixture
def stand_in(monkeypatch):
    """Make `corral generate` load a fresh StandInModel; returns the list of models loaded."""
    loaded = []

    def load(path=None, **kwargs):
        loaded.append(StandInModel(**stand_in.options))
        return loaded[-1]

    stand_in.options = {}
    monkeypatch.setattr(cli, "load_model", load)
    return stand_in


def bad_command_lines(tmp: Path) -> dict[str, tuple[list[str], str]]:
    """Name -> (arguments, a piece the one-line error must contain)."""
    source = write_input(tmp / "in.jsonl")
    (tmp / "deep.json").write_text(deep_schema(3000))
    (tmp / "not-json.json").write_text("{nope")
    (tmp / "folder").mkdir()
    (tmp / "link.jsonl").symlink_to(source)
    os.link(source, tmp / "hard.jsonl")
    write_input(tmp / "done.jsonl", ids=("x",))
    quick = ["generate", "--regex", "[ab]+", "--prompt", "hi"]
    t = str(tmp)
    return {
        "compile, negative --samples": (
            ["compile", "--schema", f"{t}/not-json.json", "--samples", "-1"],
            "--samples",
        ),
        "compile a 3000-deep schema": (["compile", "--schema", f"{t}/deep.json"], "max_depth"),
        "compile a pattern and a schema": (
            ["compile", "a", "--schema", f"{t}/deep.json"],
            "not both",
        ),
        "quick form, 3000-deep schema": (
            ["generate", "--schema", f"{t}/deep.json", "--prompt", "hi"],
            "max_depth",
        ),
        "quick form, schema not JSON": (
            ["generate", "--schema", f"{t}/not-json.json", "--prompt", "hi"],
            "not JSON",
        ),
        "temperature nan": ([*quick, "--temperature", "nan"], "--temperature"),
        "temperature inf": ([*quick, "--temperature", "inf"], "--temperature"),
        "temperature negative": ([*quick, "--temperature", "-0.5"], "--temperature"),
        "temperature not a number": ([*quick, "--temperature", "hot"], "--temperature"),
        "top-p zero": ([*quick, "--top-p", "0"], "--top-p"),
        "top-p above 1": ([*quick, "--top-p", "1.5"], "--top-p"),
        "top-p nan": ([*quick, "--top-p", "nan"], "--top-p"),
        "negative seed": ([*quick, "--seed", "-1"], "--seed"),
        "input file and quick form": ([*quick, f"{t}/in.jsonl"], "give one or the other"),
        "input file and --temperature": (
            ["generate", f"{t}/in.jsonl", "--temperature", "0"],
            "--temperature is the quick form's",
        ),
        "input file and -n": (["generate", f"{t}/in.jsonl", "-n", "4"], "-n is the quick form's"),
        "input file and --seed": (["generate", f"{t}/in.jsonl", "--seed", "9"], "--seed is"),
        "input file and --top-p": (["generate", f"{t}/in.jsonl", "--top-p", "0.5"], "--top-p is"),
        "input file and --prompt": (["generate", f"{t}/in.jsonl", "--prompt", "x"], "--prompt is"),
        "no input, no quick form": (["generate"], "give an input file"),
        "quick form without a prompt": (["generate", "--regex", "a"], "need --prompt"),
        "output is a folder": (["generate", f"{t}/in.jsonl", "-o", f"{t}/folder"], "folder"),
        "output folder missing": (
            ["generate", f"{t}/in.jsonl", "-o", f"{t}/none/out.jsonl"],
            "does not exist",
        ),
        "output is the input": (["generate", f"{t}/in.jsonl", "-o", f"{t}/in.jsonl"], "input"),
        "output is the input, resumed": (
            ["generate", f"{t}/in.jsonl", "-o", f"{t}/in.jsonl", "--resume"],
            "input",
        ),
        "output via another path": (
            ["generate", f"{t}/in.jsonl", "-o", f"{t}/folder/../in.jsonl"],
            "input",
        ),
        "output is a symlink to the input": (
            ["generate", f"{t}/in.jsonl", "-o", f"{t}/link.jsonl"],
            "input",
        ),
        "output is a hard link to the input": (
            ["generate", f"{t}/in.jsonl", "-o", f"{t}/hard.jsonl"],
            "input",
        ),
        "--resume on a device": (
            ["generate", f"{t}/in.jsonl", "-o", "/dev/null", "--resume"],
            "not a regular file",
        ),
        "output exists, no --resume": (
            ["generate", f"{t}/in.jsonl", "-o", f"{t}/done.jsonl"],
            "--resume",
        ),
        "input missing": (["generate", f"{t}/missing.jsonl"], "no such file"),
        "input is a folder": (["generate", f"{t}/folder"], "folder"),
        "input unreadable": (["generate", f"{t}/unreadable.jsonl"], "cannot read"),
        "no subcommand": ([], "corral"),
        "--no-prefix-cache with --ray": (
            ["generate", f"{t}/in.jsonl", "--ray=auto", "--no-prefix-cache"],
            "--no-prefix-cache",
        ),
    }


def test_every_bad_command_line_is_one_line_and_status_2_before_the_model_loads(
    tmp_path, capsys, monkeypatch, model_never_loads
):
    cases = bad_command_lines(tmp_path)
    unreadable = write_input(tmp_path / "unreadable.jsonl")
    real_read_bytes = Path.read_bytes

    def read_bytes(path):  # the tests run as root, which reads any file whatever its mode
        if path.name == unreadable.name:
            raise PermissionError(13, "Permission denied")
        return real_read_bytes(path)

    monkeypatch.setattr(Path, "read_bytes", read_bytes)
    before = {p.name: real_read_bytes(p) for p in tmp_path.iterdir() if p.is_file()}
    assert len(cases) >= 20
    for name, (argv, piece) in cases.items():
        try:
            status = main(argv)
        except SystemExit as exit_:  # argparse's own errors
            status = exit_.code
        err = capsys.readouterr().err
        assert status == 2, (name, err)
        assert len(err.splitlines()) == 1 and err.endswith("\n"), (name, err)
        assert piece in err and "Traceback" not in err, (name, err)
    after = {p.name: real_read_bytes(p) for p in tmp_path.iterdir() if p.is_file()}
    assert after == before  # nothing was written, truncated or created


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    digits=st.integers(4301, 6000),
    keyword=st.sampled_from(["minLength", "maxItems", "const", "enum", "default", "minimum"]),
    command=st.sampled_from(["compile", "generate"]),
)
def test_a_schema_file_with_an_integer_too_long_to_read_is_one_line_and_status_2(
    tmp_path, capsys, model_never_loads, digits, keyword, command
):
    # Python reads at most 4300 digits of an int (its int-from-text limit): a file past it was
    # a ValueError traceback in `read_json`, where the server and Batch lines say what it is.
    number = "9" * digits
    value = f"[{number}]" if keyword == "enum" else number
    path = tmp_path / "big.json"
    path.write_text(f'{{"type": "string", "{keyword}": {value}}}')
    argv = ["compile", "--schema", str(path)]
    if command == "generate":
        argv = ["generate", "--schema", str(path), "--prompt", "hi"]
    status = main(argv)
    err = capsys.readouterr().err
    assert status == 2, err
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert f"{digits} digits" in err and str(path) in err, err


def test_a_byte_order_mark_is_accepted(tmp_path, stand_in):
    source = tmp_path / "bom.jsonl"
    source.write_bytes(codecs.BOM_UTF8 + (request_line("a") + "\n").encode("utf-8"))
    assert main(["generate", str(source), "--quiet"]) == 0
    (item,) = read_jsonl(tmp_path / "bom.output.jsonl")
    assert item["custom_id"] == "a" and item["response"]["status_code"] == 200


def read_jsonl(path: Path) -> list[dict]:
    """The lines of a JSONL file; fails unless every line is a JSON object ending in newline."""
    data = path.read_text(encoding="utf-8")
    assert data == "" or data.endswith("\n")
    items = [json.loads(text) for text in data.splitlines()]
    assert all(isinstance(item, dict) for item in items)
    return items


def test_resume_appends_and_never_runs_an_id_twice(tmp_path, stand_in):
    source = write_input(tmp_path / "in.jsonl", ids=("a", "b"))
    output = tmp_path / "out.jsonl"
    assert main(["generate", str(source), "-o", str(output), "--quiet"]) == 0
    first = output.read_bytes()
    write_input(source, ids=("a", "b", "c"))
    assert main(["generate", str(source), "-o", str(output), "--quiet", "--resume"]) == 0
    assert output.read_bytes().startswith(first)
    assert sorted(item["custom_id"] for item in read_jsonl(output)) == ["a", "b", "c"]


def test_resume_drops_a_torn_tail_and_runs_its_request_again(tmp_path, stand_in, capsys):
    ids = ("a", "b", "c", "d")
    source = write_input(tmp_path / "in.jsonl", ids=ids)
    output = tmp_path / "out.jsonl"
    assert main(["generate", str(source), "-o", str(output), "--quiet"]) == 0
    whole = output.read_bytes()
    last_start = whole.rstrip(b"\n").rfind(b"\n") + 1
    torn_id = json.loads(whole[last_start:])["custom_id"]
    for cut in (last_start + 1, (last_start + len(whole)) // 2, len(whole) - 1):
        output.write_bytes(whole[:cut])  # a crash in the middle of writing the last line
        capsys.readouterr()
        assert main(["generate", str(source), "-o", str(output), "--quiet", "--resume"]) == 0
        assert "torn" in capsys.readouterr().err
        items = read_jsonl(output)
        assert sorted(item["custom_id"] for item in items) == sorted(ids)
        assert output.read_bytes()[:last_start] == whole[:last_start]
        assert items[-1]["custom_id"] == torn_id


def test_quick_form_prints_each_answer_as_it_finishes_and_ctrl_c_says_what_was_kept(
    stand_in, capsys
):
    argv = ["generate", "--regex", "[a-z]{2,40}", "--prompt", "hi", "-n", "6"]
    assert main([*argv, "--batch-size", "1"]) == 0
    answers = capsys.readouterr().out.splitlines()
    assert len(answers) == 6 and all(re.fullmatch("[a-z]{2,40}", a) for a in answers)
    for interrupt_after in (0, 8, 25):
        stand_in.options = {"interrupt_after": interrupt_after}
        assert main([*argv, "--batch-size", "1"]) == 130
        captured = capsys.readouterr()
        printed = captured.out.splitlines()
        assert printed == answers[: len(printed)]  # the same seeds, one at a time
        assert f"{len(printed)} of 6 answers were printed" in captured.err
        if interrupt_after:
            assert 0 < len(printed) < 6


def test_batch_ctrl_c_says_how_many_lines_the_output_holds(tmp_path, stand_in, capsys):
    ids = [f"id{i}" for i in range(8)]
    # short answers, so that some lines end before the interrupt
    source = write_input(tmp_path / "in.jsonl", ids=ids, max_tokens=6)
    output = tmp_path / "out.jsonl"
    stand_in.options = {"interrupt_after": 12}
    argv = ["generate", str(source), "-o", str(output), "--quiet", "--batch-size", "2"]
    assert main(argv) == 130
    held = len(read_jsonl(output))
    assert 0 < held < len(ids)
    assert f"holds {held} complete line{'' if held == 1 else 's'}" in capsys.readouterr().err
    stand_in.options = {}
    assert main([*argv, "--resume"]) == 0
    assert sorted(item["custom_id"] for item in read_jsonl(output)) == ids


def test_sigterm_stops_a_batch_as_ctrl_c_does_with_status_143(
    tmp_path, stand_in, capsys, monkeypatch
):
    """A real SIGTERM to this process mid-run (a `kill`, a scheduler's stop): whole lines kept,
    the message says how many, status 143; --resume finishes the file."""
    ids = [f"id{i}" for i in range(8)]
    source = write_input(tmp_path / "in.jsonl", ids=ids, max_tokens=6)
    output = tmp_path / "out.jsonl"
    decode = StandInModel.decode
    steps = []

    def decode_then_sigterm(self, *args, **kwargs):
        steps.append(1)
        if len(steps) == 12:
            os.kill(os.getpid(), signal.SIGTERM)
        return decode(self, *args, **kwargs)

    monkeypatch.setattr(StandInModel, "decode", decode_then_sigterm)
    argv = ["generate", str(source), "-o", str(output), "--quiet", "--batch-size", "2"]
    before = signal.getsignal(signal.SIGTERM)
    assert main(argv) == 143
    assert signal.getsignal(signal.SIGTERM) is before  # the handler is the run's only
    held = len(read_jsonl(output))
    assert 0 < held < len(ids)
    err = capsys.readouterr().err
    assert f"terminated; {output} holds {held} complete line" in err, err
    monkeypatch.undo()
    assert main([*argv, "--resume"]) == 0
    assert sorted(item["custom_id"] for item in read_jsonl(output)) == ids


def test_two_runs_never_write_one_output_at_once(tmp_path, model_never_loads, capsys):
    """While a run holds the output's lock, another run on it (with or without --resume) is
    refused before the model loads, and the file is left as it was."""
    fcntl = pytest.importorskip("fcntl")
    source = write_input(tmp_path / "in.jsonl")
    ours = json.dumps({"custom_id": "a"}).encode() + b"\n"
    for existing, flags in ((b"", ([], ["--resume"])), (ours, (["--resume"],))):
        output = tmp_path / "out.jsonl"
        output.write_bytes(existing)
        with output.open("a") as held:
            fcntl.flock(held.fileno(), fcntl.LOCK_EX)
            for extra in flags:
                assert main(["generate", str(source), "-o", str(output), *extra]) == 2
                err = capsys.readouterr().err
                assert "another corral run is writing it" in err and len(err.splitlines()) == 1
                assert output.read_bytes() == existing


@pytest.mark.parametrize("resume", [False, True])
def test_a_run_that_writes_nothing_leaves_no_output_file(tmp_path, monkeypatch, capsys, resume):
    source = write_input(tmp_path / "in.jsonl")
    output = tmp_path / "out.jsonl"

    def fail(*args, **kwargs):
        raise cli.ConstrainError("no model here")

    monkeypatch.setattr(cli, "load_model", fail)
    argv = ["generate", str(source), "-o", str(output), *(["--resume"] if resume else [])]
    assert main(argv) == 2 and "no model here" in capsys.readouterr().err
    assert not output.exists()


def test_resume_refuses_a_file_corral_did_not_write(tmp_path, stand_in, capsys):
    """--resume on a file with a line that is not a Batch output line (a whole line, or a last
    line without its newline that does not start as one) refuses, and keeps every byte."""
    source = write_input(tmp_path / "in.jsonl")
    output = tmp_path / "out.jsonl"
    assert main(["generate", str(source), "-o", str(output), "--quiet"]) == 0
    ours = output.read_bytes()
    for foreign in (b"my own note\n", b"my own note", b"[1, 2]\n", b'{"no": "custom_id"}\n'):
        output.write_bytes(ours + foreign)
        assert main(["generate", str(source), "-o", str(output), "--resume"]) == 2
        assert "is not a Batch output line" in capsys.readouterr().err
        assert output.read_bytes() == ours + foreign


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full on this system")
def test_an_output_the_disk_refuses_is_one_line_and_status_1(tmp_path, stand_in, capsys):
    source = write_input(tmp_path / "in.jsonl")
    assert main(["generate", str(source), "-o", "/dev/full", "--quiet"]) == 1
    err = capsys.readouterr().err
    assert "cannot write /dev/full: No space left on device" in err
    assert "Traceback" not in err and len(err.splitlines()) == 1


def test_an_output_that_cannot_be_opened_is_refused_before_the_model_loads(
    tmp_path, monkeypatch, model_never_loads, capsys
):
    source = write_input(tmp_path / "in.jsonl")
    real_open = Path.open

    def refuse(path, *args, **kwargs):
        if path.name == "out.jsonl":
            raise OSError(22, "Invalid argument")
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(Path, "open", refuse)
    assert main(["generate", str(source), "-o", str(tmp_path / "out.jsonl")]) == 2
    assert "cannot open it for writing: Invalid argument" in capsys.readouterr().err


def test_an_unknown_flag_is_named_by_its_command(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["generate", "in.jsonl", "--bogus"])
    assert exit_.value.code == 2
    assert "corral generate" in capsys.readouterr().err


def test_ctrl_c_inside_a_compiled_call_is_an_interruption(tmp_path, stand_in, capsys, monkeypatch):
    """Ctrl-C while a Numba function returns surfaces as a SystemError whose context is the
    KeyboardInterrupt: still status 130 and what was kept, in the batch form (the lines held)
    and the quick form (the answers printed); any other SystemError propagates."""
    source = write_input(tmp_path / "in.jsonl")
    output = tmp_path / "out.jsonl"

    def interrupted(self, *args, **kwargs):
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            raise SystemError("CPUDispatcher returned a result with an exception set") from None

    monkeypatch.setattr(StandInModel, "decode", interrupted)
    monkeypatch.setattr(StandInModel, "prefill_batch", interrupted)
    assert main(["generate", str(source), "-o", str(output), "--quiet"]) == 130
    assert "interrupted; no output was written" in capsys.readouterr().err
    quick = ["generate", "--regex", "[a-z]{2,9}", "--prompt", "hi", "-n", "3"]
    assert main(quick) == 130
    assert "interrupted; 0 of 3 answers were printed" in capsys.readouterr().err

    def broken(self, *args, **kwargs):
        raise SystemError("a fault of its own")

    monkeypatch.setattr(StandInModel, "prefill_batch", broken)
    with pytest.raises(SystemError, match="a fault of its own"):
        main(["generate", str(source), "-o", str(tmp_path / "other.jsonl"), "--quiet"])


# --- corral serve: its input errors, before the model loads ---


@pytest.fixture
def server_never_starts(monkeypatch):
    from corral.tools import server

    def fail(*args, **kwargs):
        pytest.fail("the model was loaded for a serve command line that has an input error")

    monkeypatch.setattr(server, "serve", fail)


def test_every_bad_serve_line_is_one_line_and_status_2_before_the_model_loads(
    capsys, server_never_starts
):
    with socket.create_server(("127.0.0.1", 0)) as taken:  # a port another process listens on
        port = str(taken.getsockname()[1])
        cases = {
            "port taken": (["serve", "--port", port], f"127.0.0.1:{port}"),
            "port past 65535": (["serve", "--port", "99999"], "--port"),
            "port zero": (["serve", "--port", "0"], "--port"),
            "host not an address": (["serve", "--host", "999.1.1.1", "--port", "8000"], "999"),
            "negative max-waiting": (["serve", "--max-waiting", "-1"], "--max-waiting"),
            "zero max-len": (["serve", "--max-len", "0"], "--max-len"),
            "zero batch-size": (["serve", "--batch-size", "0"], "--batch-size"),
        }
        for name, (argv, piece) in cases.items():
            status = main(argv)
            err = capsys.readouterr().err
            assert status == 2, (name, err)
            assert len(err.splitlines()) == 1 and err.startswith("corral serve: "), (name, err)
            assert piece in err and "Traceback" not in err, (name, err)


def test_ray_before_the_input_file_says_it_took_the_file_as_its_address(
    tmp_path, capsys, model_never_loads
):
    source = write_input(tmp_path / "in.jsonl")
    assert main(["generate", "--ray", str(source), "-o", str(tmp_path / "out.jsonl")]) == 2
    err = capsys.readouterr().err
    assert f"--ray took {str(source)!r} as its ADDRESS" in err and "--ray=ADDRESS" in err
    assert not (tmp_path / "out.jsonl").exists()


def test_ray_without_ray_installed_is_one_line_before_the_model_loads(
    tmp_path, capsys, monkeypatch, model_never_loads
):
    real_find_spec = importlib.util.find_spec

    def find_spec(name, *args):  # as if Ray were not installed
        return None if name == "ray" else real_find_spec(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    source = write_input(tmp_path / "in.jsonl")
    assert main(["generate", str(source), "-o", str(tmp_path / "out.jsonl"), "--ray"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "pip install 'corral[ray]'" in err
    assert "Traceback" not in err and not (tmp_path / "out.jsonl").exists()


def test_resume_with_every_line_answered_runs_nothing_and_loads_no_model(
    tmp_path, stand_in, capsys, monkeypatch
):
    source = write_input(tmp_path / "in.jsonl", ids=("a", "b"))
    output = tmp_path / "out.jsonl"
    argv = ["generate", str(source), "-o", str(output), "--quiet"]
    assert main(argv) == 0
    whole = output.read_bytes()
    capsys.readouterr()

    def fail(*args, **kwargs):
        pytest.fail("the model was loaded though every line is answered")

    monkeypatch.setattr(cli, "load_model", fail)
    assert main([*argv, "--resume"]) == 0
    assert "nothing to run: the 2 lines" in capsys.readouterr().err
    assert output.read_bytes() == whole
    with source.open("a", encoding="utf-8") as more:  # a line not yet answered: it runs
        more.write(request_line("c") + "\n" + '{"custom_id": ["not", "a", "string"]}\n')
    monkeypatch.setattr(cli, "load_model", lambda *a, **k: StandInModel())
    assert main([*argv, "--resume"]) == 0
    ids = [item["custom_id"] for item in read_jsonl(output)]
    assert sorted(ids[:2]) == ["a", "b"] and "c" in ids[2:]  # lines are written as they finish


INPUT_LINES = st.one_of(
    st.sampled_from("abcd").map(request_line),  # a request (ids may repeat: duplicates)
    st.just("not json"),
    st.just('{"method": "POST", "url": "/v1/chat/completions", "body": {}}'),  # no custom_id
    st.just('{"custom_id": 7, "body": {}}'),  # a custom_id that is no string
    st.just('{"custom_id": "e", "body": []}'),  # a custom_id, a bad body
    st.just(""),
)


def answered(output: Path) -> list[tuple]:
    """The output's lines as (custom_id, error code or None, error message or None), sorted."""
    items = read_jsonl(output)
    keys = [
        (i["custom_id"], *((i["error"] or {}).get(k) for k in ("code", "message"))) for i in items
    ]
    return sorted(keys, key=repr)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(lines=st.lists(INPUT_LINES, min_size=1, max_size=8).filter(any), data=st.data())
def test_resume_after_any_cut_answers_every_line_once(
    tmp_path_factory, stand_in, capsys, lines, data
):
    """A run cut after any whole output line, then resumed: the output answers each input line
    exactly once, as an uncut run does (lines without a custom_id too: error lines count as
    answers); a resume with nothing left loads no model."""
    folder = tmp_path_factory.mktemp("resume")
    source = folder / "in.jsonl"
    source.write_text("".join(text + "\n" for text in lines), "utf-8")
    whole, output = folder / "whole.jsonl", folder / "out.jsonl"
    assert main(["generate", str(source), "-o", str(whole), "--quiet"]) == 0
    kept = whole.read_text("utf-8").splitlines(keepends=True)
    cut = data.draw(st.integers(0, len(kept)), label="output lines kept")
    output.write_text("".join(kept[:cut]), "utf-8")
    stand_in_load, loads = cli.load_model, []
    cli.load_model = lambda *a, **k: loads.append(1) or stand_in_load(*a, **k)
    try:
        assert main(["generate", str(source), "-o", str(output), "--quiet", "--resume"]) == 0
    finally:
        cli.load_model = stand_in_load
    assert answered(output) == answered(whole), (lines, cut)
    assert (not loads) == (cut == len(kept)), (cut, len(kept))
    said = capsys.readouterr().err.splitlines()[-1]
    if 0 < cut < len(kept):  # each output line answers one input line
        assert f"{cut} line{'s' * (cut > 1)} skipped (already in the output)" in said, said


@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    before=st.lists(st.sampled_from("abcd"), min_size=1, max_size=5),
    after=st.lists(st.sampled_from("abcde"), min_size=1, max_size=5),
)
def test_resume_refuses_the_output_of_another_input(
    tmp_path_factory, stand_in, capsys, before, after
):
    """The output of one input resumed with another: when it answers a custom_id more times
    than the new input has lines of it (one the input lacks, most often), --resume refuses with
    status 2, naming the output file and the first such custom_id in the output's order, and
    leaves every byte of it; otherwise it goes on (oracle: the output's custom_ids counted)."""
    folder = tmp_path_factory.mktemp("foreign")
    source, output = folder / "in.jsonl", folder / "out.jsonl"
    write_input(source, ids=before)
    assert main(["generate", str(source), "-o", str(output), "--quiet"]) == 0
    ours = output.read_bytes()
    answered = [item["custom_id"] for item in read_jsonl(output)]
    foreign = [c for c in dict.fromkeys(answered) if answered.count(c) > after.count(c)]
    capsys.readouterr()
    write_input(source, ids=after)
    status = main(["generate", str(source), "-o", str(output), "--quiet", "--resume"])
    err = capsys.readouterr().err
    if foreign:
        assert status == 2, err
        assert output.read_bytes() == ours
        assert f"{output} is not an output of {source}" in err, err
        assert f"custom_id {foreign[0]!r}" in err, err
    else:
        assert status == 0, err
        assert sorted(item["custom_id"] for item in read_jsonl(output)) == sorted(after)


@pytest.mark.parametrize("flag", [[], ["--no-prefix-cache"]])
def test_no_prefix_cache_turns_the_cache_off(tmp_path, stand_in, capsys, flag):
    """Three lines with one long prompt, one at a time: the later ones reuse the first's
    prefill unless --no-prefix-cache."""
    long = [{"role": "user", "content": "Describe the weather in Paris in one line. " * 2}]
    source = tmp_path / "in.jsonl"
    source.write_text("".join(request_line(i, messages=long) + "\n" for i in "abc"), "utf-8")
    argv = ["generate", str(source), "--batch-size", "1", "--quiet", *flag]
    assert main(argv) == 0
    hits = int(re.search(r"prefix cache (\d+) hits", capsys.readouterr().err).group(1))
    assert (hits == 0) if flag else (hits == 2)


@pytest.mark.parametrize(("flag", "expected"), [([], True), (["--no-prefix-cache"], False)])
def test_serve_no_prefix_cache_reaches_the_engine_thread(monkeypatch, flag, expected):
    """`corral serve --no-prefix-cache` turns the Generator's prefix cache off."""
    import corral.tools.server as server

    built = []

    def fake_serve(model_path, host, port, config):  # what serve() builds, without uvicorn
        built.append(server.Server(server.Completions(StandInModel()), config))

    monkeypatch.setattr(server, "serve", fake_serve)
    with socket.create_server(("127.0.0.1", 0)) as probe:  # a port free a moment ago
        port = probe.getsockname()[1]
    assert main(["serve", "--port", str(port), *flag]) == 0
    thread = built[0].thread
    assert thread.prefix_cache is expected and thread.generator.prefix_cache is expected


def test_what_an_output_holds_is_counted_in_complete_lines(tmp_path):
    output = tmp_path / "out.jsonl"
    cases = [('{"a": 1}\n', "1 complete line"), ('{"b"', "0 complete lines")]
    cases += [('{"a": 1}\n{"b"', "1 complete line"), ("1\n2\n", "2 complete lines")]
    for text, said in cases:
        output.write_text(text)
        assert output_file.held(output) == f"{output} holds {said}"
    output.write_text("")  # an empty file: a run that created it removes it
    assert output_file.held(output) == "no output was written"


def test_batch_refuses_a_max_tokens_past_the_context_before_any_line_runs(
    tmp_path, stand_in, capsys
):
    """As the quick form and the server do: a --max-tokens no prompt leaves room for (the
    stand-in's context is 4096 tokens, a prompt at least one) is status 2 and one line naming
    the flag, the value and the limit, before any line runs; no output is created or changed."""
    source = write_input(tmp_path / "in.jsonl")  # its lines set their own max_tokens
    output = tmp_path / "out.jsonl"
    argv = ["generate", str(source), "-o", str(output), "--quiet", "--max-tokens", "999999999"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith("corral generate: --max-tokens")
    assert "999999999" in err and "4095" in err and "Traceback" not in err
    assert not output.exists()
    ours = json.dumps({"custom_id": "a"}).encode() + b"\n"
    output.write_bytes(ours)
    assert main([*argv, "--resume"]) == 2
    assert "--max-tokens" in capsys.readouterr().err and output.read_bytes() == ours
    quick = ["generate", "--regex", "[ab]+", "--prompt", "hi", "--max-tokens", "999999999"]
    assert main(quick) == 2  # the quick form refuses it too
    output.unlink()
    assert main([*argv[:-1], "4095"]) == 0  # the limit itself is accepted
    assert len(read_jsonl(output)) == 3


def test_ctrl_c_before_any_line_is_written_says_no_output_was_written(tmp_path, stand_in, capsys):
    source = write_input(tmp_path / "in.jsonl")
    output = tmp_path / "out.jsonl"
    stand_in.options = {"interrupt_after": 0}
    assert main(["generate", str(source), "-o", str(output), "--quiet"]) == 130
    err = capsys.readouterr().err
    assert "interrupted; no output was written" in err and "holds" not in err
    assert len(err.splitlines()) == 1 and not output.exists()


@pytest.mark.parametrize("text", ["", "\n", "  \n\n"])
def test_an_input_without_requests_says_no_output_was_written(
    tmp_path, stand_in, capsys, monkeypatch, text
):
    """Nothing to run: no model is loaded (it would take seconds), no file is left behind."""
    source = tmp_path / "in.jsonl"
    source.write_text(text, encoding="utf-8")
    output = tmp_path / "out.jsonl"

    def no_model(*args, **kwargs):
        raise AssertionError("an input with no request line loaded the model")

    monkeypatch.setattr(cli, "load_model", no_model)
    assert main(["generate", str(source), "-o", str(output), "--quiet"]) == 0
    err = capsys.readouterr().err
    assert "nothing to run" in err and "no output was written" in err and str(output) not in err
    assert len(err.splitlines()) == 1 and not output.exists()


def test_blank_input_lines_are_counted_in_the_summary(tmp_path, stand_in, capsys):
    """A blank line carries no custom_id, so no error line could be matched to it: it gets none,
    and the summary counts it; the end of the last line is not a blank line."""
    source = tmp_path / "in.jsonl"
    output = tmp_path / "out.jsonl"
    cases = [
        ([request_line("a"), "", " \t\r", request_line("b"), ""], "2 blank lines skipped"),
        ([request_line("a"), "", request_line("b")], "1 blank line skipped"),
        ([request_line("a"), request_line("b"), ""], None),
    ]
    for lines, said in cases:
        source.write_text("\n".join(lines), encoding="utf-8")
        with contextlib.suppress(FileNotFoundError):
            output.unlink()
        assert main(["generate", str(source), "-o", str(output), "--quiet"]) == 0
        err = capsys.readouterr().err
        if said is None:
            assert "blank line" not in err
        else:
            assert said in err
        items = read_jsonl(output)
        assert sorted(item["custom_id"] for item in items) == ["a", "b"]
        assert all(item["response"]["status_code"] == 200 for item in items)
