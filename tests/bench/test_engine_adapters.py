"""bench/engines.py's adapters: masks of the other engines against corral's on aligned grammars
(each engine test skipped when the `bench` extra is not installed), and the pure helpers."""

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from engine_adapters import Refused, allowed_ids, forbid_extra_members, make_engine  # noqa: E402
from engines import quotas  # noqa: E402

MODULES = {"outlines-core": "outlines_core", "xgrammar": "xgrammar", "llguidance": "llguidance"}
MODULES["corral-lazy"] = "corral"  # corral's DFA made on demand: installed with corral
CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


def test_allowed_ids_reads_the_packed_layout():
    ids = np.array([0, 5, 31, 32, 70, 99])
    packed = np.zeros(4, dtype=np.uint32)
    for t in ids:
        packed[t // 32] |= np.uint32(1 << (t % 32))
    assert allowed_ids(packed, 100).tolist() == ids.tolist()


def test_forbid_extra_members_only_where_unsaid():
    schema = {
        "type": "object",
        "properties": {"a": {"type": "object", "properties": {}}, "b": {"anyOf": [CITY]}},
        "additionalProperties": True,
    }
    out = forbid_extra_members(schema)
    assert out["additionalProperties"] is True
    assert out["properties"]["a"]["additionalProperties"] is False
    assert out["properties"]["b"]["anyOf"][0]["additionalProperties"] is False
    assert "additionalProperties" not in CITY  # the input is not changed


@pytest.mark.parametrize("sizes,total", [({"a": 10, "b": 1, "c": 89}, 20), ({"a": 3, "b": 0}, 9)])
def test_quotas_are_proportional_and_bounded(sizes, total):
    got = quotas(sizes, total)
    assert sum(got.values()) == min(total, sum(sizes.values()))
    assert all(0 <= got[n] <= sizes[n] for n in sizes)
    assert all(got[n] >= 1 for n in sizes if sizes[n] and total >= len(sizes))


@pytest.fixture(scope="module")
def smollm2():
    from engine_workers import load_vocabulary

    return load_vocabulary()


def walk_masks(engine, kind, source, walk):
    session = engine.start(engine.compile(kind, source))
    masks = []
    for token in walk:
        session.fill()
        masks.append(session.buffer.copy())
        assert session.advance(token), f"{engine.name} refused token {token}"
    return masks


@pytest.mark.parametrize("name", sorted(MODULES))
@pytest.mark.parametrize(
    "kind,source,text",
    [("regex", "(cat|car|dog)s?", "cats"), ("schema", CITY, '{"city":"Lyon"}')],
)
def test_masks_equal_corrals_along_a_walk(smollm2, name, kind, source, text):
    pytest.importorskip(MODULES[name], reason=f"{name} not installed (pip install -e '.[bench]')")
    from tokenizers import Tokenizer

    vocabulary, tokenizer_json = smollm2
    walk = Tokenizer.from_str(tokenizer_json).encode(text, add_special_tokens=False).ids + [2]
    mine = walk_masks(make_engine("corral", vocabulary, tokenizer_json), kind, source, walk)
    if name == "outlines-core" and kind == "schema":  # its JSON strings exclude U+007F-U+009F
        from corral.automata import json_schema_to_regex

        kind, source = "regex", json_schema_to_regex(source)  # the same regex: exact check
    theirs = walk_masks(make_engine(name, vocabulary, tokenizer_json), kind, source, walk)
    for step, (a, b) in enumerate(zip(mine, theirs, strict=True)):
        if name == "llguidance" and kind == "schema":
            # llguidance allows only the canonical tokens of forced bytes (bench/README.md)
            assert set(allowed_ids(b, vocabulary.size)) <= set(allowed_ids(a, vocabulary.size))
            continue
        assert np.array_equal(a, b), f"{name} differs from corral at step {step}"


@pytest.mark.parametrize(
    "kind,source,text",
    [
        ("schema", {"type": "object", "properties": {"n": {"type": "integer"}}}, '{"n":-120}'),
        ("regex", "[a-z]{2,5}@(ab|cd)", "xyz@cd"),
    ],
)
def test_corral_lazy_masks_equal_corrals_past_its_finish(smollm2, kind, source, text):
    from tokenizers import Tokenizer

    vocabulary, tokenizer_json = smollm2
    walk = Tokenizer.from_str(tokenizer_json).encode(text, add_special_tokens=False).ids + [2]
    assert len(walk) > 2  # the second new mask finishes the lazy DFA
    mine = walk_masks(make_engine("corral", vocabulary, tokenizer_json), kind, source, walk)
    lazy = walk_masks(make_engine("corral-lazy", vocabulary, tokenizer_json), kind, source, walk)
    for step, (a, b) in enumerate(zip(mine, lazy, strict=True)):
        assert np.array_equal(a, b), f"corral-lazy differs from corral at step {step}"


@pytest.mark.parametrize("name", ["corral", *sorted(MODULES)])
def test_a_bad_regex_is_refused(smollm2, name):
    if name != "corral":
        pytest.importorskip(MODULES[name], reason=f"{name} not installed (.[bench])")
    engine = make_engine(name, *smollm2)
    with pytest.raises(Refused):
        engine.compile("regex", "(ab")


def test_an_unknown_engine_is_an_error(smollm2):
    with pytest.raises(ValueError, match="unknown engine"):
        make_engine("nope", *smollm2)
