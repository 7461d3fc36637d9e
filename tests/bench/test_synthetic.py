"""bench/synthetic.py: the synthetic GGUF files hold llama.cpp's type mix, weights of the
scale claimed, and load in corral with logits of about 1 (tiny dimensions, a toy vocabulary)."""

import sys
from pathlib import Path

import gguf
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import synthetic  # noqa: E402

TOY_VOCAB = Path(__file__).resolve().parents[1] / "data" / "llama.cpp" / "vocab"


def tiny(arch: str, ffn: int = 512) -> synthetic.Spec:
    """A model of `arch` with 8 layers, hidden 256 (one K-quant block a row), the toy BPE
    vocabulary's 318 tokens; Llama 3's RoPE scaling for `llama`."""
    rope = (32.0, 1.0, 4.0, 8192) if arch == "llama" else None
    vocab = str(TOY_VOCAB / "ggml-vocab-toy-bpe.gguf")
    head_dim = 128 if arch == "qwen3" else 64
    return synthetic.Spec(arch, 8, 256, 4, 2, head_dim, ffn, vocab, 318, 1e6, 1e-6, 4096, rope)


def types(path: Path) -> dict[str, str]:
    return {t.name: t.tensor_type.name for t in gguf.GGUFReader(path).tensors}


def test_use_more_bits_picks_llama_cpps_layers():
    """The layers llama.cpp's Q4_K_M gives Q6_K attn_v / ffn_down (first and last eighth, every
    third between), worked out by hand for 8, 16 and 28 layers."""
    layers = {n: [i for i in range(n) if synthetic.use_more_bits(i, n)] for n in (8, 16, 28)}
    assert layers[8] == [0, 3, 6, 7]
    assert layers[16] == [0, 1, 4, 7, 10, 13, 14, 15]
    assert layers[28] == [0, 1, 2, 5, 8, 11, 14, 17, 20, 23, 24, 25, 26, 27]


@pytest.mark.parametrize("quant", list(synthetic.QUANTS))
def test_the_file_holds_llama_cpps_mix(tmp_path, quant):
    """Every matrix in the type llama.cpp's quantizer gives it: Q8_0 and Q6_K throughout,
    Q4_K_M's Q6_K embedding and attn_v / ffn_down in layers 0, 3, 6, 7 of 8; rows of 288
    weights (not whole 256-weight blocks) fall back to Q5_0 / Q8_0; vectors F32."""
    path = tmp_path / "m.gguf"
    synthetic.write_model(path, tiny("qwen3", ffn=288), quant)
    found = types(path)
    assert {found[n] for n in found if "norm" in n} == {"F32"}
    more = {0, 3, 6, 7}
    for i in range(8):
        for name in ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up"):
            expected = {"Q8_0": "Q8_0", "Q6_K": "Q6_K"}.get(quant)
            if expected is None:
                expected = "Q6_K" if name == "attn_v" and i in more else "Q4_K"
            assert found[f"blk.{i}.{name}.weight"] == expected, (i, name)
        down = {"Q8_0": "Q8_0", "Q6_K": "Q8_0"}.get(quant, "Q8_0" if i in more else "Q5_0")
        assert found[f"blk.{i}.ffn_down.weight"] == down, i
    assert found["token_embd.weight"] == {"Q8_0": "Q8_0"}.get(quant, "Q6_K")
    assert "output.weight" not in found  # tied


@pytest.mark.parametrize("kind", ["Q4_K", "Q6_K", "Q8_0", "Q5_0"])
def test_random_blocks_have_the_scale_of_an_initialization(kind):
    """gguf's own dequantization of the blocks: mean about 0, standard deviation k^-1/2."""
    rng = np.random.default_rng(1)
    k = 1024
    raw = synthetic.random_blocks(rng, kind, 300, k)
    weights = gguf.quants.dequantize(raw, gguf.GGMLQuantizationType[kind])
    assert weights.shape == (300, k) and np.isfinite(weights).all()
    assert abs(weights.std() * np.sqrt(k) - 1) < 0.05
    assert abs(weights.mean()) < 0.1 * weights.std()  # Q5_0: (q - 16) has mean -1/2


def test_llama3_rope_factors_are_llama_cpps():
    """The converter's factors for Llama 3.2 (theta 500,000, head 64, factor 32, 1 / 4, 8192):
    1 for wavelengths under 2048, 32 over 8192, between them 1 / ((1 - s) / 32 + s)."""
    spec = synthetic.SPECS["llama3.2-1b"]
    factors = synthetic.llama3_rope_factors(spec)
    wavelength = 2 * np.pi * 500000.0 ** (np.arange(0, 64, 2) / 64)
    assert factors.shape == (32,) and factors.dtype == np.float32
    assert np.all(factors[wavelength < 2048] == 1) and np.all(factors[wavelength > 8192] == 32)
    between = (wavelength >= 2048) & (wavelength <= 8192)
    s = (8192 / wavelength[between] - 1) / 3
    np.testing.assert_allclose(factors[between], 1 / ((1 - s) / 32 + s), rtol=1e-6)


@pytest.mark.parametrize("arch", ["qwen3", "llama", "qwen2"])
def test_corral_loads_it_with_logits_of_about_one(tmp_path, arch):
    """corral reads the architecture (Qwen3's q/k norms, Llama 3's RoPE scaling from
    rope_freqs, Qwen2's biases) and a prompt's logits are finite, of standard deviation
    about 1 (no activation blows up through the 8 layers)."""
    from corral.model import load_model

    path = tmp_path / "m.gguf"
    synthetic.write_model(path, tiny(arch), "Q4_K_M")
    model = load_model(path, progress=False)
    assert model.config.model_type == arch and model.weights == "quantized"
    assert model.config.qk_norm == (arch == "qwen3")
    assert (model.config.rope_scaling or {}).get("rope_type") == (
        "llama3" if arch == "llama" else None
    )
    logits = model.prefill(model.new_cache(1, 64), 0, np.arange(1, 40))
    assert np.isfinite(logits).all() and 0.3 < logits.std() < 3


@pytest.mark.parametrize("arch", ["qwen3", "llama", "qwen2"])
def test_llama_cpp_reads_the_same_model(tmp_path, arch):
    """llama.cpp (an independent reader of the file's metadata and blocks) and corral give a
    prompt logits that agree to within the error of their 8-bit activations (std about 1)."""
    llama_cpp = pytest.importorskip("llama_cpp")
    from corral.model import load_model

    path = tmp_path / "m.gguf"
    synthetic.write_model(path, tiny(arch), "Q4_K_M")
    ids = list(range(1, 40))
    llm = llama_cpp.Llama(model_path=str(path), n_ctx=64, n_threads=1, verbose=False)
    llm.eval(ids)
    last = llama_cpp.llama_get_logits_ith(llm.ctx, -1)
    reference = np.ctypeslib.as_array(last, shape=(llm.n_vocab(),)).copy()
    model = load_model(path, progress=False)
    logits = model.prefill(model.new_cache(1, 64), 0, np.array(ids))
    assert np.abs(logits - reference).max() < 0.3
    assert np.corrcoef(logits, reference)[0, 1] > 0.99
