"""GBNF grammars of llama.cpp against corral's grammar compiler (docs/grammars.md).

- Each grammar of llama.cpp's grammars/ folder compiles; every string drawn from its DFA parses
  with Lark given the same grammar translated by hand (tests/data/grammars/lark/), and so does
  every mutation of them the DFA accepts (never wider). A grammar whose recursion is not cut
  must agree with Lark on the mutations both ways (exact).
- The GBNF cases of llama.cpp's grammar integration test, re-expressed as data
  (tests/data/grammars/llama_integration.json): strings that must and must not match, grammars
  llama.cpp fails to build, and the cases corral refuses on purpose, counted.

The grammars are read from the sample in tests/data/grammars/llama.cpp (always) and from the full
data's llama.cpp/ (skipped, with one line of reason, when it is absent).
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import numpy as np
import pytest
from corral.automata import GrammarError, compile_grammar_text
from grammar_oracle import LarkOracle, mutations, samples

GRAMMARS = Path(__file__).resolve().parents[1] / "data" / "grammars"
LARK = GRAMMARS / "lark"
CASES = json.loads((GRAMMARS / "llama_integration.json").read_text(encoding="utf-8"))["cases"]

EXPECTED = {  # name: (max_recursion used, rules cut, DFA states) at the default bound
    "arithmetic": (5, ("expr", "term"), 49),
    "english": (5, (), 2),
    "json": (5, ("object", "value"), 5461),
    "json_arr": (5, ("value",), 5407),
    "list": (5, (), 15),
}


@pytest.fixture(scope="module", params=["sample", "full"])
def grammar_folder(request) -> Path:
    """llama.cpp's grammars/: the sample shipped in tests/data, then the full data's."""
    if request.param == "sample":
        return GRAMMARS / "llama.cpp" / "grammars"
    folder = request.getfixturevalue("full_data") / "llama.cpp" / "grammars"  # skips if absent
    if not folder.is_dir():
        pytest.skip(f"llama.cpp grammars not found at {folder}")
    return folder


def test_llama_grammars_against_lark(grammar_folder):
    files = sorted(grammar_folder.glob("*.gbnf"))
    assert files, f"no .gbnf file in {grammar_folder}"
    for path in files:
        check_against_lark(path.stem, path.read_text(encoding="utf-8"))


@functools.cache
def check_against_lark(name: str, text: str) -> None:
    """The checks of one grammar (module docstring); once per text, as the full data repeats
    the sample's files."""
    compiled = compile_grammar_text(text, "gbnf")
    assert (compiled.max_recursion, compiled.cut_rules, compiled.dfa.n_states) == EXPECTED[name]
    translation = LARK / f"{name}.lark"
    assert translation.is_file(), f"{name}.gbnf has no Lark translation in {LARK}"
    oracle = LarkOracle(translation.read_text(encoding="utf-8"))
    drawn = samples(compiled.dfa, seed=len(name), n=16, stop_probability=0.5)
    for s in drawn:
        assert oracle.accepts(s), (name, s)
    for s in mutations(drawn, seed=7, per_text=2, alphabet=' "\\-+[]{}:,.0a\n\u00e9'):
        ours = compiled.dfa.matches(s.encode("utf-8"))
        if ours or compiled.exact:
            assert ours == oracle.accepts(s), (name, s, ours)


def test_llama_translations_compile_alike():
    """The Lark translations, compiled by corral's Lark front end, give the same canonical DFA
    as the GBNF originals: the two front ends agree on the language."""
    for path in sorted((GRAMMARS / "llama.cpp" / "grammars").glob("*.gbnf")):
        gbnf = compile_grammar_text(path.read_text(encoding="utf-8"), "gbnf")
        lark = compile_grammar_text((LARK / f"{path.stem}.lark").read_text("utf-8"), "lark")
        assert np.array_equal(gbnf.dfa.trans, lark.dfa.trans), path.stem
        assert np.array_equal(gbnf.dfa.accept, lark.dfa.accept), path.stem
        assert gbnf.cut_rules == lark.cut_rules


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_llama_integration_case(case):
    if "refused" in case:
        pytest.skip(f"refused on purpose: {case['refused']}")
    if "error" in case:
        with pytest.raises(GrammarError, match=case["error"]):
            compile_grammar_text(case["grammar"], "gbnf")
        return
    dfa = compile_grammar_text(case["grammar"], "gbnf").dfa
    for s in case["passing"]:
        assert dfa.matches(s.encode("utf-8")), s
    for s in case["failing"]:
        assert not dfa.matches(s.encode("utf-8")), s


def test_llama_integration_refusals_are_counted():
    """The cases refused on purpose: the token references (another issue adds special-token
    symbols) and a start rule other than `root` (not an option of the API)."""
    refused = [c["name"] for c in CASES if "refused" in c]
    assert refused == [
        "simple grammar with tokens",
        "complex grammar with tokens",
        "custom root symbol given",
    ]
    for case in CASES:
        if "refused" in case and "<" in case["grammar"]:
            with pytest.raises(GrammarError, match="token references"):
                compile_grammar_text(case["grammar"], "gbnf")
