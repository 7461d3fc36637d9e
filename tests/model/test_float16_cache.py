"""The float16 KV cache (a plan's `kv_dtype`, the default on int8 activations), against the
float32 one:
- every pass attends over the rounded cache contents: a float16 cache computes what float32
  arithmetic over keys and values rounded to float16 where they are made computes, through the
  prompt path (`llama.attend_prompt`), the ragged kernel (decode and short segments) and the
  prefix cache's copy;
- on the real SmolLM2-135M-Instruct, the bar of corral's issue 15 for storing the cache in
  fewer bits (the bar of tests/model/test_int8_activations.py, whose text and log-likelihood
  this module reuses): the same greedy tokens on the reference prompts for 20 tokens and a mean
  log-likelihood within 1%."""

from __future__ import annotations

import dataclasses
import os
import platform
import subprocess
import sys

import llvmlite.binding as llvm
import numba
import numpy as np
import pytest
from compile_state import compile_afresh
from corral.kernels.compute import attention as attention_kernels
from corral.kernels.compute.plan import ComputePlan
from corral.model import llama, load_model
from corral.model.kv_cache import DEFAULT_DTYPE, KVCache
from corral.model.llama import SHORT_SEGMENT
from test_int8_activations import TEXT, mean_log_likelihood

pytestmark = pytest.mark.skipif(
    not attention_kernels.float16_supported(), reason="the kernels take no float16 cache here"
)

STEPS = 20  # greedy tokens compared per prompt
LIKELIHOOD_TOLERANCE = 0.01  # relative, of the mean log-likelihood (issue 15)


def planned(model, **fields):
    """`model` on its plan with `fields` replaced (kv_dtype: a NumPy dtype or its name)."""
    if "kv_dtype" in fields:
        fields["kv_dtype"] = np.dtype(fields["kv_dtype"]).name
    return model.with_plan(dataclasses.replace(model.plan, **fields))


WITHOUT_F16C = """
from types import SimpleNamespace
import numpy as np
from corral.kernels.compute import attention
from corral.model import kv_cache
assert not attention.float16_supported()
assert kv_cache.DEFAULT_DTYPE is np.float32
shape = SimpleNamespace(num_hidden_layers=2, num_key_value_heads=2, head_dim=8)
assert kv_cache.KVCache(shape, 1, 2).keys.dtype == np.float32
for refused in (
    lambda: attention.cache_bits(np.zeros(4, np.float16)),
    lambda: kv_cache.KVCache(shape, 1, 2, np.float16),
):
    try:
        refused()
    except ValueError as error:
        assert "F16C" in str(error), error
    else:
        raise SystemExit("a float16 cache was not refused")
print("refused")
"""


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="an x86 target")
def test_without_f16c_a_float16_cache_is_refused_and_the_default_is_float32(tmp_path):
    """Numba compiling for x86-64 without F16C (NUMBA_CPU_NAME=x86-64, no extra features), in a
    fresh interpreter: LLVM would lower the conversions to compiler-rt calls that Numba's JIT
    cannot resolve, and the first kernel call on a float16 cache would abort the process
    ("LLVM ERROR: Symbol not found: __extendhfsf2", seen before this check). Instead the probe
    says so, a float16 cache is refused with a ValueError, and caches default to float32."""
    env = dict(os.environ, NUMBA_CPU_NAME="x86-64", NUMBA_CPU_FEATURES="")
    env["NUMBA_CACHE_DIR"] = str(tmp_path)  # nothing compiled for that target lands in ours
    child = subprocess.run(
        [sys.executable, "-c", WITHOUT_F16C], env=env, capture_output=True, text=True
    )
    assert child.returncode == 0 and child.stdout.strip() == "refused", child.stderr


@pytest.mark.skipif(
    not llvm.get_host_cpu_features().get("f16c") or numba.config.CPU_NAME is not None,
    reason="Numba compiles for a CPU without F16C",
)
def test_the_default_cache_is_float16_where_int8_serves_and_float32_is_chosen_at_load(
    model, tiny, tmp_path
):
    folder = tiny.write(tmp_path / "model")  # float32 weights: a float32 cache by default
    assert attention_kernels.float16_supported()
    assert load_model(folder).new_cache(1, 2).keys.dtype == np.float32
    assert load_model(folder, kv_dtype=np.float16).new_cache(1, 2).keys.dtype == np.float16
    int8 = model.plan.activations != "float32"  # the default model on AMX or VNNI: float16
    assert model.kv_dtype is (np.float16 if int8 else np.float32)
    amx_features = frozenset({"avx512f", "amx-tile", "amx-int8"})
    assert ComputePlan.detect(features=amx_features).kv_dtype == "float16"
    assert ComputePlan.detect(int8_activations=False, features=amx_features).kv_dtype == "float32"
    assert ComputePlan.detect(quantized=False, features=amx_features).kv_dtype == "float32"
    reference = load_model(folder, kv_dtype=np.float32)
    assert reference.kv_dtype is np.float32
    cache = reference.new_cache(1, 2)
    assert cache.keys.dtype == cache.values.dtype == np.float32
    with pytest.raises(ValueError, match="kv_dtype must be float16 or float32, got float64"):
        load_model(folder, kv_dtype=np.float64)
    with pytest.raises(ValueError, match="kv_dtype must be float16 or float32, got 16"):
        load_model(folder, kv_dtype=16)


def rounded(x: np.ndarray) -> np.ndarray:
    """x rounded to the nearest float16 (ties to even), as float32."""
    return x.astype(np.float16).astype(np.float32)


@pytest.fixture
def rounded_where_made(monkeypatch):
    """Make the forward pass round every new key and value to float16 where it is made, before
    anything reads it: `project_qkv`'s k and v (prefill) and the rows `rope_store` writes
    (decode, which reads its keys and values only from the cache). Over a float32 cache, every
    pass then reads float16 numbers through float32 arrays: what a float16 cache must compute
    if no pass reads a new key or value before it is rounded."""
    project_qkv, rope_store = llama.project_qkv, attention_kernels.rope_store

    def project_rounded(*args):
        q, k, v = project_qkv(*args)
        return q, rounded(k), rounded(v)

    def rope_store_rounded(qkv, cos, sin, q_heads, scale, keys, values, slots, positions, q):
        rope_store(qkv, cos, sin, q_heads, scale, keys, values, slots, positions, q)
        keys[slots, :, positions] = rounded(keys[slots, :, positions])
        values[slots, :, positions] = rounded(values[slots, :, positions])
        return q

    monkeypatch.setattr(llama, "project_qkv", project_rounded)
    monkeypatch.setattr(attention_kernels, "rope_store", rope_store_rounded)


def passes_of_every_kind(model, dtype) -> tuple[list[np.ndarray], KVCache]:
    """A long prompt (`attend_prompt`), two short segments in one pass and a decode step (the
    ragged kernel), a prefix copy and a decode step on from it, in a cache of `dtype`.
    -> (the logits of each pass, the cache)"""
    rng = np.random.default_rng(0)
    ids = rng.integers(3, model.vocab_size, 2 * SHORT_SEGMENT + 7).tolist()
    cache = KVCache(model.config, 3, 3 * SHORT_SEGMENT, dtype)
    logits = [model.logits(ids[: SHORT_SEGMENT + 9])]  # its own cache, of model.kv_dtype
    logits.append(model.prefill(cache, 0, ids[: SHORT_SEGMENT + 5])[None])  # a long segment
    logits.append(model.prefill_batch(cache, [0, 1], [ids[-9:-4], ids[:7]]))  # two short ones
    logits.append(model.decode(cache, [1, 0], [ids[7], ids[-4]]))
    cache.copy_prefix(0, 2, SHORT_SEGMENT)
    logits.append(model.decode(cache, [2, 0], [ids[-3], ids[-3]]))
    return logits, cache


@pytest.mark.parametrize("positional", [False, True])  # prompts by attend_prompt or not
@pytest.mark.parametrize("name", ["tiny_model", "model"])
def test_every_pass_attends_over_the_rounded_keys_and_values(name, positional, request):
    """The float16 cache against float32 arithmetic over the same rounded numbers: the stored
    keys and values equal bit for bit, and the logits to float32 rounding (the two compiled
    versions of the ragged kernel may order their sums apart, `kernels.attention`; on SmolLM2
    they came out equal bit for bit). A pass that read a new key or value before its rounding
    would move the next layer's by float16's rounding, 2^-11 of them. Both versions of the
    attention kernels are compiled in this process first (`compile_state.compile_afresh`)."""
    model = planned(request.getfixturevalue(name), positional_attention=positional)
    for dtype in (np.float16, np.float32):  # every signature the passes need, then afresh
        passes_of_every_kind(planned(model, kv_dtype=dtype), dtype)
    compile_afresh(attention_kernels)
    float16, cache16 = passes_of_every_kind(planned(model, kv_dtype=np.float16), np.float16)
    request.getfixturevalue("rounded_where_made")
    float32, cache32 = passes_of_every_kind(planned(model, kv_dtype=np.float32), np.float32)
    np.testing.assert_array_equal(cache16.keys.astype(np.float32), cache32.keys)
    np.testing.assert_array_equal(cache16.values.astype(np.float32), cache32.values)
    for got, expected in zip(float16, float32, strict=True):
        np.testing.assert_allclose(got, expected, rtol=1e-6, atol=2e-6)


def greedy_batch(model, prompts, dtype) -> list[list[int]]:
    """STEPS greedy tokens of every prompt, decoded together in one cache of `dtype`."""
    cache = KVCache(model.config, len(prompts), max(map(len, prompts)) + STEPS, dtype)
    slots = list(range(len(prompts)))
    logits = model.prefill_batch(cache, slots, prompts)  # [B, V]
    tokens = []
    for _ in range(STEPS):
        tokens.append(np.argmax(logits, axis=1))
        logits = model.decode(cache, slots, tokens[-1])
    return np.array(tokens).T.tolist()


def log_softmax_of(logits, targets) -> np.ndarray:
    """log softmax(logits[i])[targets[i]] in float64.  [n, V], [n] -> [n]"""
    logits = logits.astype(np.float64)
    top = logits.max(axis=1, keepdims=True)
    norms = np.log(np.exp(logits - top).sum(axis=1)) + top[:, 0]
    return logits[np.arange(len(targets)), targets] - norms


@pytest.fixture(scope="module")
def texts(model, reference) -> dict[str, list[int]]:
    """The fixed texts: test_int8_activations.py's, and the reference prompts one after another
    (221 tokens: longer contexts, more of the cache read per token)."""
    prompts = [token for p in reference["prompts"] for token in p["ids"]]
    return {"int8_text": model.tokenizer.encode(TEXT), "reference_prompts": prompts}


@pytest.mark.slow
def test_greedy_tokens_of_the_reference_prompts_are_the_float32_caches(model, reference):
    prompts = [p["ids"] for p in reference["prompts"]]
    float32 = greedy_batch(model, prompts, np.float32)
    assert greedy_batch(model, prompts, np.float16) == float32
    for p, tokens in zip(reference["prompts"], float32, strict=True):  # and transformers'
        assert tokens[: len(p["greedy"])] == p["greedy"][:STEPS]


@pytest.mark.slow
@pytest.mark.parametrize("text", ["int8_text", "reference_prompts"])
def test_mean_log_likelihood_by_decode_is_the_float32_caches_within_1_percent(model, texts, text):
    """One decode step a token (`mean_log_likelihood`), each step the ragged kernel over a
    float16 slot."""
    float32 = mean_log_likelihood(planned(model, kv_dtype=np.float32), texts[text])
    float16 = mean_log_likelihood(planned(model, kv_dtype=np.float16), texts[text])
    print(f"mean log-likelihood by decode: float32 {float32:.6f}, float16 {float16:.6f}")
    assert abs(float16 - float32) <= LIKELIHOOD_TOLERANCE * abs(float32)
    assert float16 != float32  # the caches do differ: the bar is not met by one path twice


def test_mean_log_likelihood_of_a_prompt_is_the_float32_caches_within_1_percent(model, texts):
    """`Model.logits` prefills the whole text in one pass (`attend_prompt` over a float16 slot)."""
    ids = texts["reference_prompts"]
    float32 = log_softmax_of(planned(model, kv_dtype=np.float32).logits(ids)[:-1], ids[1:]).mean()
    float16 = log_softmax_of(planned(model, kv_dtype=np.float16).logits(ids)[:-1], ids[1:]).mean()
    print(f"mean log-likelihood by prefill: float32 {float32:.6f}, float16 {float16:.6f}")
    assert abs(float16 - float32) <= LIKELIHOOD_TOLERANCE * abs(float32)


def test_a_float16_cache_takes_half_the_bytes_and_copies_a_prefix_in_float16(tiny_model):
    """The prefix cache's copy keeps the dtype and the numbers: decoding on from a copied
    prefix gives the logits of decoding on from the slot it was copied from."""
    config = tiny_model.config
    assert KVCache.bytes_needed(config, 3, 10, np.float16) * 2 == KVCache.bytes_needed(
        config, 3, 10, np.float32
    )
    assert KVCache.bytes_needed(config, 3, 10) == KVCache.bytes_needed(config, 3, 10, DEFAULT_DTYPE)
    cache = KVCache(config, 3, 2 * SHORT_SEGMENT, np.float16)
    assert cache.keys.dtype == cache.values.dtype == np.float16
    ids = np.random.default_rng(0).integers(3, tiny_model.vocab_size, SHORT_SEGMENT + 5).tolist()
    head, tail = ids[:-3], ids[-3:]
    tiny_model.prefill(cache, 0, head)  # a long segment: attend_prompt over a float16 slot
    cache.copy_prefix(0, 2, len(head))
    np.testing.assert_array_equal(
        cache.keys[:, 2, :, : len(head)], cache.keys[:, 0, :, : len(head)]
    )
    tails = tiny_model.prefill_batch(cache, [0, 2], [tail, tail])  # short: the ragged kernel
    np.testing.assert_array_equal(tails[0], tails[1])
    step = tiny_model.decode(cache, [0, 2], [7, 7])
    np.testing.assert_array_equal(step[0], step[1])


def test_a_cache_of_another_dtype_is_refused(tiny_model):
    with pytest.raises(ValueError, match="float32 or float16, not float64"):
        KVCache(tiny_model.config, 1, 4, np.float64)
