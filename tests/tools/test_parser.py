"""The streaming tool-call parser (docs/design.md section 5: the worked example,
only real markup held back, parallel calls, split invariance)."""

import json
import random

import pytest
from corral.tools import (
    Arguments,
    CallStart,
    Content,
    ToolCall,
    ToolParser,
    collect,
    finish_reason,
    parse_text,
)
from corral.tools.shapes import delta_json, message_json
from hypothesis import given, settings
from hypothesis import strategies as st


def run(pieces, request_id="req7"):
    """Events per piece, then the events of finish()."""
    parser = ToolParser(request_id)
    return [parser.push(piece) for piece in pieces] + [parser.finish()]


def fold(pieces, request_id="req7"):
    return collect([event for events in run(pieces, request_id) for event in events])


def call(name, arguments):
    return f'<tool_call>{{"name":"{name}","arguments":{arguments}}}</tool_call>'


# --- parser_hand_example -------------------------------------------------------------------


def test_parser_hand_example_event_by_event():
    pieces = [
        "Sure.<tool_",
        'call>{"name":"get_weather","argu',
        'ments":{"city":"Pa',
        'ris"}}</tool_call>',
    ]
    assert run(pieces) == [
        [Content("Sure.")],
        [],
        [CallStart(0, "call_req7_0", "get_weather"), Arguments(0, '{"city":"Pa')],
        [Arguments(0, 'ris"}')],
        [],
    ]
    content, calls = fold(pieces)
    assert content == "Sure."
    assert calls == [ToolCall("call_req7_0", "get_weather", '{"city":"Paris"}')]
    assert finish_reason(calls, "stop") == "tool_calls"


def test_every_arguments_fragment_is_passed_on_as_it_arrives():
    text = call("f", '{"a":[1,{"b":2}],"c":"x"}')
    parser = ToolParser("r")
    events = [e for ch in text for e in parser.push(ch)] + parser.finish()
    fragments = [e.fragment for e in events if isinstance(e, Arguments)]
    assert "".join(fragments) == '{"a":[1,{"b":2}],"c":"x"}'
    assert all(len(f) == 1 for f in fragments)  # one per character pushed, none held back


# --- parser_holds_back_only_real_markup ------------------------------------------------------


def test_a_less_than_sign_that_cannot_begin_markup_is_emitted_at_once():
    assert run(["a<b"]) == [[Content("a<b")], []]
    assert run(["a<", "b"]) == [[Content("a")], [Content("<b")], []]
    assert run(["x <= y", " <<tool"]) == [[Content("x <= y")], [Content(" <")], [Content("<tool")]]


def test_a_trailing_partial_opener_is_held_and_released_at_finish():
    assert run(["hello <tool"]) == [[Content("hello ")], [Content("<tool")]]
    assert run(["<tool_call"]) == [[], [Content("<tool_call")]]
    assert fold(["hello <tool", "_ca"]) == ("hello <tool_ca", [])


def test_an_opener_without_a_header_is_content():
    # Released as soon as the text stops matching the header, the offending character re-read.
    assert run(["<tool_call>oops"]) == [[Content("<tool_call>oops")], []]
    assert run(
        ["<tool_call>", "{", '"na'],
    ) == [[], [], [], [Content('<tool_call>{"na')]]
    assert fold(['<tool_call>{"name":"f","arguments"]']) == (
        '<tool_call>{"name":"f","arguments"]',
        [],
    )
    # A broken opener followed by a real one: the second call is still found.
    content, calls = fold(["<tool_call><tool_call>" + call("f", "{}")[len("<tool_call>") :]])
    assert content == "<tool_call>"
    assert calls == [ToolCall("call_req7_0", "f", "{}")]


def test_markup_never_reaches_content_and_no_content_is_lost():
    text = "Let me check. " + call("get_weather", '{"city":"Paris"}')
    for cut in range(len(text) + 1):
        content, calls = fold([text[:cut], text[cut:]])
        assert content == "Let me check. "
        assert [c.arguments for c in calls] == ['{"city":"Paris"}']


def test_whitespace_inside_the_markup_is_tolerated():
    text = '<tool_call>\n{"name": "f", "arguments": {"x": 1}}\n</tool_call>'
    assert fold([text]) == (None, [ToolCall("call_req7_0", "f", '{"x": 1}')])


def test_a_call_cut_short_keeps_the_arguments_already_emitted():
    content, calls = fold(['<tool_call>{"name":"f","arguments":{"city":"Pa'])
    assert content is None
    assert calls == [ToolCall("call_req7_0", "f", '{"city":"Pa')]
    assert finish_reason(calls, "length") == "length"


def test_escaped_names_are_decoded():
    assert fold(['<tool_call>{"name":"a\\u00e9","arguments":{}}</tool_call>'])[1] == [
        ToolCall("call_req7_0", "a\u00e9", "{}")
    ]


def test_push_after_finish_is_refused():
    parser = ToolParser("r")
    parser.finish()
    with pytest.raises(RuntimeError):
        parser.push("x")


# --- parser_parallel_calls -------------------------------------------------------------------


def test_parser_parallel_calls_indices_ids_and_separator():
    text = "\n".join(
        [call("get_weather", '{"city":"Paris"}'), call("get_time", '{"tz":"CET"}'), call("f", "{}")]
    )
    events = parse_text(text, "abc")
    starts = [e for e in events if isinstance(e, CallStart)]
    assert starts == [
        CallStart(0, "call_abc_0", "get_weather"),
        CallStart(1, "call_abc_1", "get_time"),
        CallStart(2, "call_abc_2", "f"),
    ]
    assert not any(isinstance(e, Content) for e in events)  # the "\n" between calls is no content
    content, calls = collect(events)
    assert content is None
    assert [(c.name, c.arguments) for c in calls] == [
        ("get_weather", '{"city":"Paris"}'),
        ("get_time", '{"tz":"CET"}'),
        ("f", "{}"),
    ]


def test_text_after_a_call_keeps_its_leading_whitespace_but_a_trailing_newline_is_dropped():
    assert fold([call("f", "{}") + "\nDone."])[0] == "\nDone."
    assert fold([call("f", "{}") + "\n"])[0] is None


# --- whitespace around calls ----------------------------------------------------------------

WS = " \t\n\r"


def streamed(pieces) -> dict:
    """The message a streaming client builds from the deltas of `pieces`."""
    content, tool_calls = None, []
    for events in run(pieces):
        for event in events:
            delta = delta_json(event)
            if "content" in delta:
                content = (content or "") + delta["content"]
            for d in delta.get("tool_calls", []):
                if "id" in d:
                    tool_calls.append({**d, "function": dict(d["function"])})
                else:
                    tool_calls[d["index"]]["function"]["arguments"] += d["function"]["arguments"]
    return {
        "content": content,
        "calls": [(c["function"]["name"], c["function"]["arguments"]) for c in tool_calls],
    }


def whole(text) -> dict:
    """The message of the non-streaming path (parse_text, collect, message_json)."""
    message = message_json(*collect(parse_text(text)))
    calls = [
        (c["function"]["name"], c["function"]["arguments"]) for c in message.get("tool_calls", [])
    ]
    return {"content": message["content"], "calls": calls}


F = call("f", "{}")
WHITESPACE_CASES = [
    # (text, content of the message)
    ("\n\n" + F, None),
    (F + "\n" + F + "\n", None),
    (" \n" + F + "\n\n" + F + " \t", None),
    ("\r\n" + F + "\n" + F + "\n" + F, None),
    ("Sure.\n\n" + F, "Sure.\n\n"),  # whitespace after text is content, as generated
    ("Sure. " + F + "\n" + F + "\n", "Sure. "),
    ("Hi " + F + " there", "Hi  there"),
    (F + "\nDone.\n", "\nDone.\n"),
    ("\n\n" + F + "Done.", "Done."),
    ("  ", "  "),
    ("Hi\n", "Hi\n"),
    ("\n<tool", "\n<tool"),
    (' <tool_call>{"name" ', ' <tool_call>{"name" '),
]


@pytest.mark.parametrize(("text", "content"), WHITESPACE_CASES)
def test_whitespace_held_at_the_start_or_after_a_call_is_content_only_before_text(text, content):
    assert whole(text)["content"] == content
    for cut in range(len(text) + 1):
        assert streamed([text[:cut], text[cut:]]) == whole(text), cut
    assert streamed(list(text)) == whole(text)


def test_whitespace_before_a_call_is_held_and_never_streamed():
    assert run(["\n\n", F]) == [[], [CallStart(0, "call_req7_0", "f"), Arguments(0, "{}")], []]
    assert run([" \n", "Hi"]) == [[], [Content(" \nHi")], []]
    assert run(["  "]) == [[], [Content("  ")]]  # no call: the whitespace is the answer


calls_and_whitespace = st.lists(
    st.tuples(st.text(alphabet=WS, max_size=3), st.sampled_from([F, call("g", '{"a":[1]}')])),
    min_size=1,
    max_size=4,
)


@settings(max_examples=150, deadline=None)
@given(
    parts=calls_and_whitespace,
    tail=st.text(alphabet=WS, max_size=3),
    cuts=st.lists(st.integers(min_value=0, max_value=300), max_size=8),
)
def test_a_turn_of_only_calls_has_no_content_however_it_is_split(parts, tail, cuts):
    text = "".join(w + c for w, c in parts) + tail
    cuts = sorted({c for c in cuts if c <= len(text)})
    pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
    assert streamed(pieces) == whole(text)
    assert whole(text)["content"] is None
    assert len(whole(text)["calls"]) == len(parts)


# --- parser_is_split_invariant ---------------------------------------------------------------

STREAMS = [
    "Just some text, with a < sign and <b>tags</b> and <tool_cal without the l.",
    "Sure." + call("get_weather", '{"city":"Paris"}'),
    call("get_weather", '{"city":"Paris"}') + "\n" + call("get_time", '{"zone":"Europe/Paris"}'),
    call(
        "q", '{"text":"a } brace, a { brace, \\"quoted\\" and a \\\\ backslash","n":[1,{"m":[]}]}'
    ),
    call("uni", '{"city":"Zürich 東京 🙂","note":"</tool_call> inside a string"}'),
    "<tool_call>not a call</tool_call> then " + call("f", "{}"),
    '<tool_call>{"name":"f","arguments":{"a":1}}</tool_call',
]


def folded_answer(text):
    return fold([text])


def splits_of(text, rng, n):
    for _ in range(n):
        k = rng.randint(1, 6)
        cuts = sorted(rng.sample(range(len(text) + 1), min(k, len(text) + 1)))
        yield [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]


@pytest.mark.parametrize("text", STREAMS)
def test_parser_is_split_invariant_every_two_way_split(text):
    expected = folded_answer(text)
    for cut in range(len(text) + 1):
        assert fold([text[:cut], text[cut:]]) == expected, cut


@pytest.mark.parametrize("text", STREAMS)
def test_parser_is_split_invariant_200_random_splits(text):
    expected = folded_answer(text)
    rng = random.Random(text)
    for pieces in splits_of(text, rng, 200):
        assert fold(pieces) == expected, pieces
    assert fold(list(text)) == expected


def test_folded_answers_of_the_streams():
    content, calls = folded_answer(STREAMS[3])
    assert content is None
    assert (
        json.loads(calls[0].arguments)["text"]
        == 'a } brace, a { brace, "quoted" and a \\ backslash'
    )
    content, calls = folded_answer(STREAMS[4])
    assert json.loads(calls[0].arguments)["note"] == "</tool_call> inside a string"
    content, calls = folded_answer(STREAMS[5])
    assert content == "<tool_call>not a call</tool_call> then "
    assert [c.name for c in calls] == ["f"]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3)
    ),
    max_leaves=8,
)


@settings(max_examples=150, deadline=None)
@given(
    before=st.text(max_size=12),
    arguments=st.lists(st.dictionaries(st.text(max_size=6), json_values, max_size=3), max_size=3),
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=8),
)
def test_parser_is_split_invariant_property(before, arguments, cuts):
    # Text that cannot hold markup (no "<"), then 0..3 calls of compact JSON arguments.
    before = before.replace("<", "")
    texts = [json.dumps(a, ensure_ascii=False, separators=(",", ":")) for a in arguments]
    text = before + "\n".join(call(f"f{i}", t) for i, t in enumerate(texts))
    cuts = sorted({c for c in cuts if c <= len(text)})
    pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
    content, calls = fold(pieces)
    # whitespace-only text before calls is no content (parser docstring)
    assert content == ((before if before.strip(WS) or not texts else "") or None)
    assert [c.name for c in calls] == [f"f{i}" for i in range(len(texts))]
    assert [json.loads(c.arguments) for c in calls] == arguments
