"""The Batch API on `corral serve` (issue 39, part 1), live on 127.0.0.1 over the stand-in model,
driven by the official `openai` client: files and batches end to end, each line answered exactly
once (against `corral generate`'s runner, `run_batch`, as the oracle), cancel and a server
restart mid-way, 404s, auth and the refusals naming their parameter."""

from __future__ import annotations

import io
import json
import time

import httpx
import openai
import pytest
from corral.tools.batch import run_batch
from corral.tools.completions import Completions
from corral.tools.server import ServerConfig, background_server
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from stand_in_model import StandInModel

KEY = "sk-batches"
CONTEXT, MAX_LEN = 1024, 256
SERVED = settings(
    deadline=None, max_examples=8, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
BAD_SCHEMA = {"type": "object", "properties": {"a": {"type": "string", "pattern": "(?<=a)b"}}}


class SlowModel(StandInModel):
    """The stand-in model, `delay` seconds a decode step: a batch long enough to stop mid-way."""

    def __init__(self, delay: float, **options):
        super().__init__(**options)
        self.delay = delay

    def decode(self, cache, slots, tokens):
        time.sleep(self.delay)
        return super().decode(cache, slots, tokens)


def line(custom_id: str, **body) -> str:
    body.setdefault("messages", [{"role": "user", "content": f"hi {custom_id}"}])
    body.setdefault("seed", 1)
    return json.dumps({"custom_id": custom_id, "body": body})


KINDS = {
    "good": lambda i: line(f"id{i}", max_tokens=8),
    "json": lambda i: line(f"id{i}", max_tokens=40, response_format={"type": "json_object"}),
    "not json": lambda i: "{not json",
    "no body": lambda i: json.dumps({"custom_id": f"id{i}"}),
    "bad schema": lambda i: line(
        f"id{i}",
        response_format={"type": "json_schema", "json_schema": {"name": "b", "schema": BAD_SCHEMA}},
    ),
    "past max_len": lambda i: line(f"id{i}", max_tokens=MAX_LEN),
    "past the context": lambda i: line(f"id{i}", max_tokens=2 * CONTEXT),
    "duplicate": lambda i: line("id0", max_tokens=8),
}


def client(url: str, key: str | None = KEY) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key=key or "none", max_retries=0, timeout=60)


def upload(api: openai.OpenAI, text: str) -> str:
    return api.files.create(file=("in.jsonl", text.encode()), purpose="batch").id


def wait(api: openai.OpenAI, batch_id: str, until, seconds: float = 120):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        batch = api.batches.retrieve(batch_id)
        if until(batch):
            return batch
        time.sleep(0.05)
    raise AssertionError(f"batch {batch_id} stayed {batch.status}: {batch.request_counts}")


def ended(batch) -> bool:
    return batch.status in ("completed", "failed", "cancelled", "expired")


def items(api: openai.OpenAI, file_id: str | None) -> list[dict]:
    if file_id is None:
        return []
    return [json.loads(t) for t in api.files.content(file_id).text.splitlines()]


def comparable(item: dict):
    """An output line without its random ids and timestamps."""
    response = item["response"]
    if response is None:
        return (item["custom_id"], None, item["error"]["code"])
    body = dict(response["body"])
    for key in ("id", "created"):
        body.pop(key, None)
    return (item["custom_id"], response["status_code"], json.dumps(body, sort_keys=True))


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    config = ServerConfig(
        batch_size=4, max_len=MAX_LEN, api_key=KEY, data_dir=tmp_path_factory.mktemp("data")
    )
    with background_server(StandInModel(context=CONTEXT), config) as (base, _):
        yield base


@SERVED
@example(kinds=["good", "past the context", "past max_len"])
@given(st.lists(st.sampled_from(sorted(KINDS)), min_size=1, max_size=8))
def test_the_output_and_error_files_are_the_runners_lines_split_by_status(url, kinds):
    """Any mix of good and bad lines: the output file holds the runner's answers (status 200),
    the error file every other line, each input line answered exactly once."""
    text = "\n".join(KINDS[kind](i) for i, kind in enumerate(kinds)) + "\n"
    api = client(url)
    file = api.files.create(file=("in.jsonl", text.encode()), purpose="batch")
    assert (file.object, file.purpose, file.bytes) == ("file", "batch", len(text.encode()))
    created = api.batches.create(
        input_file_id=file.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    assert created.request_counts.total == len(kinds)
    if set(kinds) == {"not json"}:  # not JSONL at all: the batch fails, no line runs
        assert created.status == "failed" and created.errors.data[0].code == "invalid_json_line"
        return
    assert created.status == "validating"
    batch = wait(api, created.id, ended)
    out, errors = items(api, batch.output_file_id), items(api, batch.error_file_id)
    assert batch.status == "completed", batch
    assert all(i["response"] and i["response"]["status_code"] == 200 for i in out)
    assert not any(i["response"] and i["response"]["status_code"] == 200 for i in errors)
    counts = batch.request_counts
    assert (counts.total, counts.completed, counts.failed) == (len(kinds), len(out), len(errors))
    oracle = io.StringIO()
    engine = Completions(StandInModel(context=CONTEXT))
    run_batch(engine, text.split("\n"), oracle, batch_size=4, progress=False)
    expected = [json.loads(t) for t in oracle.getvalue().splitlines()]
    # a line past the server's max_len (not the model's context, the runner's bound) is a 400
    # naming max_len, however far past the context it also goes
    past = {f"id{i}" for i, kind in enumerate(kinds) if kind.startswith("past")}
    for custom_id in past:
        refused = [e for e in errors if e["custom_id"] == custom_id]  # then its duplicates'
        assert refused[0]["response"]["status_code"] == 400
        message = refused[0]["response"]["body"]["error"]["message"]
        assert f"at most {MAX_LEN} tokens" in message and str(CONTEXT) not in message, message
    got = sorted((c for c in map(comparable, out + errors) if c[0] not in past), key=repr)
    want = sorted((c for c in map(comparable, expected) if c[0] not in past), key=repr)
    assert got == want
    assert api.files.retrieve(batch.output_file_id or batch.error_file_id).purpose == "batch_output"


def test_list_pages_and_retrieve(url):
    api = client(url)
    file_id = upload(api, line("a", max_tokens=4) + "\n")
    ids = [
        api.batches.create(
            input_file_id=file_id, endpoint="/v1/chat/completions", completion_window="24h"
        ).id
        for _ in range(3)
    ]
    page = api.batches.list(limit=2)
    assert [b.id for b in page.data] == ids[::-1][:2] and page.has_more
    after = api.batches.list(limit=2, after=page.data[-1].id)
    assert after.data[0].id == ids[0]
    assert file_id in [f.id for f in api.files.list(purpose="batch")]
    assert api.files.retrieve(file_id).filename == "in.jsonl"
    for batch_id in ids:
        assert wait(api, batch_id, ended).status == "completed"
    assert api.files.delete(file_id).deleted
    with pytest.raises(openai.NotFoundError):
        api.files.retrieve(file_id)


def test_a_file_that_is_not_jsonl_fails_the_batch(url):
    api = client(url)
    for data, code in (("hello\nworld\n", "invalid_json_line"), ("\n\n", "empty_file")):
        file_id = upload(api, data)
        batch = api.batches.create(
            input_file_id=file_id, endpoint="/v1/chat/completions", completion_window="24h"
        )
        assert batch.status == "failed" and batch.errors.data[0].code == code
        assert batch.errors.data[0].param == "input_file_id"


def test_unknown_ids_are_404_in_openais_shape(url):
    api = client(url)
    calls = [
        lambda: api.files.retrieve("file-nope"),
        lambda: api.files.content("file-nope"),
        lambda: api.files.delete("file-nope"),
        lambda: api.batches.retrieve("batch_nope"),
        lambda: api.batches.cancel("batch_nope"),
        lambda: api.batches.retrieve("../../etc"),
        lambda: api.batches.create(
            input_file_id="file-nope", endpoint="/v1/chat/completions", completion_window="24h"
        ),
    ]
    for call in calls:
        with pytest.raises(openai.NotFoundError) as caught:
            call()
        error = caught.value.body
        assert set(error) == {"message", "type", "param", "code"}, error
        assert (
            error["param"] in ("file_id", "batch_id")
            and "nope" in error["message"]
            or ("etc" in error["message"])
        )


def test_refusals_name_their_parameter(url):
    api = client(url)
    with pytest.raises(openai.BadRequestError) as caught:
        api.files.create(file=("x.jsonl", b"{}\n"), purpose="fine-tune")
    assert caught.value.body["param"] == "purpose"
    file_id = upload(api, line("a") + "\n")
    for field, value in (("endpoint", "/v1/embeddings"), ("completion_window", "1h")):
        body = {"input_file_id": file_id, "endpoint": "/v1/chat/completions"}
        body["completion_window"] = "24h"
        body[field] = value
        with pytest.raises(openai.BadRequestError) as caught:
            api.batches.create(**body)
        assert caught.value.body["param"] == field
    with pytest.raises(openai.BadRequestError) as caught:
        api.batches.create(
            input_file_id=file_id,
            endpoint="/v1/chat/completions",
            completion_window="24h",
            extra_body={"priority": "high"},
        )
    assert (caught.value.body["param"], caught.value.body["code"]) == (
        "priority",
        "unknown_parameter",
    )
    with pytest.raises(openai.BadRequestError) as caught:
        api.batches.list(limit=0)
    assert caught.value.body["param"] == "limit"


def test_the_api_key_guards_every_route(url):
    anonymous = client(url, key="sk-wrong")
    file_id = upload(client(url), line("a") + "\n")
    calls = [
        lambda: anonymous.files.create(file=("x.jsonl", b"{}\n"), purpose="batch"),
        lambda: anonymous.files.list(),
        lambda: anonymous.files.retrieve(file_id),
        lambda: anonymous.files.content(file_id),
        lambda: anonymous.files.delete(file_id),
        lambda: anonymous.batches.list(),
        lambda: anonymous.batches.retrieve("batch_x"),
        lambda: anonymous.batches.cancel("batch_x"),
        lambda: anonymous.batches.create(
            input_file_id=file_id, endpoint="/v1/chat/completions", completion_window="24h"
        ),
    ]
    for call in calls:
        with pytest.raises(openai.AuthenticationError):
            call()


def test_an_upload_past_the_limit_is_413(tmp_path):
    config = ServerConfig(max_len=MAX_LEN, data_dir=tmp_path, max_file_bytes=1000)
    with background_server(StandInModel(context=CONTEXT), config) as (base, _):
        api = client(base, None)
        with pytest.raises(openai.APIStatusError) as caught:
            api.files.create(file=("big.jsonl", b"x" * 2000), purpose="batch")
        assert caught.value.status_code == 413
        response = httpx.post(f"{base}/v1/files", json={"purpose": "batch"})
        assert response.status_code == 415 and response.json()["error"]["code"] == "invalid_type"


def long_batch(n: int) -> str:
    return "".join(line(f"id{i}", max_tokens=30) + "\n" for i in range(n))


def slow_config(data_dir) -> ServerConfig:
    return ServerConfig(batch_size=4, max_len=MAX_LEN, data_dir=data_dir)


def test_cancel_mid_way_keeps_what_was_answered(tmp_path):
    model = SlowModel(0.01, context=CONTEXT, eos_bias=-100.0)
    with background_server(model, slow_config(tmp_path)) as (base, _):
        api = client(base, None)
        file_id = upload(api, long_batch(40))
        batch = api.batches.create(
            input_file_id=file_id, endpoint="/v1/chat/completions", completion_window="24h"
        )
        wait(api, batch.id, lambda b: b.request_counts.completed >= 2)
        assert api.batches.cancel(batch.id).status in ("cancelling", "cancelled")
        batch = wait(api, batch.id, ended)
        assert batch.status == "cancelled" and batch.cancelled_at is not None
        out = items(api, batch.output_file_id)
        assert 2 <= len(out) == batch.request_counts.completed < 40
        assert len({i["custom_id"] for i in out}) == len(out)
        with pytest.raises(openai.BadRequestError):
            api.batches.cancel(batch.id)


def test_a_restarted_server_finishes_the_batch_answering_every_line_once(tmp_path):
    n = 40
    slow = SlowModel(0.01, context=CONTEXT, eos_bias=-100.0)
    with background_server(slow, slow_config(tmp_path)) as (base, _):
        api = client(base, None)
        file_id = upload(api, long_batch(n))
        batch_id = api.batches.create(
            input_file_id=file_id, endpoint="/v1/chat/completions", completion_window="24h"
        ).id
        wait(api, batch_id, lambda b: b.request_counts.completed >= 4)
    # the first server stopped mid-way: what it left in the folder
    record = json.loads((tmp_path / "batches" / f"{batch_id}.json").read_text())
    stopped = record["batch"]
    first = (tmp_path / "files" / f"{record['output']}.data").read_text().splitlines()
    assert len(first) == stopped["request_counts"]["completed"]
    assert stopped["status"] == "in_progress"
    assert 4 <= stopped["request_counts"]["completed"] < n, "the first server had finished it"
    fast = StandInModel(context=CONTEXT, eos_bias=-100.0)
    with background_server(fast, slow_config(tmp_path)) as (base, _):
        api = client(base, None)
        batch = wait(api, batch_id, ended)
        assert batch.status == "completed" and batch.error_file_id is None
        out = items(api, batch.output_file_id)
    assert sorted(i["custom_id"] for i in out) == sorted(f"id{i}" for i in range(n))
    assert out[: len(first)] == [json.loads(text) for text in first]  # kept, not run again
    oracle = io.StringIO()
    run_batch(
        Completions(StandInModel(context=CONTEXT, eos_bias=-100.0)),
        long_batch(n).split("\n"),
        oracle,
        progress=False,
    )
    expected = [comparable(json.loads(t)) for t in oracle.getvalue().splitlines()]
    assert sorted(map(comparable, out)) == sorted(expected)


def test_an_interactive_request_does_not_wait_for_a_running_batch(tmp_path):
    """A batch whose lines hold every slot for 200 steps: an interactive request of 5 tokens is
    answered before any batch line ends (it preempts one; without preemption it would wait for
    a line to end), and the preempted line still runs, once."""
    n = 8
    model = SlowModel(0.01, context=CONTEXT, eos_bias=-100.0)
    with background_server(model, slow_config(tmp_path)) as (base, server):
        api = client(base, None)
        text = "".join(line(f"id{i}", max_tokens=200) + "\n" for i in range(n))
        batch_id = api.batches.create(
            input_file_id=upload(api, text),
            endpoint="/v1/chat/completions",
            completion_window="24h",
        ).id
        deadline = time.monotonic() + 60
        while server.thread.generator.n_live < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert server.thread.generator.n_live == 4  # the batch holds every slot
        answer = api.chat.completions.create(
            model=server.config.model_name,
            messages=[{"role": "user", "content": "hi"}],
            max_tokens=5,
        )
        assert answer.choices[0].finish_reason == "length"
        assert api.batches.retrieve(batch_id).request_counts.completed == 0
        batch = wait(api, batch_id, ended)
        out = items(api, batch.output_file_id)
    assert sorted(i["custom_id"] for i in out) == sorted(f"id{i}" for i in range(n))
