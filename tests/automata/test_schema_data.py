"""The schema compiler against third-party data (docs/design.md section 3): the official
JSON-Schema-Test-Suite (draft 2020-12) and the schemas of JSONSchemaBench and BFCL.

Soundness: every string sampled from a compiled schema's DFA parses and validates with
`jsonschema` (the validator class its `$schema` names, default 2020-12, formats checked). Each
check runs over the sample shipped in tests/data and over the full data when it is present
(tests/conftest.py). The default run takes all of the sample and a deterministic slice of the full
data; the whole full data is `slow`.
"""

from __future__ import annotations

import collections
import concurrent.futures
import hashlib
import json
import multiprocessing
import os
import signal
import time
from pathlib import Path

import jsonschema
import numpy as np
import pytest
from corral.automata import ConstrainError, Dfa, Limits, SchemaError, dumps, schema_to_dfa
from corral.automata import schema as schema_module
from corral.automata.schema.keywords import TYPE_OF_KEYWORD
from jsonschema.validators import validator_for

AUTOMATA_SOURCES = Path(schema_module.__file__).resolve().parent.parent

SUITE_FILES = [
    "type", "enum", "const", "properties", "required", "items", "minItems", "maxItems", "anyOf",
    "additionalProperties", "minLength", "maxLength", "pattern", "minimum", "maximum",
    "exclusiveMinimum", "exclusiveMaximum", "oneOf", "allOf", "ref", "defs", "prefixItems",
    "format",
]  # fmt: skip
FORMAT_FILES = [
    "date-time", "date", "time", "uuid", "email", "ipv4", "uri", "duration", "hostname",
    "idn-hostname", "ipv6",
]  # fmt: skip
# The files tests/data/make_sample.py copies into the sample.
SAMPLE_SUITE_FILES = [
    "type", "enum", "properties", "required", "items", "anyOf", "additionalProperties", "pattern",
    "minimum",
]  # fmt: skip
SAMPLE_FORMAT_FILES = ["uuid", "email"]
SUITE = {"full": (SUITE_FILES, FORMAT_FILES), "sample": (SAMPLE_SUITE_FILES, SAMPLE_FORMAT_FILES)}
# Every n-th schema a default-run check takes, per data set (the sample is itself a slice).
EVERY = {"sample": 1, "full": 60}
REFUSAL_EVERY = {"sample": 1, "full": 40}
SAMPLES = 25
# Per-schema caps for the data runs: a schema past them counts as refused, not as a failure.
DATA_LIMITS = Limits(max_nfa_states=60_000, max_dfa_states=4_000)
SECONDS_PER_SCHEMA = 4.0


def validator(schema):
    cls = validator_for(schema, default=jsonschema.Draft202012Validator)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


# ---------------------------------------------------------------------------------------------
# JSON-Schema-Test-Suite


def _property_orders(schema) -> list[list[str]]:
    """Every `properties` key list in the schema."""
    out = []

    def walk(node):
        if isinstance(node, dict):
            if isinstance(node.get("properties"), dict):
                out.append(list(node["properties"]))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(schema)
    return out


def outside_by_design(schema, value) -> str | None:
    """Why a valid instance lies outside corral's language by design (docs/design.md section 3 and
    schema.py's documented sub-languages), or None when it should be accepted."""
    orders = _property_orders(schema)
    reasons = []

    def walk(node, depth):
        if isinstance(node, str) and any(ord(c) < 0x20 for c in node):
            reasons.append("control character (written as \\u escape)")
        if isinstance(node, dict):
            keys = list(node)
            fits = [o for o in orders if all(k in o for k in keys)]
            if not fits:
                reasons.append("member not listed in properties")
            elif not any(
                [o.index(k) for k in keys] == sorted(o.index(k) for k in keys) for o in fits
            ):
                reasons.append("members not in schema order")
            for v in node.values():
                walk(v, depth + 1)
        if isinstance(node, list):
            for v in node:
                walk(v, depth + 1)

    walk(value, 0)
    if _has_key(schema, "format") and (not isinstance(value, str) or "type" not in schema):
        reasons.append("format: strict regex (and a string), stricter than the validator")
    if _has_key(schema, "enum") or _has_key(schema, "const"):
        reasons.append("enum/const: a value is written only as the schema writes it")
    for sub in _subschemas(schema):
        if "type" in sub:
            continue
        implied = {TYPE_OF_KEYWORD[k] for k in sub if k in TYPE_OF_KEYWORD}
        if implied and any(_kind(v) not in implied for v in _all_values(value)):
            reasons.append("untyped schema: only the types its keywords imply")
            break
    if not reasons and isinstance(value, (list, dict)) and _depth(value) > 3:
        reasons.append("any-value depth")
    return reasons[0] if reasons else None


def _kind(value) -> str:
    if isinstance(value, bool) or value is None:
        return "literal"
    if isinstance(value, (int, float)):
        return "number"
    return {str: "string", list: "array", dict: "object"}[type(value)]


def _all_values(value):
    yield value
    children = (
        value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
    )
    for child in children:
        yield from _all_values(child)


def _subschemas(schema):
    if isinstance(schema, dict):
        yield schema
        for value in schema.values():
            yield from _subschemas(value)
    elif isinstance(schema, list):
        for value in schema:
            yield from _subschemas(value)


def _has_key(schema, key: str) -> bool:
    return any(key in sub for sub in _subschemas(schema))


def _depth(value) -> int:
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


def _suite_groups(data: Path, names: list[str], formats: list[str]):
    root = data / "json-schema-test-suite" / "draft2020-12"
    for name in names:
        for group in json.loads((root / f"{name}.json").read_text(encoding="utf-8")):
            yield name, group
    for name in formats:
        path = root / "optional" / "format" / f"{name}.json"
        for group in json.loads(path.read_text(encoding="utf-8")):
            yield f"format/{name}", group


# Per data set: at least this many groups compiled and valid instances accepted, and exactly these
# valid instances outside the language by design.
SUITE_EXPECTED = {
    "full": (
        164,
        282,
        {
            "format: strict regex (and a string), stricter than the validator": 213,
            "member not listed in properties": 47,
            "untyped schema: only the types its keywords imply": 30,
        },
    ),
    "sample": (
        67,
        105,
        {
            "untyped schema: only the types its keywords imply": 21,
            "member not listed in properties": 18,
            "format: strict regex (and a string), stricter than the validator": 15,
        },
    ),
}


def test_json_schema_test_suite(data_set):
    compiled = refused = accepted_valid = 0
    wrongly_accepted = []
    wrongly_refused = []
    outside = collections.Counter()
    refusals = collections.Counter()
    for name, group in _suite_groups(data_set.root, *SUITE[data_set.name]):
        schema = group["schema"]
        try:
            dfa = schema_to_dfa(schema)
        except ConstrainError as error:
            refused += 1
            refusals[getattr(error, "keyword", None) or type(error).__name__] += 1
            continue
        compiled += 1
        for test in group["tests"]:
            try:
                text = dumps(test["data"])
            except ConstrainError:
                continue
            accepted = dfa.matches(text.encode("utf-8"))
            if accepted and not test["valid"]:
                wrongly_accepted.append((name, group["description"], test["description"], text))
            elif test["valid"] and accepted:
                accepted_valid += 1
            elif test["valid"]:
                reason = outside_by_design(schema, test["data"])
                if reason is None:
                    wrongly_refused.append((name, group["description"], test["description"], text))
                else:
                    outside[reason] += 1
    print(f"\nsuite groups: compiled {compiled}, refused {refused} {dict(refusals)}")
    print(f"valid instances accepted: {accepted_valid}; outside the language by design:")
    for reason, count in outside.most_common():
        print(f"  {count:4}  {reason}")
    assert not wrongly_accepted, wrongly_accepted
    assert not wrongly_refused, wrongly_refused
    least_compiled, least_accepted, expected_outside = SUITE_EXPECTED[data_set.name]
    assert compiled >= least_compiled and accepted_valid >= least_accepted
    assert dict(outside) == expected_outside


# ---------------------------------------------------------------------------------------------
# Soundness over JSONSchemaBench and BFCL

BFCL_TYPES = {"dict": "object", "float": "number", "tuple": "array", "any": "string"}


def bfcl_to_json_schema(node):
    """Gorilla's type names to JSON Schema (GORILLA_TO_OPENAPI): dict->object, float->number,
    tuple->array, any->string; the `optional` key is dropped (a non-keyword anyway)."""
    if isinstance(node, dict):
        out = {}
        for key, value in node.items():
            if key == "type" and isinstance(value, str):
                out[key] = BFCL_TYPES.get(value, value)
            elif key == "optional":
                continue
            else:
                out[key] = bfcl_to_json_schema(value)
        return out
    if isinstance(node, list):
        return [bfcl_to_json_schema(v) for v in node]
    return node


def data_schemas(data: Path):
    """(name, schema) for every JSONSchemaBench schema and every BFCL function's parameters in the
    data folder `data`. Raises AssertionError when either part is missing."""
    bench = sorted((data / "jsonschemabench").glob("*.jsonl"))
    bfcl = sorted((data / "bfcl").glob("BFCL_*.jsonl"))
    assert bench and bfcl, f"no JSONSchemaBench or no BFCL files under {data}"
    for path in bench:
        for line in path.open(encoding="utf-8"):
            record = json.loads(line)
            yield f"{path.stem}/{record['id']}", record["schema"]
    for path in bfcl:
        for line in path.open(encoding="utf-8"):
            record = json.loads(line)
            for function in record["function"]:
                schema = bfcl_to_json_schema(function["parameters"])
                yield f"{path.stem}/{record['id']}/{function['name']}", schema


class _Timeout(Exception):
    pass


_ALARMS = [0]  # SIGALRMs taken: one raised inside a gc callback is swallowed ("Exception ignored")


def _raise_timeout(signum, frame):
    _ALARMS[0] += 1
    raise _Timeout()


def sampler(dfa: Dfa):
    """`Dfa.sample`'s walk with the distances to acceptance and each state's live bytes computed
    once per DFA."""
    dist = dfa.distance_to_accept().tolist()
    rows = dfa.trans.tolist()
    accept = dfa.accept.tolist()
    live_of: dict[int, tuple[list[int], list[int]]] = {}

    def live(state: int) -> tuple[list[int], list[int]]:
        if state not in live_of:
            row = rows[state]
            every = [b for b in range(256) if row[b] >= 0]
            closer = [b for b in every if dist[row[b]] < dist[state]]
            live_of[state] = (every, closer or every)
        return live_of[state]

    def sample(rng: np.random.Generator, stop_probability: float = 0.3) -> bytes:
        state, out = 0, bytearray()
        while True:
            every, closer = live(state)
            if accept[state] and (not every or rng.random() < stop_probability):
                return bytes(out)
            choices = closer if len(out) > 64 else every
            b = choices[int(rng.integers(len(choices)))]
            out.append(b)
            state = rows[state][b]

    return sample


class DfaCache:
    """Compiled DFAs on disk (pytest's cache folder), keyed by the schema text and the source of
    every module of `corral.automata` (the schema compiler and the regex pipeline under it), so
    reruns skip compilation. A refusal is cached as its message."""

    def __init__(self, folder: Path | None):
        self.folder = folder
        source = (
            b"".join(path.read_bytes() for path in sorted(AUTOMATA_SOURCES.glob("**/*.py")))
            + repr(DATA_LIMITS).encode()
        )
        self.version = hashlib.sha256(source).hexdigest()[:16]

    def compile(self, schema) -> Dfa | str:
        key = hashlib.sha256((self.version + json.dumps(schema)).encode()).hexdigest()
        path = self.folder / f"{key}.npz" if self.folder else None
        if path is not None and path.exists():
            stored = np.load(path)
            if "refused" in stored:
                return str(stored["refused"])
            return Dfa(stored["trans"], stored["accept"])
        try:
            alarms = _ALARMS[0]
            signal.setitimer(signal.ITIMER_REAL, SECONDS_PER_SCHEMA)
            try:
                out = schema_to_dfa(schema, DATA_LIMITS)
            finally:  # before handling the error: an alarm there would escape
                signal.setitimer(signal.ITIMER_REAL, 0)
            if _ALARMS[0] != alarms:  # the alarm came, but in a gc callback, which swallowed it
                raise _Timeout()
        except (ConstrainError, _Timeout) as error:
            out = f"{type(error).__name__}: {error}"
        if path is not None:  # whole or not at all: another worker may read the same key
            temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp")
            with open(temporary, "wb") as file:
                if isinstance(out, str):
                    np.savez(file, refused=np.array(out))
                else:
                    np.savez(file, trans=out.trans, accept=out.accept)
            os.replace(temporary, path)
        return out


def check_sound(
    schemas, cache: DfaCache, samples: int = SAMPLES, workers: int = 1
) -> tuple[int, int, list]:
    """Compile each schema (capped), sample, validate. Returns (compiled, refused, failures).

    With `workers` > 1 the schemas are cut into that many interleaved parts, each checked in a
    process of its own (spawned: the parent's Numba and BLAS threads stay out of the children),
    whose counts and failures are summed: the same checks, on every core."""
    schemas = list(schemas)
    if workers <= 1 or len(schemas) < 2:
        return _check_part(schemas, cache, samples)
    parts = [schemas[i::workers] for i in range(workers)]
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(len(parts), mp_context=context) as pool:
        results = list(pool.map(_check_part, parts, [cache] * len(parts), [samples] * len(parts)))
    compiled = sum(result[0] for result in results)
    refused = sum(result[1] for result in results)
    return compiled, refused, [failure for result in results for failure in result[2]]


def _check_part(schemas, cache: DfaCache, samples: int) -> tuple[int, int, list]:
    """`check_sound` over `schemas` in this process."""
    compiled = refused = 0
    failures = []
    previous = signal.signal(signal.SIGALRM, _raise_timeout)
    try:
        for name, schema in schemas:
            dfa = cache.compile(schema)
            if isinstance(dfa, str):
                refused += 1
                continue
            compiled += 1
            check = validator(schema)
            rng = np.random.default_rng(len(name))
            sample = sampler(dfa)
            texts = dict.fromkeys(sample(rng).decode("utf-8") for _ in range(samples))
            for text in texts:  # each distinct sample once
                try:
                    value = json.loads(text)
                except ValueError as error:
                    failures.append((name, text[:300], f"not JSON: {error}"))
                    break
                error = next(iter(check.iter_errors(value)), None)
                if error is not None:
                    failures.append((name, text[:300], error.message[:300]))
                    break
    finally:
        signal.signal(signal.SIGALRM, previous)
    return compiled, refused, failures


@pytest.fixture(scope="module")
def dfa_cache(request) -> DfaCache:
    cache = getattr(request.config, "cache", None)  # None under `-p no:cacheprovider`
    return DfaCache(cache.mkdir("corral-schema-dfas") if cache else None)


def test_data_slice_is_sound(data_set, dfa_cache):
    """A deterministic slice of the data in the default run: every schema of the sample, every
    60th of the full data."""
    every = EVERY[data_set.name]
    schemas = [s for i, s in enumerate(data_schemas(data_set.root)) if i % every == 0]
    start = time.perf_counter()
    compiled, refused, failures = check_sound(schemas, dfa_cache)
    seconds = time.perf_counter() - start
    print(f"\n{data_set.name} slice: {compiled} compiled, {refused} refused, {seconds:.0f}s")
    assert not failures, failures
    assert compiled >= 0.5 * len(schemas)


@pytest.mark.slow
def test_all_data_is_sound(full_data, dfa_cache):
    """Every schema of JSONSchemaBench's dev part and every BFCL function: about 8,400 compile,
    25 samples each, on every core (`check_sound`'s workers: pytest runs one test at a time, and
    this one alone took 9.4 minutes of a 25-minute suite on one core of a 2-core Zen 3 with an
    empty cache; compiled DFAs are cached in pytest's cache folder, so reruns skip compilation)."""
    start = time.perf_counter()
    workers = len(os.sched_getaffinity(0))
    schemas = list(data_schemas(full_data))
    compiled, refused, failures = check_sound(schemas, dfa_cache, workers=workers)
    print(f"\nall data: {compiled} compiled, {refused} refused, {time.perf_counter() - start:.0f}s")
    assert not failures, failures[:20]


# Known wrong pointers, per data set: refusals that name a path that does not exist in the schema.
# An error inside merged subschemas (allOf parts, $ref targets, a oneOf or anyOf branch with its
# parent's keywords, a rewritten conditional) carries a path of the merged result; the public
# entry points report it at the deepest node of the document on that path
# (`corral.automata.schema.compiler.resolvable_prefix`), so none is left.
UNRESOLVED_POINTERS = {"sample": set(), "full": set()}
_MISSING = object()


def _node_at(schema, pointer: str):
    """The node a JSON pointer names in `schema`, or _MISSING when it names none."""
    node = schema
    for token in pointer.split("/")[1:]:
        token = token.replace("~1", "/").replace("~0", "~")
        try:
            node = node[int(token)] if isinstance(node, list) else node[token]
        except (KeyError, IndexError, ValueError, TypeError):
            return _MISSING
    return node


def test_refusals_in_data_name_a_keyword_and_pointer(data_set):
    """Every SchemaError raised on real schemas carries a keyword and a resolvable pointer (every
    schema of the sample, every 40th of the full data), but for the known cases above."""
    every = REFUSAL_EVERY[data_set.name]
    seen = 0
    unresolved = set()
    for i, (name, schema) in enumerate(data_schemas(data_set.root)):
        if i % every:
            continue
        try:
            schema_to_dfa(schema, Limits(max_nfa_states=20_000, max_dfa_states=1_000))
        except SchemaError as error:
            seen += 1
            node = _node_at(schema, error.pointer)
            if node is _MISSING:
                unresolved.add(name)
            else:
                assert isinstance(node, (dict, bool, list)), (name, error.pointer)
        except ConstrainError:
            pass
    assert seen > 0
    assert unresolved == UNRESOLVED_POINTERS[data_set.name]
