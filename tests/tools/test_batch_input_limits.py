"""The main job against inputs a new user can throw at it (docs/design.md section 7): a line whose
prompt is far past the context is refused before it is tokenized (the bound it relies on,
checked on the real tokenizer), a resumed run counts the lines it skipped, and the command line
does not import `jsonschema` (seconds on every `corral` command) until an answer is checked."""

from __future__ import annotations

import io
import json
import subprocess
import sys

from corral.tools.batch import BatchSummary, run_batch, unanswered
from corral.tools.completions import Completions
from corral.tools.render import render_request
from corral.tools.request import parse_tool_request
from hypothesis import given, settings
from hypothesis import strategies as st
from stand_in_model import StandInModel


def request_line(custom_id: str, content: str = "hi", **body) -> str:
    body = {"messages": [{"role": "user", "content": content}], "max_tokens": 6, **body}
    return json.dumps({"custom_id": custom_id, "body": body})


def test_a_prompt_far_past_the_context_is_refused_before_it_is_tokenized():
    model = StandInModel(context=256)
    encoded = []
    real_encode = model.tokenizer.encode
    model.tokenizer.encode = lambda text: encoded.append(len(text)) or real_encode(text)
    lines = [request_line("huge", "x" * 200_000), request_line("ok")]
    out = io.StringIO()
    summary = run_batch(Completions(model), lines, out, progress=False)
    by_id = {item["custom_id"]: item for item in map(json.loads, out.getvalue().splitlines())}
    error = by_id["huge"]["response"]["body"]["error"]
    assert by_id["huge"]["response"]["status_code"] == 400
    assert (error["code"], error["param"]) == ("context_length_exceeded", "messages")
    assert "256 tokens" in error["message"] and "at least" in error["message"]
    assert by_id["ok"]["response"]["status_code"] == 200
    assert (summary.requests, summary.errors) == (1, 1)
    assert max(encoded) < 1000  # only the short prompt was tokenized


def test_around_the_context_the_early_refusal_agrees_with_the_exact_count():
    # the stand-in's tokens are bytes, so the bound is exact there: a prompt is answered iff
    # its tokens (counted without corral's check) plus max_tokens fit the context
    model = StandInModel(context=256)
    engine = Completions(model)
    statuses = set()
    for n in range(150, 260, 7):
        line = request_line("edge", "x" * n, max_tokens=4)
        body = json.loads(line)["body"]
        prompt = model.tokenizer.encode(render_request(model, parse_tool_request(body, 257)))
        out = io.StringIO()
        run_batch(engine, [line], out, progress=False)
        status = json.loads(out.getvalue())["response"]["status_code"]
        assert (status == 200) == (len(prompt) + 4 <= 256), (n, len(prompt), status)
        statuses.add(status)
    assert statuses == {200, 400}  # both sides of the edge were tried


def test_a_resumed_run_counts_the_lines_it_skipped():
    lines = [request_line(i) for i in ("a", "b", "c")]
    numbers, rest, used = unanswered(lines, {"a": 1, "c": 1})
    assert (numbers, used) == ([2], {"a": 1, "c": 3})
    summary = run_batch(Completions(StandInModel()), rest, io.StringIO(), used, progress=False)
    summary.skipped = len(lines) - len(rest)  # as `corral generate --resume` counts them
    assert summary.requests == 1
    assert "2 lines skipped (already in the output)" in summary.line()
    fresh = run_batch(Completions(StandInModel()), lines, io.StringIO(), progress=False)
    assert fresh.skipped == 0 and "skipped" not in fresh.line()


def test_the_command_line_does_not_import_jsonschema():
    code = "import sys, corral.tools.cli; print('jsonschema' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


@settings(max_examples=200, deadline=None)
@given(
    text=st.one_of(
        st.text(max_size=400),
        st.lists(
            st.sampled_from(["<|im_start|>", "<|im_end|>", " ", "\n", "=", "-", "a", "é", "\x04"]),
            max_size=300,
        ).map("".join),
    )
)
def test_no_token_of_the_real_tokenizer_stands_for_more_bytes_than_the_bound(smollm2, text):
    # the bound the early refusal relies on: a text has at least `at_least` tokens
    from corral.tools.prompt_bound import PromptBound

    bound = PromptBound.of(smollm2)
    assert bound.max_token_bytes is not None and b"\x04" in bound.unspelled
    try:
        tokens = smollm2.tokenizer.encode(text)
    except UnicodeError:  # a lone surrogate: the tokenizer refuses it (an error line)
        return
    assert len(tokens) >= bound.at_least(text)


@given(st.integers(0, 3), st.integers(0, 3), st.integers(0, 3), st.integers(0, 3))
def test_the_summary_line_says_one_in_the_singular_and_every_other_count_in_the_plural(
    requests, answers, misses, skipped
):
    summary = BatchSummary(
        requests=requests, answers=answers, grammar_misses=misses, skipped=skipped
    )
    line = summary.line()
    line_word = "line" if requests == 1 else "lines"
    assert (
        f"{requests} {line_word} answered ({answers} answer{'' if answers == 1 else 's'})" in line
    )
    assert f"{misses} miss{'' if misses == 1 else 'es'} (" in line
    if skipped:
        assert f", {skipped} line{'' if skipped == 1 else 's'} skipped" in line
