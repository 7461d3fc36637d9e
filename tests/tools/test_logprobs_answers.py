"""Asking for logprobs changes no answer, and `usage.completion_tokens` counts the tokens
`logprobs.content` lists (issue 33, item 8), through the Batch path: the stand-in model (fast,
with jump-forward: its tokenizer spells bytes) and the real SmolLM2 (slow)."""

import io
import json

import pytest
from corral.tools.batch import run_batch
from corral.tools.completions import Completions
from hypothesis import given, settings
from hypothesis import strategies as st
from stand_in_model import StandInModel

SCHEMAS = [
    {
        "type": "object",
        "properties": {
            "city": {"type": "string", "maxLength": 20},
            "country": {"enum": ["JP", "US", "IN", "FR"]},
        },
        "required": ["city", "country"],
    },
    {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 12},
            "age": {"type": "integer", "minimum": 0, "maximum": 150},
            "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 3},
        },
        "required": ["name", "age", "tags"],
    },
    {"enum": ["Tokyo, Japan", "Mumbai", "Paris, France"]},
]


def schema_line(custom_id: str, schema: dict | None, content: str, **body) -> str:
    body["messages"] = [{"role": "user", "content": content}]
    if schema is not None:
        body["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": "answer", "schema": schema},
        }
    return json.dumps({"custom_id": custom_id, "body": body})


def run(engine, lines) -> dict[str, dict]:
    out = io.StringIO()
    run_batch(engine, lines, out, batch_size=4, progress=False)
    items = (json.loads(text) for text in out.getvalue().splitlines())
    return {item["custom_id"]: item["response"]["body"] for item in items}


def answers(bodies: dict[str, dict]) -> dict:
    """The messages and usage of each answer, but for `cached_tokens` (what the prefix cache
    held before, not the answer)."""
    return {
        key: (
            [c["message"] for c in body["choices"]],
            {k: v for k, v in body["usage"].items() if k != "prompt_tokens_details"},
        )
        for key, body in bodies.items()
    }


def check_counts(bodies: dict[str, dict]) -> None:
    for body in bodies.values():
        listed = sum(len(c["logprobs"]["content"]) for c in body["choices"])
        assert body["usage"]["completion_tokens"] == listed
        for choice in body["choices"]:
            for entry in choice["logprobs"]["content"]:
                assert entry["logprob"] <= 0.0


@settings(max_examples=20, deadline=None)
@given(
    jobs=st.lists(
        st.tuples(st.sampled_from([None, 0, 1, 2]), st.integers(0, 50)), min_size=1, max_size=4
    ),
    top=st.sampled_from([None, 0, 5]),
    temperature=st.sampled_from([0, 1]),
)
def test_logprobs_change_no_batch_answer_and_usage_counts_what_they_list(jobs, top, temperature):
    """Lines with and without `logprobs` (free text ending on EOS, schemas with forced keys):
    the same messages and usage; `completion_tokens` is the number of `logprobs.content`
    entries."""
    engine = Completions(StandInModel(context=512))

    def lines(**extra):
        return [
            schema_line(
                f"{i}",
                None if k is None else SCHEMAS[k],
                f"q{seed}",
                temperature=temperature,
                seed=seed,
                **extra,
            )
            for i, (k, seed) in enumerate(jobs)
        ]

    asked = {"logprobs": True} | ({} if top is None else {"top_logprobs": top})
    plain, with_logprobs = run(engine, lines()), run(engine, lines(**asked))
    assert answers(with_logprobs) == answers(plain)
    check_counts(with_logprobs)


@pytest.mark.slow
def test_smollm2_answers_the_same_with_and_without_logprobs(smollm2):
    """The issue's case: a temperature-0 city answered the same with logprobs (jump-forward on
    in both), over several schemas and questions."""
    engine = Completions(smollm2)
    questions = ["Which city has the most people?", "Name a big city in Asia.", "Describe a cat."]
    lines = [
        (f"{k}-{q}", SCHEMAS[k], question)
        for k in range(len(SCHEMAS))
        for q, question in enumerate(questions)
    ]

    def run_lines(**extra):
        return run(
            engine,
            [schema_line(c, s, q, temperature=0, max_tokens=60, **extra) for c, s, q in lines],
        )

    plain = run_lines()
    for asked in ({"logprobs": True}, {"logprobs": True, "top_logprobs": 3}):
        with_logprobs = run_lines(**asked)
        assert answers(with_logprobs) == answers(plain)
        check_counts(with_logprobs)
