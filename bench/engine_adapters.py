"""One interface over four constrained-decoding engines: corral, outlines-core, XGrammar and
llguidance, each given the SmolLM2 vocabulary (49,152 ids, EOS `<|im_end|>` = 2, the 17 control
tokens never allowed inside text) and a regex or a JSON Schema (docs/design.md sections 2-4).

Languages are aligned where the engine allows it (see bench/README.md for where they are not):
compact JSON with no whitespace and separators `,` and `:` (outlines-core `whitespace_pattern=""`,
XGrammar `any_whitespace=False, separators=(",", ":")`, llguidance `whitespace_flexible=False`);
no members beyond the schema's (XGrammar `strict_mode=True`; llguidance has no such switch, so
its adapter writes `additionalProperties: false` into every object subschema that leaves it
unsaid).

    engine = make_engine("xgrammar", vocabulary, tokenizer_json)
    compiled = engine.compile("schema", {...})      # raises Refused: the engine said no
    session = engine.start(compiled)
    session.fill()                                  # packed uint32 mask into session.buffer
    session.advance(token)                          # False when the engine refuses the token
    engine.forget()             # drop cross-grammar caches, warm up again (before a repeat)

Masks are `uint32[ceil(V / 32)]`, bit `t % 32` of word `t // 32` is token t (all four engines
write this layout natively).
"""

from __future__ import annotations

import json

import numpy as np

ENGINES = ("corral", "corral-lazy", "outlines-core", "xgrammar", "llguidance")
DEFAULT_ENGINES = ("corral", "outlines-core", "xgrammar", "llguidance")
"""What `bench/engines.py` runs unless told: `corral-lazy` is asked for by name."""


class Refused(Exception):
    """The engine refused the grammar (unsupported keyword, bad regex, its own limit)."""


def allowed_ids(buffer: np.ndarray, size: int) -> np.ndarray:
    """The allowed token ids (int64, ascending) of a packed mask `uint32[ceil(size / 32)]`."""
    bits = np.unpackbits(np.ascontiguousarray(buffer).view(np.uint8), bitorder="little")
    return np.flatnonzero(bits[:size])


def forbid_extra_members(schema):
    """A copy of `schema` where every object subschema with `properties` and no
    `additionalProperties` gets `additionalProperties: false` (llguidance's alignment)."""
    if isinstance(schema, list):
        return [forbid_extra_members(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: forbid_extra_members(value) for key, value in schema.items()}
    if isinstance(schema.get("properties"), dict) and "additionalProperties" not in schema:
        out["additionalProperties"] = False
    return out


class _Session:
    """A matcher at one place of one grammar; `buffer` holds the last mask `fill` wrote."""

    def __init__(self, n_words: int):
        self.buffer = np.zeros(n_words, dtype=np.uint32)


class CorralEngine:
    """corral: schema or regex -> Dfa -> TokenIndex (auto mode); the session is a DFA state, and
    `fill` copies the state's mask into the session's buffer (the other engines write theirs)."""

    name = "corral"

    def __init__(self, vocabulary, tokenizer_json: str):
        self.vocabulary = vocabulary
        self.eos = set(vocabulary.eos_ids)
        from corral.automata import regex_to_dfa
        from corral.kernels import TokenIndex

        # A first visit's walk kernel (visit and lazy modes; the warm-up's indexes are eager)
        # is loaded here, before any timing, as a server loads it once.
        TokenIndex(regex_to_dfa("(ab)+"), vocabulary, mode="visit").mask(0)

    def compile(self, kind: str, source):
        from corral.automata import ConstrainError

        try:
            return self.index(kind, source)
        except (ConstrainError, RecursionError) as error:
            raise Refused(f"{type(error).__name__}: {error}") from error

    def index(self, kind: str, source):
        """The grammar's `TokenIndex` (raises corral's refusals); `self.narrowed` tells whether
        the schema was compiled with narrowed bounds (docs/subsets.md)."""
        from corral.automata import compile_schema_dfa, regex_to_dfa
        from corral.kernels import TokenIndex

        self.narrowed = False
        if kind == "regex":
            return TokenIndex(regex_to_dfa(source), self.vocabulary)
        compiled = compile_schema_dfa(source)
        self.narrowed = compiled.narrowed
        return TokenIndex(compiled.result, self.vocabulary)

    def forget(self) -> None:
        """Drop every cross-grammar cache that a repeat of the same grammar could hit, then redo
        the worker's warm-up so process-wide one-time set-up stays paid.

        corral's one such cache is the parser's memo of regex patterns (`_parse_cached`, per
        process); the warm-up grammars memoize again the JSON primitives they use, as in a warm
        server. Per-vocabulary tables and JIT code are one-time set-up and stay."""
        import importlib

        from engine_workers import warm_up

        # `corral.automata.parse` as an attribute is the function `parse`; the module by name
        importlib.import_module("corral.automata.parse")._parse_cached.cache_clear()
        warm_up(self)

    def start(self, index):
        session = _Session(self.vocabulary.n_words)
        session.state = 0

        fill_mask, buffer = index.fill_mask, session.buffer

        def fill():  # written into the caller's buffer, as the other engines do
            fill_mask(session.state, buffer)

        def advance(token: int) -> bool:
            if token in self.eos:
                return bool(index.is_accepting(session.state))
            state = index.next_state(session.state, token)
            if state < 0:
                return False
            session.state = int(state)
            return True

        session.fill, session.advance = fill, advance
        return session


class CorralLazyEngine(CorralEngine):
    """corral with its DFA made on demand: schema or regex -> `LazyDfa` -> `LazyTokenIndex`
    (`corral.kernels.masks.lazy_index`), whose masks equal the `TokenIndex`'s of the canonical DFA.
    Only the states the walks reach are made, as llguidance's lexer does; the DFA-state limit
    is met as states are made, not at compile. The generation engine does not use it (its
    budget needs every state)."""

    name = "corral-lazy"

    def __init__(self, vocabulary, tokenizer_json: str):
        super().__init__(vocabulary, tokenizer_json)
        from corral.automata.lazy import lazy_regex_dfa
        from corral.kernels.masks.lazy_index import LazyTokenIndex

        # The worker's warm-up masks once; a session's second new mask finishes the DFA
        # (`LazyTokenIndex.finish`), whose kernel is loaded here, before any timing.
        LazyTokenIndex(lazy_regex_dfa("(ab)+"), vocabulary, lazy_masks=0).mask(0)

    def index(self, kind: str, source):
        """The grammar's `LazyTokenIndex` (raises corral's refusals)."""
        from corral.automata import lazy_regex_dfa, lazy_schema_dfa
        from corral.kernels import LazyTokenIndex

        dfa = lazy_regex_dfa(source) if kind == "regex" else lazy_schema_dfa(source)
        return LazyTokenIndex(dfa, self.vocabulary)


class OutlinesEngine:
    """outlines-core: its own schema -> regex (`whitespace_pattern=""`), then `Index`."""

    name = "outlines-core"

    def __init__(self, vocabulary, tokenizer_json: str):
        import outlines_core

        self.module = outlines_core
        self.n_words = vocabulary.n_words
        (self.eos,) = vocabulary.eos_ids[:1]
        by_bytes: dict[bytes, list[int]] = {}
        for token, data in enumerate(vocabulary.tokens):
            if data and token not in vocabulary.eos_ids:
                by_bytes.setdefault(data, []).append(token)
        self.vocabulary = outlines_core.Vocabulary(self.eos, by_bytes)

    def compile(self, kind: str, source):
        from outlines_core.json_schema import build_regex_from_schema

        try:
            regex = source
            if kind == "schema":
                regex = build_regex_from_schema(json.dumps(source), whitespace_pattern="")
            return self.module.Index(regex, self.vocabulary)
        except (ValueError, TypeError, RuntimeError) as error:
            raise Refused(f"{type(error).__name__}: {str(error)[:300]}") from error

    def forget(self) -> None:
        """Nothing to drop: outlines-core documents no cache across grammars (each `Index` is
        built from its regex and the vocabulary)."""

    def start(self, index):
        session = _Session(self.n_words)
        guide = self.module.Guide(index)
        buffer = np.zeros(self.n_words, dtype=np.int32)
        session.buffer = buffer.view(np.uint32)

        def fill():
            guide.write_mask_into(buffer.ctypes.data, buffer.size, 4)

        def advance(token: int) -> bool:
            if token == self.eos:
                return bool(guide.is_finished())
            try:
                guide.advance(token)
            except ValueError:
                return False
            return True

        session.fill, session.advance = fill, advance
        return session


class XGrammarEngine:
    """XGrammar: `compile_json_schema(any_whitespace=False, separators=(",", ":"),
    strict_mode=True)` or `compile_regex`, one compile thread, no compile cache."""

    name = "xgrammar"

    def __init__(self, vocabulary, tokenizer_json: str, threads: int = 1):
        import xgrammar

        self.module = xgrammar
        self.n_words = vocabulary.n_words
        info = xgrammar.TokenizerInfo(
            [data if data is not None else b"" for data in vocabulary.tokens],
            xgrammar.VocabType.RAW,
            vocab_size=vocabulary.size,
            stop_token_ids=list(vocabulary.eos_ids),
        )
        self.compiler = xgrammar.GrammarCompiler(info, max_threads=threads, cache_enabled=False)

    def compile(self, kind: str, source):
        try:
            if kind == "regex":
                return self.compiler.compile_regex(source)
            return self.compiler.compile_json_schema(
                json.dumps(source), any_whitespace=False, separators=(",", ":"), strict_mode=True
            )
        except (RuntimeError, ValueError, TypeError) as error:
            raise Refused(f"{type(error).__name__}: {str(error)[:300]}") from error

    def forget(self) -> None:
        """Clear the compiler's cache of compiled grammars (`GrammarCompiler.clear_cache`), the
        one XGrammar documents; it is disabled here (`cache_enabled=False`), so this drops
        nothing and no warm-up is redone, but a compiler built with it on would not answer a
        repeat from it."""
        self.compiler.clear_cache()

    def start(self, compiled):
        session = _Session(self.n_words)
        matcher = self.module.GrammarMatcher(compiled)
        buffer = np.zeros((1, self.n_words), dtype=np.int32)
        session.buffer = buffer[0].view(np.uint32)
        session.fill = lambda: matcher.fill_next_token_bitmask(buffer)
        session.advance = lambda token: bool(matcher.accept_token(token))
        return session


class LLGuidanceEngine:
    """llguidance: `LLMatcher` over the model's tokenizer.json, JSON with
    `whitespace_flexible=False` and separators `,` `:`, extra members forbidden."""

    name = "llguidance"

    def __init__(self, vocabulary, tokenizer_json: str):
        import llguidance

        self.module = llguidance
        self.n_words = vocabulary.n_words
        self.tokenizer = llguidance.LLTokenizer(
            tokenizer_json, n_vocab=vocabulary.size, eos_token=list(vocabulary.eos_ids)[0]
        )

    def compile(self, kind: str, source):
        matcher_class = self.module.LLMatcher
        try:
            if kind == "regex":
                grammar = matcher_class.grammar_from_regex(source)
            else:
                options = {
                    "whitespace_flexible": False,
                    "item_separator": ",",
                    "key_separator": ":",
                }
                grammar = matcher_class.grammar_from_json_schema(
                    forbid_extra_members(source), overrides=options
                )
            matcher = matcher_class(self.tokenizer, grammar, log_level=0)
        except (ValueError, TypeError, RuntimeError) as error:
            raise Refused(f"{type(error).__name__}: {str(error)[:300]}") from error
        if matcher.is_error():
            raise Refused(matcher.get_error()[:300])
        return matcher

    def forget(self) -> None:
        """Nothing to drop: llguidance documents no cache across grammars (the tokenizer's
        token trie is per-tokenizer set-up, paid once, as in a server)."""

    def start(self, pristine):
        session = _Session(self.n_words)
        matcher = pristine.deep_copy()
        buffer = np.zeros(self.n_words, dtype=np.int32)
        session.buffer = buffer.view(np.uint32)

        def fill():
            matcher.unsafe_compute_mask_ptr(buffer.ctypes.data, buffer.nbytes)

        def advance(token: int) -> bool:
            return bool(matcher.consume_token(token)) and not matcher.is_error()

        session.fill, session.advance = fill, advance
        return session


def make_engine(name: str, vocabulary, tokenizer_json: str, threads: int = 1):
    """The engine called `name` (one of ENGINES) over the vocabulary.

    Args:
        vocabulary: a `corral.kernels.Vocabulary` (the SmolLM2 one: V = 49,152, eos_ids (2,)).
        tokenizer_json: the text of the model's tokenizer.json (llguidance reads it).
        threads: XGrammar's compile threads.

    Raises:
        ValueError: an unknown name. ImportError: the engine is not installed (`.[bench]`).
    """
    if name == "corral":
        return CorralEngine(vocabulary, tokenizer_json)
    if name == "corral-lazy":
        return CorralLazyEngine(vocabulary, tokenizer_json)
    if name == "outlines-core":
        return OutlinesEngine(vocabulary, tokenizer_json)
    if name == "xgrammar":
        return XGrammarEngine(vocabulary, tokenizer_json, threads)
    if name == "llguidance":
        return LLGuidanceEngine(vocabulary, tokenizer_json)
    raise ValueError(f"unknown engine {name!r}; choose from {', '.join(ENGINES)}")
