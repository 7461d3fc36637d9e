"""RMSNorm and RoPE kernels against their textbook NumPy formulas in float64 (Hugging Face's
`LlamaRMSNorm` and `apply_rotary_pos_emb` with `rotate_half`; docs/design.md section 6)."""

from __future__ import annotations

import numpy as np
import pytest
from corral.kernels.compute import layers
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import expit


@pytest.mark.parametrize("seed", range(5))
def test_rms_norm_equals_the_formula(seed):
    rng = np.random.default_rng(seed)
    n, d = int(rng.integers(1, 9)), int(rng.integers(1, 700))
    x = (rng.standard_normal((n, d)) * rng.uniform(0.01, 100)).astype(np.float32)
    weight = rng.standard_normal(d).astype(np.float32)
    got = layers.rms_norm(x, weight, 1e-5, np.empty_like(x))
    x64 = x.astype(np.float64)
    expected = x64 / np.sqrt((x64**2).mean(axis=1, keepdims=True) + 1e-5) * weight
    np.testing.assert_allclose(got, expected, rtol=2e-6, atol=1e-6)


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 6), st.integers(1, 3), st.integers(1, 5))
def test_head_rms_norm_is_rms_norm_of_each_head_bit_for_bit(seed, q_heads, kv_heads, n):
    """Qwen3's and Gemma 3's q/k norms in one pass: each head of q and of k equals `rms_norm` of
    that head's row, v is copied, whatever the head width's remainder of 8."""
    rng = np.random.default_rng(seed)
    width = int(rng.integers(1, 40))
    qkv = (rng.standard_normal((n, (q_heads + 2 * kv_heads) * width)) * 3).astype(np.float32)
    q_weight, k_weight = rng.standard_normal((2, width)).astype(np.float32)
    got = layers.head_rms_norm(qkv, q_weight, k_weight, q_heads, kv_heads, 1e-6,
                               np.full(qkv.shape, np.nan, np.float32))  # fmt: skip
    heads = qkv.reshape(n, -1, width)
    q = layers.rms_norm(heads[:, :q_heads].reshape(-1, width).copy(), q_weight, 1e-6,
                        np.empty((n * q_heads, width), np.float32))  # fmt: skip
    k = layers.rms_norm(heads[:, q_heads : q_heads + kv_heads].reshape(-1, width).copy(),
                        k_weight, 1e-6, np.empty((n * kv_heads, width), np.float32))  # fmt: skip
    expected = np.concatenate(
        [q.reshape(n, -1), k.reshape(n, -1), qkv[:, (q_heads + kv_heads) * width :]], axis=1
    )
    np.testing.assert_array_equal(got, expected)


def test_rms_norm_of_zeros_is_zero_thanks_to_eps():
    x = np.zeros((2, 8), np.float32)
    got = layers.rms_norm(x, np.ones(8, np.float32), 1e-5, np.full_like(x, np.nan))
    np.testing.assert_array_equal(got, 0.0)


def rotate_half_reference(x, cos, sin):
    """x cos + rotate_half(x) sin, with cos and sin repeated over both halves, in float64."""
    half = x.shape[-1] // 2
    x = x.astype(np.float64)
    cos = np.concatenate([cos, cos], axis=-1)[:, None, :]
    sin = np.concatenate([sin, sin], axis=-1)[:, None, :]
    rotated = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos + rotated * sin


@pytest.mark.parametrize("seed", range(5))
def test_rope_equals_rotate_half_also_on_a_strided_view(seed):
    rng = np.random.default_rng(seed)
    n, heads = int(rng.integers(1, 6)), int(rng.integers(1, 10))
    width = 2 * int(rng.integers(1, 40))
    angles = rng.uniform(0, 100, (n, width // 2))
    cos, sin = np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)
    wide = rng.standard_normal((n, (heads + 3) * width)).astype(np.float32)
    x = wide[:, : heads * width].reshape(n, heads, width)  # a view, as project_qkv passes it
    got = layers.rope(x, cos, sin, np.empty(x.shape, np.float32))
    np.testing.assert_allclose(got, rotate_half_reference(x, cos, sin), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("seed", range(5))
def test_add_rms_norm_is_the_residual_sum_then_rms_norm_bit_for_bit(seed):
    rng = np.random.default_rng(seed)
    n, d = int(rng.integers(1, 9)), int(rng.integers(1, 700))
    x = rng.standard_normal((n, d)).astype(np.float32)
    delta = rng.standard_normal((d, n)).astype(np.float32).T  # a strided view, as BLAS's
    weight = rng.standard_normal(d).astype(np.float32)
    expected_x = x + delta
    expected = layers.rms_norm(expected_x, weight, 1e-5, np.empty_like(x))
    got = layers.add_rms_norm(x, delta, weight, 1e-5, np.empty_like(x))
    np.testing.assert_array_equal(x, expected_x)
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("seed", range(5))
def test_swiglu_equals_silu_of_gate_times_up_also_far_out(seed, transposed):
    rng = np.random.default_rng(seed)
    n, width = int(rng.integers(1, 40)), int(rng.integers(1, 300))  # both sides of PARALLEL_ROWS
    gate_up = (rng.standard_normal((n, 2 * width)) * rng.uniform(0.1, 60)).astype(np.float32)
    gate_up[0, 0], gate_up[-1, width - 1] = -1000.0, 1000.0  # past exp's float32 range
    if transposed:  # as `llama.mlp` on BLAS's result: the halves of C-order [2F, N], out [F, N]
        gate_up_t = np.ascontiguousarray(gate_up.T)
        out = np.full((width, n), np.nan, np.float32)
        got = layers.swiglu(gate_up_t[:width], gate_up_t[width:], out).T
    else:
        out = np.full((n, width), np.nan, np.float32)
        got = layers.swiglu(gate_up[:, :width], gate_up[:, width:], out)
        # as `llama.mlp` on the blocks' C-contiguous result: the same operations, bit for bit
        halves = layers.swiglu_halves(gate_up, np.full((n, width), np.nan, np.float32))
        np.testing.assert_array_equal(halves, got)
        # and on Numba's threads, as `llama.mlp` takes it from PARALLEL_ROWS rows
        spread = layers.swiglu_halves_parallel(gate_up, np.full((n, width), np.nan, np.float32))
        np.testing.assert_array_equal(spread, got)
        rows = layers.swiglu_rows(gate_up, np.full((n, width), np.nan, np.float32))
        np.testing.assert_array_equal(rows, got)
    g, up = gate_up[:, :width].astype(np.float64), gate_up[:, width:].astype(np.float64)
    expected = g * expit(g) * up  # silu(g) = g sigmoid(g), with no overflow
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-30)


@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("seed", range(5))
def test_geglu_equals_gelu_tanh_of_gate_times_up_also_far_out(seed, transposed):
    """GeGLU (Gemma's MLP) against PyTorch's gelu(approximate="tanh") formula in float64, on
    both layouts `llama.mlp` passes, with gates past exp's float32 range."""
    rng = np.random.default_rng(seed)
    n, width = int(rng.integers(1, 40)), int(rng.integers(1, 300))
    gate_up = (rng.standard_normal((n, 2 * width)) * rng.uniform(0.1, 60)).astype(np.float32)
    gate_up[0, 0], gate_up[-1, width - 1] = -1000.0, 1000.0
    if transposed:
        gate_up_t = np.ascontiguousarray(gate_up.T)
        out = np.full((width, n), np.nan, np.float32)
        got = layers.geglu(gate_up_t[:width], gate_up_t[width:], out).T
    else:
        out = np.full((n, width), np.nan, np.float32)
        got = layers.geglu(gate_up[:, :width], gate_up[:, width:], out)
        # as `llama.mlp` on the blocks' C-contiguous result: the same operations, bit for bit
        halves = layers.geglu_halves(gate_up, np.full((n, width), np.nan, np.float32))
        np.testing.assert_array_equal(halves, got)
    g, up = gate_up[:, :width].astype(np.float64), gate_up[:, width:].astype(np.float64)
    # 0.5 (1 + tanh(u)) = sigmoid(2 u), without float64's cancellation in 1 + tanh(u) far out
    z = 2 * np.sqrt(2 / np.pi) * (g + 0.044715 * g**3)
    expected = g * expit(z) * up
    # z, a few float32 roundings of g, moves exp(-|z|) by a few |z| 2^-24 relative
    rtol = 1e-6 + 4 * np.minimum(np.abs(z), 87) * 2.0**-24
    assert (np.abs(got - expected) <= rtol * np.abs(expected) + 1e-30).all()
