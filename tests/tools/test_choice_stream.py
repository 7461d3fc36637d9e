"""A streamed choice equals its answer (corral.tools.serving.ChoiceStream): whatever bytes the
model wrote (not UTF-8 included) and however the steps cut them, the concatenated deltas are the
message the same result gives unstreamed (`completion_json`, as `corral serve` and `corral
generate` answer), with and without tool calls, stop strings and logprobs."""

from __future__ import annotations

import json

import httpx
from corral.model.generate import GenerationResult
from corral.tools.events import collect
from corral.tools.parser import parse_text
from corral.tools.server import ServerConfig, background_server
from corral.tools.serving import ChoiceStream
from hypothesis import given, settings
from hypothesis import strategies as st
from stand_in_model import StandInModel

CALL = b'<tool_call>{"name":"f","arguments":{"a":"\xc3\xa9"}}</tool_call>'
PIECES = st.one_of(
    st.binary(max_size=6),  # any bytes, most of them not UTF-8
    st.text(max_size=4).map(str.encode),
    st.sampled_from(
        [
            b"\xe4\xbd",
            b"\xf0\x9f",
            b"\x98",
            b"\xe4\xbd\xa0",
            b"\xed\xa0\x80",
            b"\xff",
            b"<",
            b"<tool_call>",
            CALL,
            CALL[:20],
            CALL[20:],
            b"\n",
            b"END",
            b"EN",
        ]
    ),  # fmt: skip
)


def final_message(data: bytes, calls: bool) -> tuple:
    """The unstreamed answer's `(content, calls)`, as `completion_json` builds it."""
    text = GenerationResult(data, (), (), "stop", 1, 1).text
    if not calls:
        return text or None, []
    return collect(parse_text(text, "r"))


def result_of(data: bytes, tokens=()) -> GenerationResult:
    return GenerationResult(data, tuple(tokens), (0.0,) * len(tokens), "stop", 1, len(tokens))


def test_the_issues_cases_stream_what_the_answer_holds():
    stream = ChoiceStream(None, ())
    events = stream.feed(b"ok \xe4\xbd") + stream.finish(result_of(b"ok \xe4\xbd"))
    assert collect(events) == ("ok \ufffd", [])
    stream = ChoiceStream(None, ())
    events = stream.feed(b"\xf0\x9f") + stream.feed(b" ok")
    events += stream.finish(result_of(b"\xf0\x9f ok"))
    assert collect(events) == ("\ufffd ok", [])


@settings(max_examples=400, deadline=None)
@given(
    st.lists(PIECES, max_size=12),
    st.lists(st.integers(0, 200), max_size=8),
    st.integers(0, 200),
    st.booleans(),
    st.sampled_from([(), ("END",), ("\ufffd",), ("é<",)]),
)
def test_the_deltas_of_any_bytes_cut_anywhere_join_to_the_final_message(
    pieces, cuts, fed_until, calls, stop
):
    """Random bytes (partial and invalid UTF-8, tool-call markup among them) cut into random
    steps: the stream's events fold to the message of the result's bytes. The engine posts a
    prefix of the bytes (never a complete stop string) and ends with the result, cut before the
    first stop string."""
    raw = b"".join(pieces)
    data, fed_limit = raw, len(raw)
    for s in (s.encode() for s in stop):
        if s in raw:
            at = raw.index(s)
            data, fed_limit = raw[:at], at + len(s) - 1
    fed = raw[: min(fed_until, fed_limit)]
    bounds = sorted({0, len(fed), *(c for c in cuts if c < len(fed))})
    stream = ChoiceStream("r" if calls else None, stop)
    events = []
    for start, end in zip(bounds, bounds[1:], strict=False):
        events += stream.feed(fed[start:end])
    events += stream.finish(result_of(data))
    assert collect(events) == final_message(data, calls)


TOKEN_BYTES = [b"a", b"\xe4", b"\xbd", b"\xa0", b"\xf0\x9f", b"\x98\x80", b"\xff", b"<tool_call>",
               b'{"name":"f","arguments":{}}', b"</tool_call>", b"EN", b"D", b" \xc3",
               None]  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.integers(0, len(TOKEN_BYTES) - 1), max_size=20),
    st.booleans(),
    st.sampled_from([(), ("END",)]),
)
def test_a_replayed_choice_joins_to_the_final_message(tokens, calls, stop):
    """`ChoiceStream.replay` (a streamed request with logprobs) over tokens whose bytes are not
    UTF-8 on their own: it sends the events a live stream of the same tokens sends (each
    token's bytes fed as its step posts them), and they fold to the unstreamed message."""
    data = b"".join(TOKEN_BYTES[t] or b"" for t in tokens)
    for s in stop:
        if s.encode() in data:
            data = data[: data.index(s.encode())]
    call_id = "r" if calls else None
    result = result_of(data, tokens)
    live, events, written = ChoiceStream(call_id, stop), [], 0
    for t in tokens:
        piece = data[written : written + len(TOKEN_BYTES[t] or b"")]
        written += len(piece)
        events += live.feed(piece)
    events += live.finish(result)
    pairs = ChoiceStream(call_id, stop).replay(result, TOKEN_BYTES)
    assert [e for e, _ in pairs if e is not None] == events
    assert collect(events) == final_message(data, calls)


def streamed_content(response: httpx.Response) -> str:
    content = []
    for line in response.iter_lines():
        if line.startswith("data: {"):
            for choice in json.loads(line[6:])["choices"]:
                content.append(choice["delta"].get("content") or "")
    return "".join(content)


def test_the_server_streams_the_answer_it_gives_unstreamed():
    """Through `corral serve` with the byte-level stand-in model (its free text is mostly not
    UTF-8): for each seed, with and without logprobs, the streamed content equals the
    unstreamed one."""
    model = StandInModel(eos_bias=-1.0)
    with (
        background_server(model, ServerConfig(batch_size=4)) as (url, _),
        httpx.Client(base_url=url, timeout=60) as http,
    ):
        for seed in range(12):
            body = {
                "model": "SmolLM2-135M-Instruct",
                "messages": [{"role": "user", "content": "hi"}],
                "seed": seed,
                "max_tokens": 7,
                "logprobs": seed % 2 == 1,
            }
            answer = http.post("/v1/chat/completions", json=body).json()
            content = answer["choices"][0]["message"]["content"] or ""
            with http.stream("POST", "/v1/chat/completions", json={**body, "stream": True}) as r:
                assert streamed_content(r) == content, seed


def test_the_real_model_streams_the_chinese_it_answers(smollm2):
    """The issue's case: SmolLM2 asked to translate into Chinese at temperature 0 ends its 5
    tokens inside a character; the stream sends the same U+FFFD as the answer, with and without
    logprobs, not a character the model never wrote."""
    with (
        background_server(smollm2, ServerConfig(batch_size=2, max_len=256)) as (url, _),
        httpx.Client(base_url=url, timeout=300) as http,
    ):
        for logprobs in (False, True):
            body = {
                "model": "SmolLM2-135M-Instruct",
                "messages": [{"role": "user", "content": "Translate to Chinese: hello world"}],
                "temperature": 0,
                "max_tokens": 5,
                "logprobs": logprobs,
            }
            answer = http.post("/v1/chat/completions", json=body).json()
            content = answer["choices"][0]["message"]["content"]
            assert content.endswith("\ufffd")
            with http.stream("POST", "/v1/chat/completions", json={**body, "stream": True}) as r:
                assert streamed_content(r) == content
