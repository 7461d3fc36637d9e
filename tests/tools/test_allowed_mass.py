"""Constraint diagnostics end to end (corral's request field `allowed_mass`): every token's
`allowed_mass` and `unmasked_logprob` in `logprobs.content` and each choice's `allowed_mass`
`{min, mean}`, in the Batch output, from `corral generate` (its `--allowed-mass` and
`--allowed-mass-below` flags and the summary line's share) and from the server, plain and
streamed; absent by default; never from the masked LM head; bad values refused by name.

The stand-in model's logits are a pure function of a sequence's tokens, so every token's
allowed mass is checked against an independent float64 NumPy computation from those logits and
the mask the request's own constraint gives at that token (its budget included)."""

from __future__ import annotations

import io
import json
import math
import re

import numpy as np
import openai
import pytest
from corral.model.errors import RequestError
from corral.model.generate import GenerationRequest, check_request
from corral.tools import cli
from corral.tools.batch import run_batch
from corral.tools.cli import main
from corral.tools.completions import Completions
from corral.tools.errors import ToolError
from corral.tools.request import parse_tool_request
from corral.tools.server import ServerConfig, background_server
from hypothesis import given, settings
from hypothesis import strategies as st
from stand_in_model import StandInModel
from test_trigger_budget_calls import TOKENS, TOOL, ScriptedModel

SCHEMAS = [
    {
        "type": "object",
        "properties": {
            "city": {"type": "string", "maxLength": 8},
            "country": {"enum": ["JP", "US", "IN", "FR"]},
        },
        "required": ["city", "country"],
    },
    {
        "type": "object",
        "properties": {"age": {"type": "integer", "minimum": 0, "maximum": 150}},
        "required": ["age"],
    },
    None,  # free text
]


class MaskedStandIn(StandInModel):
    """The stand-in with a masked LM head, as `Model`'s: a row given ids holds -inf at every
    other token; the ids asked for are recorded, row by row."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.asked: list = []

    def _head(self, logits, rows, allowed):
        if allowed is None:
            return logits
        self.asked.extend(allowed)
        for row, ids in zip(rows, allowed, strict=True):
            if ids is not None:
                kept = logits[row, ids]
                logits[row] = -np.inf
                logits[row, ids] = kept
        return logits

    def decode(self, cache, slots, tokens, allowed=None):
        logits = super().decode(cache, slots, tokens)
        return self._head(logits, range(len(slots)), allowed)

    def prefill_batch(self, cache, slots, sequences, last=None, allowed=None):
        logits = super().prefill_batch(cache, slots, sequences, last)
        ends = np.cumsum([1] * len(slots) if last is None else last) - 1
        return self._head(logits, ends.tolist(), allowed)


def body_of(schema, content="Say something.", **fields) -> dict:
    body = {"messages": [{"role": "user", "content": content}], **fields}
    if schema is not None:
        body["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": "answer", "schema": schema},
        }
    return body


def line_of(custom_id: str, body: dict) -> str:
    return json.dumps({"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions",
                       "body": body})  # fmt: skip


def reference(model: StandInModel, body: dict, token_ids: list[int]):
    """Each token's (allowed mass, unmasked logprob) in float64 NumPy: the softmax of the
    stand-in's logits after the prompt and the tokens before it, over the whole vocabulary,
    summed over what the request's constraint allows there (with the tokens left)."""
    request = Completions(model).requests(parse_tool_request(body))[0]
    constraint = request.constraint
    history = list(request.prompt_ids)
    out = []
    for j, token in enumerate(token_ids):
        x = model._logits(history).astype(np.float64)
        log_all = x.max() + np.log(np.exp(x - x.max()).sum())
        p = np.exp(x - log_all)
        if constraint is None:
            mass = 1.0
        else:
            words = constraint.mask(request.max_tokens - j)
            bits = np.unpackbits(words.view(np.uint8), bitorder="little")[: len(x)]
            mass = float(p[bits.astype(bool)].sum())
            constraint.advance(token)
        out.append((mass, float(x[token] - log_all)))
        history.append(token)
    return out


def check_choice(model, body: dict, choice: dict) -> None:
    """The choice's diagnostics equal the reference's, token by token, and its min and mean
    are theirs."""
    content = choice["logprobs"]["content"]
    ids = [entry["bytes"][0] for entry in content]  # the stand-in's tokens are its bytes
    expected = reference(model, body, ids)
    for entry, (mass, unmasked) in zip(content, expected, strict=True):
        assert entry["allowed_mass"] == pytest.approx(mass, rel=2e-5, abs=1e-300)
        assert entry["unmasked_logprob"] == pytest.approx(unmasked, abs=2e-5)
    masses = [entry["allowed_mass"] for entry in content]
    if not masses:  # an answer of no token (EOS first): no minimum, no mean
        assert choice["allowed_mass"] == {"min": None, "mean": None}
        return
    assert choice["allowed_mass"]["min"] == min(masses)
    assert choice["allowed_mass"]["mean"] == pytest.approx(sum(masses) / len(masses))


def run(model, lines, **kwargs):
    out = io.StringIO()
    summary = run_batch(Completions(model), lines, out, batch_size=4, progress=False, **kwargs)
    items = [json.loads(text) for text in out.getvalue().splitlines()]
    return {item["custom_id"]: item["response"]["body"] for item in items}, summary


@settings(max_examples=12, deadline=None)
@given(
    schema=st.sampled_from(SCHEMAS),
    temperature=st.sampled_from([0.0, 0.6, 1.3]),
    jump=st.booleans(),
    top=st.sampled_from([None, 3]),
    masked_head=st.booleans(),
    seed=st.integers(0, 1000),
)
def test_the_batch_output_carries_the_allowed_mass_numpy_computes(
    schema, temperature, jump, top, masked_head, seed
):
    """Batch lines asking for `allowed_mass` (with logprobs, sampled or greedy, with or without
    jump-forward, top_logprobs, on a model with a masked LM head or not): every token's allowed
    mass and unmasked logprob are NumPy's from the whole logits and the constraint's mask; a
    line that does not ask, beside them, has none of the fields."""
    model = MaskedStandIn() if masked_head else StandInModel()
    fields = {"max_tokens": 30, "seed": seed, "temperature": temperature, "logprobs": True}
    if top is not None:
        fields["top_logprobs"] = top
    if not jump:
        fields["jump_forward"] = False
    asked = body_of(schema, allowed_mass=True, **fields)
    plain = body_of(schema, **fields)
    bodies, _ = run(model, [line_of("asked", asked), line_of("plain", plain)])
    choice = bodies["asked"]["choices"][0]
    check_choice(StandInModel(), asked, choice)
    default = bodies["plain"]["choices"][0]
    assert "allowed_mass" not in default
    assert all("allowed_mass" not in e and "unmasked_logprob" not in e
               for e in default["logprobs"]["content"])  # fmt: skip
    # asking changes no answer (seeded)
    assert choice["message"] == default["message"]
    if masked_head and schema is not None:
        assert any(ids is not None for ids in model.asked)  # the head served the plain line


def test_the_masked_head_serves_no_row_that_asks():
    """On a model with a masked LM head, the rows of a request asking for `allowed_mass` are
    all computed whole (a masked row would hold -inf outside its mask: a mass of 1)."""
    model = MaskedStandIn()
    body = body_of(SCHEMAS[1], allowed_mass=True, logprobs=True, max_tokens=20, seed=1)
    bodies, _ = run(model, [line_of("a", body)])
    assert all(ids is None for ids in model.asked)
    check_choice(StandInModel(), body, bodies["a"]["choices"][0])


def test_without_logprobs_the_choice_alone_carries_min_and_mean():
    model = StandInModel()
    fields = {"max_tokens": 30, "seed": 4, "temperature": 0.8}
    bodies, _ = run(
        model,
        [
            line_of("a", body_of(SCHEMAS[0], allowed_mass=True, **fields)),
            line_of("b", body_of(SCHEMAS[0], allowed_mass=True, logprobs=True, **fields)),
        ],
    )
    alone, full = bodies["a"]["choices"][0], bodies["b"]["choices"][0]
    assert alone["logprobs"] is None
    assert alone["allowed_mass"] == full["allowed_mass"]
    assert 0 < alone["allowed_mass"]["min"] <= alone["allowed_mass"]["mean"] <= 1


SHARE = re.compile(r"allowed mass below ([0-9.]+) in (\d+) of (\d+) answers? \(([0-9.]+)%\)")


@pytest.fixture
def stand_in(monkeypatch):
    monkeypatch.setattr(cli, "load_model", lambda path=None, **kwargs: StandInModel())


def test_corral_generate_flags_and_the_summary_share(tmp_path, capsys, stand_in):
    """`--allowed-mass` turns it on for the lines that set none (a line's own false stays off);
    the summary line gives the share of answers whose minimum fell below
    `--allowed-mass-below`, counted again here from the output file."""
    source = tmp_path / "in.jsonl"
    lines = []
    for i in range(8):
        fields = {"max_tokens": 30, "seed": i, "temperature": 1.0, "logprobs": True}
        if i == 3:
            fields["allowed_mass"] = False
        lines.append(line_of(str(i), body_of(SCHEMAS[i % 3], **fields)))
    source.write_text("\n".join(lines) + "\n")
    argv = ["generate", str(source), "--quiet", "--allowed-mass", "--allowed-mass-below", "0.2"]
    assert main(argv) == 0
    err = capsys.readouterr().err
    minima = {}
    for text in (tmp_path / "in.output.jsonl").read_text().splitlines():
        item = json.loads(text)
        choice = item["response"]["body"]["choices"][0]
        if item["custom_id"] == "3":
            assert "allowed_mass" not in choice
            continue
        minima[item["custom_id"]] = choice["allowed_mass"]["min"]
        body = json.loads(lines[int(item["custom_id"])])["body"]
        check_choice(StandInModel(), {**body, "allowed_mass": True}, choice)
    found = SHARE.search(err)
    assert found is not None, err
    below = sum(m < 0.2 for m in minima.values())
    assert found.groups()[:3] == ("0.2", str(below), str(len(minima)))
    assert float(found.group(4)) == pytest.approx(100 * below / len(minima), abs=0.05)


def test_the_summary_share_uses_the_documented_default(tmp_path, capsys, stand_in):
    source = tmp_path / "in.jsonl"
    body = body_of(SCHEMAS[0], max_tokens=30, seed=2, allowed_mass=True)
    source.write_text(line_of("x", body) + "\n")
    assert main(["generate", str(source), "--quiet"]) == 0
    found = SHARE.search(capsys.readouterr().err)
    assert found is not None and found.group(1) == "0.5"


def test_no_share_without_diagnostics(tmp_path, capsys, stand_in):
    source = tmp_path / "in.jsonl"
    source.write_text(line_of("x", body_of(SCHEMAS[0], max_tokens=30, seed=2)) + "\n")
    assert main(["generate", str(source), "--quiet"]) == 0
    assert "allowed mass" not in capsys.readouterr().err
    (tmp_path / "in.output.jsonl").unlink()
    assert main(["generate", str(source), "--quiet", "--allowed-mass-below", "0.3"]) == 0
    assert "no answer asked for allowed_mass" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, piece",
    [
        (["in.jsonl", "--allowed-mass-below", "0"], "must be in (0, 1]"),
        (["in.jsonl", "--allowed-mass-below", "1.5"], "must be in (0, 1]"),
        (["in.jsonl", "--allowed-mass-below", "nan"], "must be in (0, 1]"),
        (["--regex", "a", "--prompt", "x", "--allowed-mass"], "--allowed-mass is an input file"),
        (["--regex", "a", "--prompt", "x", "--allowed-mass-below", "0.5"], "input file"),
        (["in.jsonl", "--ray", "--allowed-mass"], "not supported with --ray"),
    ],
)
def test_bad_allowed_mass_flags_are_refused_before_loading(
    tmp_path, capsys, monkeypatch, argv, piece
):
    monkeypatch.setattr(cli, "load_model", lambda *a, **k: pytest.fail("the model was loaded"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "in.jsonl").write_text("")
    assert main(["generate", *argv]) == 2
    assert piece in capsys.readouterr().err


@pytest.mark.parametrize("value", ["yes", 1, 0, [], {}])
def test_a_bad_allowed_mass_is_a_400_naming_it(value):
    """A boolean is taken (null is absent), anything else is a 400 naming the field."""
    assert parse_tool_request(body_of(None, allowed_mass=True)).allowed_mass is True
    assert parse_tool_request(body_of(None, allowed_mass=False)).allowed_mass is False
    assert parse_tool_request(body_of(None, allowed_mass=None)).allowed_mass is None
    with pytest.raises(ToolError) as caught:
        parse_tool_request(body_of(None, allowed_mass=value))
    error = caught.value
    assert (error.status, error.param, error.code) == (400, "allowed_mass", "invalid_type")


def test_the_engine_refuses_a_bad_allowed_mass_by_name():
    with pytest.raises(RequestError) as caught:
        check_request(GenerationRequest([1, 2], 5, allowed_mass="yes"), 100, 300)
    assert caught.value.param == "allowed_mass"


# --- the server ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def client():
    with background_server(StandInModel(), ServerConfig()) as (url, _):
        yield openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=120)


def ask(client, schema, stream=False, **extra):
    messages = [{"role": "user", "content": "Say something."}]
    kwargs = {"max_tokens": 30, "seed": 5, "temperature": 0.9}
    if schema is not None:
        kwargs["response_format"] = body_of(schema)["response_format"]
    return client.chat.completions.create(
        model="SmolLM2-135M-Instruct", messages=messages, stream=stream, **kwargs, **extra
    )


@pytest.mark.parametrize("schema", [SCHEMAS[0], None])
def test_the_server_answers_with_the_fields_and_streams_the_same(client, schema):
    """The openai client gets the fields when asked (checked against NumPy), none by
    default; a stream's chunks carry the same entries, and its last chunk the same min and
    mean, with logprobs or without."""
    extra = {"extra_body": {"allowed_mass": True}, "logprobs": True}
    plain = ask(client, schema, **extra).model_dump()
    choice = plain["choices"][0]
    body = body_of(schema, max_tokens=30, seed=5, temperature=0.9, allowed_mass=True)
    check_choice(StandInModel(), body, choice)
    default = ask(client, schema, logprobs=True).model_dump()["choices"][0]
    assert "allowed_mass" not in default
    assert "allowed_mass" not in default["logprobs"]["content"][0]
    for streamed_extra in (extra, {"extra_body": {"allowed_mass": True}}):
        entries, last = [], None
        for chunk in ask(client, schema, stream=True, **streamed_extra):
            for c in chunk.model_dump()["choices"]:
                if c["logprobs"]:
                    entries += c["logprobs"]["content"]
                if c["finish_reason"] is not None:
                    last = c
        if "logprobs" in streamed_extra:
            assert entries == choice["logprobs"]["content"]
        else:
            assert entries == []
        assert last["allowed_mass"] == choice["allowed_mass"]


def test_the_server_refuses_a_bad_allowed_mass_by_name(client):
    with pytest.raises(openai.BadRequestError) as bad:
        ask(client, None, extra_body={"allowed_mass": "yes"})
    assert (bad.value.body["param"], bad.value.body["code"]) == ("allowed_mass", "invalid_type")


def test_mean_and_min_are_those_of_the_entries():
    from corral.tools.shapes import allowed_mass_json

    assert allowed_mass_json(()) == {"min": None, "mean": None}
    masses = (0.25, 1.0, 0.5)
    assert allowed_mass_json(masses) == {"min": 0.25, "mean": math.fsum(masses) / 3}


@settings(max_examples=15, deadline=None)
@given(max_tokens=st.integers(5, 70), seed=st.integers(0, 2**32 - 1), jump=st.booleans())
def test_under_a_lazy_trigger_every_token_has_its_diagnostics(max_tokens, seed, jump):
    """A model that writes `<tool_call>` under tool_choice auto (free text, the trigger's
    budget masks, respelled triggers, then the call's grammar): every token has an allowed mass
    in [0, 1], at least its own probability, and an unmasked logprob that is NumPy's from the
    whole logits."""
    model = ScriptedModel()
    body = {"messages": [{"role": "user", "content": "call f"}], "tools": [TOOL],
            "max_tokens": max_tokens, "seed": seed, "logprobs": True, "allowed_mass": True,
            "jump_forward": jump}  # fmt: skip
    bodies, _ = run(model, [line_of("t", body)])
    choice = bodies["t"]["choices"][0]
    content = choice["logprobs"]["content"]
    history = list(Completions(model).requests(parse_tool_request(body))[0].prompt_ids)
    for entry in content:
        token = TOKENS.index(bytes(entry["bytes"]))
        x = model._logits(history).astype(np.float64)
        log_all = x.max() + np.log(np.exp(x - x.max()).sum())
        assert entry["unmasked_logprob"] == pytest.approx(x[token] - log_all, abs=2e-5)
        assert np.exp(x[token] - log_all) * (1 - 1e-4) <= entry["allowed_mass"] <= 1.0
        history.append(token)
    if content:
        assert choice["allowed_mass"]["min"] == min(e["allowed_mass"] for e in content)
