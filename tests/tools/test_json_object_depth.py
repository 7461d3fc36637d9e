"""corral's request field `json_object_depth` (corral.tools.request, corral.tools.grammar): a
`json_object` answer nests at most that deep, checked on nested objects whose depth is counted
independently of corral's compiler."""

from __future__ import annotations

import pytest
from corral.tools import ToolError, parse_tool_request
from corral.tools.grammar import JSON_OBJECT_DEPTH, compile_dfa, grammar
from corral.tools.request import MAX_JSON_OBJECT_DEPTH

ASK = [{"role": "user", "content": "JSON please."}]
JSON_OBJECT = {"type": "json_object"}


def nested(k: int) -> bytes:
    """An object nested `k` levels deep."""
    return ('{"a":' * k + "1" + "}" * k).encode()


@pytest.mark.parametrize("depth", [None, *range(1, MAX_JSON_OBJECT_DEPTH + 1)])
def test_a_json_object_nests_at_most_the_depth_asked(depth):
    body = {"messages": ASK, "response_format": JSON_OBJECT}
    if depth is not None:
        body["json_object_depth"] = depth
    dfa = compile_dfa(grammar(parse_tool_request(body)))
    most = JSON_OBJECT_DEPTH if depth is None else depth
    assert dfa.matches(b"{}")
    for k in range(1, MAX_JSON_OBJECT_DEPTH + 2):
        assert dfa.matches(nested(k)) == (k <= most), k


@pytest.mark.parametrize(
    "extra",
    [
        {"json_object_depth": 0, "response_format": JSON_OBJECT},
        {"json_object_depth": MAX_JSON_OBJECT_DEPTH + 1, "response_format": JSON_OBJECT},
        {"json_object_depth": "3", "response_format": JSON_OBJECT},
        {"json_object_depth": 4},
        {"json_object_depth": 4, "response_format": {"type": "text"}},
    ],
)
def test_a_bad_or_unused_json_object_depth_is_a_400_naming_it(extra):
    with pytest.raises(ToolError) as caught:
        parse_tool_request({"messages": ASK, **extra})
    assert (caught.value.status, caught.value.param) == (400, "json_object_depth")
