"""Grammar reuse (docs/design.md section 4: an index is built once and shared): the
`GrammarCompiler` counts its hits and misses, and a batch run's summary line reports them."""

from __future__ import annotations

import io
import json

import pytest
from corral.kernels import Vocabulary
from corral.tools.batch import run_batch
from corral.tools.completions import Completions
from corral.tools.errors import ToolError
from corral.tools.grammar import GrammarCompiler, regex_grammar
from stand_in_model import StandInModel

TINY = Vocabulary((b"a", b"b", b"ab", b"{", b"}", None), eos_ids=(5,))


def test_the_compiler_counts_hits_and_misses_including_rebuilds_after_eviction():
    compiler = GrammarCompiler(TINY, max_entries=1)
    assert (compiler.hits, compiler.misses, compiler.hit_rate) == (0, 0, 0.0)
    a, b = regex_grammar("a"), regex_grammar("b")
    compiler.index(a)
    compiler.index(regex_grammar("a"))  # an equal grammar: same key, a hit
    assert (compiler.hits, compiler.misses) == (1, 1)
    compiler.index(b)  # evicts a
    compiler.index(a)  # built again: a miss
    assert (compiler.hits, compiler.misses) == (1, 3)
    assert compiler.hit_rate == 0.25


def schema_line(custom_id: str, schema: dict) -> str:
    body = {
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 12,
        "response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}},
    }
    return json.dumps({"custom_id": custom_id, "body": body})


def test_the_summary_line_shows_the_grammar_cache_hit_rate_of_its_run():
    same = {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}
    other = {"type": "object", "properties": {"y": {"type": "boolean"}}, "required": ["y"]}
    lines = [schema_line(f"r{i}", same) for i in range(3)] + [schema_line("o", other)]
    engine = Completions(StandInModel())
    summary = run_batch(engine, lines, io.StringIO(), progress=False)
    assert (summary.grammar_hits, summary.grammar_misses) == (2, 2)
    assert "grammar cache 2 hits / 2 misses (50% hit rate)" in summary.line()
    again = run_batch(engine, lines, io.StringIO(), progress=False)  # the same engine: all cached
    assert (again.grammar_hits, again.grammar_misses) == (4, 0)
    assert "(100% hit rate)" in again.line()


def test_a_refused_grammar_is_a_miss_and_is_not_cached():
    compiler = GrammarCompiler(TINY)
    too_big = regex_grammar("(a|b)*a(a|b){16}")  # 2^17 DFA states, past the limit
    for _ in range(2):
        with pytest.raises(ToolError, match="too many states"):
            compiler.index(too_big)
    assert (compiler.hits, compiler.misses, len(compiler)) == (0, 2, 0)


def test_metrics_serve_the_compilers_hits_and_misses_at_each_scrape():
    from corral.tools.serving import Metrics
    from prometheus_client import generate_latest

    compiler = GrammarCompiler(TINY)
    metrics = Metrics()
    metrics.watch_grammars(compiler)
    compiler.index(regex_grammar("a"))
    compiler.index(regex_grammar("a"))
    compiler.index(regex_grammar("b"))
    text = generate_latest(metrics.registry).decode()
    assert 'corral_grammar_cache_lookups_total{result="hit"} 1.0' in text
    assert 'corral_grammar_cache_lookups_total{result="miss"} 2.0' in text
