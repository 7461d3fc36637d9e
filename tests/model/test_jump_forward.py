"""Jump-forward (corral.model.jump_forward, the engine's use of it in corral.model.generate): the
forced text's tokens are the tokenizer's own, every text the grammar allows stays writable, every
answer validates, the budget holds, and with the switch off every token is sampled.

Fast tests use the tiny checkpoint's byte-level BPE tokenizer (SmolLM2's pre-tokenizer, 3
merges) and `TargetModel`; the slow ones the real SmolLM2 tokenizer and model."""

from __future__ import annotations

import json

import jsonschema
import numpy as np
import pytest
from corral.automata import regex_to_dfa, schema_to_dfa
from corral.kernels import GREEDY, Constraint, SamplingParams, TokenIndex
from corral.model.generate import GenerationRequest, GenerationStats, Generator, generate
from corral.model.jump_forward import ForcedTokenizer
from fake_model import TargetModel
from hypothesis import given, settings
from hypothesis import strategies as st

WEATHER = {
    "type": "object",
    "properties": {
        "location": {"type": "string"},
        "unit": {"enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer"},
        "hello": {"const": "hello, well"},
    },
    "required": ["location", "unit", "hello"],
}
TEXTS = [
    b'{"location":"Paris","unit":"celsius","hello":"hello, well"}',
    b'{"location":"hell\\"o","unit":"fahrenheit","days":12,"hello":"hello, well"}',
    b'{"location":"\xc3\xa9t\xc3\xa9 ","unit":"celsius","days":-3,"hello":"hello, well"}',
    b'{"location":"","unit":"fahrenheit","days":0,"hello":"hello, well"}',
]
CALL = r'\{"name":"get_weather","arguments":\{"city":"[a-z]+","days":[0-9]\}\}</tool_call>'
CALLS = [
    b'{"name":"get_weather","arguments":{"city":"hello","days":3}}</tool_call>',
    b'{"name":"get_weather","arguments":{"city":"lille","days":0}}</tool_call>',
]

# text made of what JSON and tool calls are made of, digits and words the merges touch
PIECES = ["h", "e", "l", "o", "hello", " ", "  ", '"', "{", "}", ":", ",", "[", "]", "1", "23",
          "é", "ü", "\n", "<", ">", "_", "/", "<|im_", "end|>", "<|im_end|>", "\\"]  # fmt: skip
texts = st.lists(st.sampled_from(PIECES), max_size=12).map("".join)


def forced_tokenizer(model) -> ForcedTokenizer:
    return ForcedTokenizer(model.tokenizer, model.vocabulary)


def check_prefix_property(model, forced: str, rest: str, follow: bytes | None = None) -> None:
    """The committed tokens of `forced` begin the tokenizer's own tokens of `forced + rest`
    (`rest` starting with a byte of `follow`, or empty when `follow` is b"")."""
    committed = forced_tokenizer(model).tokens(forced.encode("utf-8"), follow)
    spelled = model.vocabulary.decode(committed)
    assert forced.encode("utf-8").startswith(spelled)
    assert len(committed) == 0 or len(spelled) > 0
    assert list(model.tokenizer.encode(forced + rest)[: len(committed)]) == list(committed)


# what the grammar allows after forced text: the first byte of what follows, and others
follows = st.tuples(texts, st.lists(st.sampled_from(PIECES), max_size=4).map("".join))


def follow_bytes(rest: str, others: str) -> bytes:
    return (rest + others).encode("utf-8")[:1] + others.encode("utf-8") if rest else b""


@settings(max_examples=300, deadline=None)
@given(forced=texts, rest=texts)
def test_committed_tokens_are_the_tokenizers_own_whatever_follows(tiny_model, forced, rest):
    check_prefix_property(tiny_model, forced, rest)


@settings(max_examples=500, deadline=None)
@given(forced=texts, follow=follows)
def test_committed_tokens_are_the_tokenizers_own_whatever_the_grammar_lets_follow(
    tiny_model, forced, follow
):
    rest, others = follow
    check_prefix_property(tiny_model, forced, rest, follow_bytes(rest, others))


def test_the_last_pre_token_is_final_when_nothing_allowed_next_extends_it(tiny_model):
    tokens, vocabulary = forced_tokenizer(tiny_model), tiny_model.vocabulary
    assert vocabulary.decode(tokens.tokens(b'":', b"tf")) == b'":'  # `":t` splits before t
    assert vocabulary.decode(tokens.tokens(b'":', b"0123456789")) == b'":'  # digits: alone
    assert tokens.tokens(b'":', b"-0123456789") == ()  # `":-` is one pre-token
    assert vocabulary.decode(tokens.tokens(b'","hello":', b'"')) == b'","hello'  # `":"`
    assert vocabulary.decode(tokens.tokens(b'"}}', b"")) == b'"}}'  # the answer ends
    assert vocabulary.decode(tokens.tokens(b'"hello', b"\xc3")) == b'"'  # not ASCII: open
    assert vocabulary.decode(tokens.tokens(b'":hello ', b"a")) == b'":hello'  # whitespace
    assert vocabulary.decode(tokens.tokens(b"ab <|im_", b"e")) == b"ab"  # an added token


def test_the_last_pre_token_and_a_possible_added_token_stay_open(tiny_model):
    tokens, vocabulary = forced_tokenizer(tiny_model), tiny_model.vocabulary
    assert vocabulary.decode(tokens.tokens(b'","hello":')) == b'","hello'
    assert vocabulary.decode(tokens.tokens(b"hello world")) == b"hello"
    assert vocabulary.decode(tokens.tokens(b"ab <|im_")) == b"ab"  # " <|im_" could become EOS
    assert tokens.tokens(b'":') == ()  # one pre-token: nothing is final
    assert tokens.tokens(b"\xa9t\xc3\xa9,x") == ()  # starts inside a character
    assert vocabulary.decode(tokens.tokens(b"a,\xc3")) == b"a"  # ends inside one


def test_a_jump_keeps_within_the_tokens_left(tiny_model):
    tokens = forced_tokenizer(tiny_model)
    start = Constraint(TokenIndex(schema_to_dfa(WEATHER), tiny_model.vocabulary))
    ids, after = tokens.jump(start, 1000)
    assert tiny_model.vocabulary.decode(ids) == b'{"location'  # `":"` stays open (`":""`)
    assert after.state != start.state and start.state == 0
    assert tokens.jump(start, 2, budget_aware=False)[0] == ids[:2]
    assert tokens.jump(start, 0) == ([], start)
    least = start.tokens_to_complete()
    for left in range(least, least + 12):
        ids, after = tokens.jump(start, left)
        assert after.tokens_to_complete() <= left - len(ids)


def reference_jump(tokens: ForcedTokenizer, constraint: Constraint, left: int, budget_aware: bool):
    """`ForcedTokenizer.jump` without its per-state cache: the forced bytes' committed tokens
    from `tokens.tokens`, the longest prefix within `left` tokens whose end still completes in
    the tokens left after it (any prefix when not `budget_aware`)."""
    forced = constraint.forced_bytes() if left > 0 and not constraint.done else b""
    if not forced:
        return [], (constraint.state, constraint.done)
    end = constraint.copy()
    end.advance_bytes(forced)
    ids = list(tokens.tokens(forced, end.next_bytes())[:left])
    while ids:
        after = constraint.copy()
        after.advance_bytes(tokens.vocabulary.decode(ids))
        if not budget_aware or after.completes_within(left - len(ids)):
            return ids, (after.state, after.done)
        ids.pop()
    return [], (constraint.state, constraint.done)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**31))
def test_a_jump_from_a_remembered_state_is_the_jump_computed_afresh(tiny_model, seed):
    """The per-state cache of `jump` changes nothing: from every state on the way through
    valid answers (tool calls and schema objects), under random budgets, in a random order (so
    most jumps hit a state remembered under another budget), one shared `ForcedTokenizer`
    gives the reference's tokens and end state."""
    rng = np.random.default_rng(seed)
    tokens = forced_tokenizer(tiny_model)
    queries = []
    for pattern, texts in ((CALL, CALLS), (None, TEXTS)):
        dfa = regex_to_dfa(pattern) if pattern else schema_to_dfa(WEATHER)
        index = TokenIndex(dfa, tiny_model.vocabulary)
        for text in texts:
            for cut in range(len(text) + 1):
                at = Constraint(index)
                at.advance_bytes(text[:cut])
                queries.append(at)
    for q in rng.permutation(len(queries)):
        constraint = queries[q]
        left, budget_aware = int(rng.integers(0, 30)), bool(rng.random() < 0.7)
        ids, after = tokens.jump(constraint, left, budget_aware)
        assert (ids, (after.state, after.done)) == reference_jump(
            tokens, constraint, left, budget_aware
        )
        assert after is constraint or after.index is constraint.index


def run(model, requests, batch_size=4, masked_head=True) -> tuple[list, GenerationStats]:
    stats = GenerationStats()
    return generate(model, requests, batch_size, stats, masked_head=masked_head), stats


@pytest.mark.parametrize("jump", [True, False])
def test_every_text_the_grammar_allows_stays_writable(tiny_model, jump):
    """A model that wants to write a valid answer writes exactly it, forced text or not."""
    eos = tiny_model.eos_ids[0]
    model = TargetModel(tiny_model.vocabulary, tiny_model.tokenizer, TEXTS, eos)
    index = TokenIndex(schema_to_dfa(WEATHER), tiny_model.vocabulary)
    requests = [
        GenerationRequest([k], 200, GREEDY, constraint=Constraint(index), jump_forward=jump)
        for k in range(len(TEXTS))
    ]
    results, stats = run(model, requests)
    assert [r.text.encode("utf-8") for r in results] == TEXTS
    for result in results:
        jsonschema.validate(json.loads(result.text), WEATHER)
        assert result.finish_reason == "stop"
        assert len(result.token_ids) == len(result.logprobs) == result.completion_tokens
    if jump:  # the forced keys, the const and `{"location":"` went in chunks
        assert stats.forced_tokens > 0 and model.prefill_passes > 1
    else:
        assert stats.forced_tokens == 0 and model.prefill_passes == 1


def test_jump_forward_after_a_trigger_and_at_the_start(tiny_model):
    eos = tiny_model.eos_ids[0]
    targets = [
        b'Sure <tool_call>{"name":"get_weather","arguments":{"city":"hello","days":3}}</tool_call>',
        b'{"name":"get_weather","arguments":{"city":"lille","days":0}}</tool_call>',
    ]
    model = TargetModel(tiny_model.vocabulary, tiny_model.tokenizer, targets, eos)
    index = TokenIndex(regex_to_dfa(CALL), tiny_model.vocabulary)
    requests = [
        GenerationRequest([0], 200, GREEDY, constraint=Constraint(index), trigger="<tool_call>"),
        GenerationRequest([1], 200, GREEDY, constraint=Constraint(index)),
    ]
    results, stats = run(model, requests)
    assert [r.text.encode("utf-8") for r in results] == targets
    # the second answer's `{"name":"get_weather","arguments":{"city":"` went with its prompt
    # (all of it: a letter, the only byte allowed next, starts a pre-token of its own)
    first = next(ids for ids in model.prefilled if ids[0] == 1)
    assert tiny_model.vocabulary.decode(first[1:]) == b'{"name":"get_weather","arguments":{"city":"'
    assert stats.forced_tokens >= 2 * len(first[1:])


def test_a_random_model_under_tight_budgets_writes_valid_answers(tiny_model):
    """The real forward pass (chunks at a slot's position), sampling at temperature 1: every
    answer is complete, valid, and within max_tokens, with and without jump-forward."""
    index = TokenIndex(schema_to_dfa(WEATHER), tiny_model.vocabulary)
    prompt = tiny_model.tokenizer.encode("Weather?")
    least = Constraint(index).tokens_to_complete()
    params = SamplingParams(temperature=1.0)
    for jump in (True, False):
        requests = [
            GenerationRequest(
                prompt, least + extra, params, seed, (), Constraint(index), jump_forward=jump
            )  # fmt: skip
            for seed in range(6)
            for extra in (0, 3, 40)
        ]
        results, stats = run(tiny_model, requests, batch_size=5)
        for request, result in zip(requests, results, strict=True):
            assert result.finish_reason == "stop", result
            assert result.completion_tokens <= request.max_tokens
            jsonschema.validate(json.loads(result.text), WEATHER)
        assert (stats.forced_tokens > 0) == jump


def test_jump_forward_off_is_the_engine_without_it(tiny_model):
    """Switched off, a request runs as on a model whose engine cannot jump (no tokenizer): the
    same tokens, logprobs and decode passes. (Asking for top_logprobs keeps it on:
    test_forced_logprobs.py.) The masked LM head is off in every run."""

    class NoTokenizer:
        def __init__(self, model):
            self.model = model

        def __getattr__(self, name):
            if name == "tokenizer":
                raise AttributeError(name)
            return getattr(self.model, name)

    index = TokenIndex(schema_to_dfa(WEATHER), tiny_model.vocabulary)
    prompt = tiny_model.tokenizer.encode("Weather?")
    params = SamplingParams(temperature=0.8)

    def requests(**switch):
        return [
            GenerationRequest(prompt, 60, params, seed, (), Constraint(index), **switch)
            for seed in range(4)
        ]

    reference, stats = run(NoTokenizer(tiny_model), requests(), masked_head=False)
    assert stats.forced_tokens == 0
    results, stats = run(tiny_model, requests(jump_forward=False), masked_head=False)
    assert stats.forced_tokens == 0
    assert [(r.token_ids, r.logprobs) for r in results] == [
        (r.token_ids, r.logprobs) for r in reference
    ]
    jumped, stats = run(tiny_model, requests())
    assert stats.forced_tokens > 0
    assert all(0.0 in r.logprobs for r in jumped)


def test_a_generator_on_a_model_without_a_tokenizer_never_jumps():
    from fake_model import FakeModel, index_of

    generator = Generator(FakeModel(), 2)
    generator.submit(GenerationRequest([1, 2], 100, GREEDY, 0, (), Constraint(index_of(WEATHER))))
    while generator.has_work:
        generator.step()
    assert generator.stats.forced_tokens == 0


# --- the real tokenizer and model ---------------------------------------------------------------


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(forced=texts, rest=texts)
def test_committed_tokens_are_smollm2s_own_whatever_follows(model, forced, rest):
    check_prefix_property(model, forced, rest)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(forced=texts, follow=follows)
def test_committed_tokens_are_smollm2s_own_whatever_the_grammar_lets_follow(model, forced, follow):
    rest, others = follow
    check_prefix_property(model, forced, rest, follow_bytes(rest, others))


def bench_targets(root, limit: int):
    """(schema, compact JSON text of a valid instance) from JSONSchemaBench files, for schemas
    corral compiles and instances in the language (members in the schema's order)."""
    out = []
    for path in sorted((root / "jsonschemabench").glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            item = json.loads(line)
            for test in item.get("tests", ()):
                if not test["valid"]:
                    continue
                text = json.dumps(test["data"], separators=(",", ":"), ensure_ascii=False)
                try:
                    dfa = schema_to_dfa(item["schema"])
                except Exception:
                    break
                if dfa.matches(text.encode("utf-8")):
                    out.append((item["schema"], dfa, text.encode("utf-8")))
                    break
            if len(out) >= limit:
                return out
    return out


@pytest.mark.slow
def test_jsonschemabench_answers_stay_writable_with_smollm2s_tokens(model, sample_data):
    """Valid instances of JSONSchemaBench schemas, written by a model that wants them, come out
    exactly, through the real tokenizer's forced tokens."""
    cases = bench_targets(sample_data, 40)
    assert len(cases) >= 20
    targets = [text for _, _, text in cases]
    vocabulary = model.vocabulary
    target_model = TargetModel(vocabulary, model.tokenizer, targets, model.eos_ids[0])
    requests = [
        GenerationRequest([k], 2000, GREEDY, constraint=Constraint(TokenIndex(dfa, vocabulary)))
        for k, (_, dfa, _) in enumerate(cases)
    ]
    results, stats = run(target_model, requests, batch_size=8)
    assert [r.text.encode("utf-8") for r in results] == targets
    assert stats.forced_tokens > len(cases)
