"""Loading (docs/design.md section 6): Hugging Face folders and GGUF files load, and every broken
file gets a `ModelLoadError` naming it: a missing file, malformed JSON or safetensors, a config of
another architecture, a tensor missing or of the wrong shape. On tiny synthetic checkpoints."""

from __future__ import annotations

import json

import numpy as np
import pytest
from corral.automata.errors import SchemaError
from corral.model import LlamaConfig, ModelError, ModelLoadError, load_model
from corral.model.weights import read_safetensors, unpermute_rows
from safetensors.numpy import save_file


@pytest.fixture
def folder(tmp_path, tiny):
    return tiny.write(tmp_path / "model")


def test_a_hugging_face_folder_loads_and_runs(folder):
    model = load_model(folder)
    assert model.config.num_hidden_layers == 2 and model.vocab_size == 262
    assert model.eos_ids == (2,)
    ids = model.tokenizer.encode(model.render_chat([{"role": "user", "content": "hi"}]))
    assert ids[0] == 1 and model.tokenizer.decode(ids).endswith("<|im_start|>assistant\n")
    logits = model.logits(ids)
    assert logits.shape == (len(ids), 262) and np.isfinite(logits).all()


@pytest.mark.parametrize("name", ["config.json", "model.safetensors", "tokenizer.json"])
def test_a_missing_file_is_named(folder, name):
    (folder / name).unlink()
    with pytest.raises(ModelLoadError, match="not found") as error:
        load_model(folder)
    assert error.value.path.name == name
    assert isinstance(error.value, ModelError) and not isinstance(error.value, SchemaError)


def test_a_missing_folder_is_named(tmp_path):
    with pytest.raises(ModelLoadError, match="no such file") as error:
        load_model(tmp_path / "nowhere")
    assert error.value.path == tmp_path / "nowhere"


@pytest.mark.parametrize("name", ["schema.json", "weights.safetensors", "model"])
def test_a_file_that_is_no_gguf_is_named_as_neither_kind(tmp_path, name):
    """--model names a folder or a .gguf file; any other file is refused as neither."""
    (tmp_path / name).write_text("{}")
    with pytest.raises(ModelLoadError, match="not a folder or a .gguf file") as error:
        load_model(tmp_path / name, progress=False)
    assert error.value.path == tmp_path / name


def test_a_missing_gguf_file_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv("CORRAL_HOME", str(tmp_path / "home"))
    with pytest.raises(ModelLoadError, match="no such file") as error:
        load_model(tmp_path / "absent.gguf", progress=False)
    assert error.value.path == tmp_path / "absent.gguf"
    assert not isinstance(error.value, SchemaError)


def test_generation_config_eos_ids_join_the_config_ones(folder):
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": [0, 2]}))
    assert load_model(folder).eos_ids == (0, 2)


@pytest.mark.parametrize(
    "name", ["config.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json"]
)
def test_malformed_json_is_named(folder, name):
    (folder / name).write_text("{not json")
    with pytest.raises(ModelLoadError, match="malformed") as error:
        load_model(folder)
    assert error.value.path.name == name


@pytest.mark.parametrize(
    "overrides, found",
    [
        ({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]}, "gpt2"),
        ({"model_type": "phi3", "architectures": ["Phi3ForCausalLM"]}, "phi3"),
    ],
)
def test_a_config_of_another_architecture_is_refused(folder, overrides, found, tiny):
    (folder / "config.json").write_text(json.dumps(tiny.config(**overrides)))
    with pytest.raises(ModelLoadError, match=f"architecture '{found}' is not supported") as error:
        load_model(folder)
    assert error.value.path.name == "config.json"


def test_rope_scaling_is_refused_not_ignored(folder, tiny):
    config = tiny.config(rope_scaling={"rope_type": "yarn", "factor": 8.0})
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelLoadError, match="RoPE scaling 'yarn'"):
        load_model(folder)


def test_a_missing_config_key_is_named(folder, tiny):
    config = tiny.config()
    del config["hidden_size"]
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelLoadError, match="missing key 'hidden_size'"):
        load_model(folder)


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"num_key_value_heads": "2"}, "'num_key_value_heads' must be int"),
        ({"rms_norm_eps": "small"}, "'rms_norm_eps' must be float"),
        ({"rope_parameters": [500.0]}, "'rope_parameters' must be an object"),
    ],
)
def test_an_ill_typed_config_value_is_named(folder, tiny, overrides, message):
    (folder / "config.json").write_text(json.dumps(tiny.config(**overrides)))
    with pytest.raises(ModelLoadError, match=message) as error:
        load_model(folder)
    assert error.value.path.name == "config.json"


def test_a_tensor_of_the_wrong_shape_is_named(folder, tiny):
    tensors = tiny.tensors(tiny.config())
    tensors["model.layers.1.self_attn.k_proj.weight"] = np.zeros((8, 32), np.float32)
    save_file(tensors, str(folder / "model.safetensors"))
    with pytest.raises(ModelLoadError, match=r"k_proj.weight' has shape \(8, 32\)") as error:
        load_model(folder)
    assert error.value.path.name == "model.safetensors"
    assert "config.json implies (16, 32)" in str(error.value)


def test_a_config_that_disagrees_with_the_weights_is_a_shape_mismatch(folder, tiny):
    (folder / "config.json").write_text(json.dumps(tiny.config(intermediate_size=64)))
    with pytest.raises(ModelLoadError, match="gate_proj.weight' has shape"):
        load_model(folder)


def test_a_missing_tensor_is_named(folder, tiny):
    tensors = tiny.tensors(tiny.config())
    del tensors["model.norm.weight"]
    save_file(tensors, str(folder / "model.safetensors"))
    with pytest.raises(ModelLoadError, match="'model.norm.weight' is missing"):
        load_model(folder)


def test_a_truncated_safetensors_file_is_named(folder):
    path = folder / "model.safetensors"
    path.write_bytes(path.read_bytes()[:1000])
    with pytest.raises(ModelLoadError) as error:
        load_model(folder)
    assert error.value.path == path


@pytest.mark.parametrize(
    "content, reason",
    [
        (b"\x01\x00", "too short"),
        ((2).to_bytes(8, "little") + b"[]", "expected a JSON object"),
        ((9).to_bytes(8, "little") + b"{}", "longer than the file"),
    ],
)
def test_a_malformed_safetensors_header_is_named(tmp_path, content, reason):
    path = tmp_path / "w.safetensors"
    path.write_bytes(content)
    with pytest.raises(ModelLoadError, match=reason) as error:
        read_safetensors(path)
    assert error.value.path == path


def test_rope_theta_under_rope_parameters_is_read(folder, tiny):
    config = tiny.config()
    theta = config.pop("rope_theta")
    config["rope_parameters"] = {"rope_type": "default", "rope_theta": 500.0}
    assert LlamaConfig.from_dict(config).rope_theta == 500.0
    (folder / "config.json").write_text(json.dumps(config))
    changed = load_model(folder).logits([5, 6, 7])
    config["rope_parameters"]["rope_theta"] = theta
    (folder / "config.json").write_text(json.dumps(config))
    same = load_model(folder).logits([5, 6, 7])
    (folder / "config.json").write_text(json.dumps(tiny.config()))
    np.testing.assert_allclose(load_model(folder).logits([5, 6, 7]), same, atol=1e-6)
    assert not np.allclose(changed, same, atol=1e-3)


def test_bfloat16_and_float16_weights_load_as_float32(tmp_path, tiny):
    tensors = tiny.tensors(tiny.config())
    path = tmp_path / "w.safetensors"
    bf16 = {k: (v.view(np.uint32) >> 16).astype(np.uint16) for k, v in tensors.items()}
    # safetensors.numpy has no bfloat16: write the header by hand
    header, offset, blobs = {}, 0, []
    for name, array in bf16.items():
        header[name] = {
            "dtype": "BF16",
            "shape": list(array.shape),
            "data_offsets": [offset, offset + array.nbytes],
        }
        offset += array.nbytes
        blobs.append(array.tobytes())
    head = json.dumps(header).encode()
    path.write_bytes(len(head).to_bytes(8, "little") + head + b"".join(blobs))
    loaded = read_safetensors(path)
    for name, array in tensors.items():
        assert loaded[name].dtype == np.float32
        np.testing.assert_allclose(loaded[name], array, rtol=1e-2, atol=1e-2)
    save_file({k: v.astype(np.float16) for k, v in tensors.items()}, str(path))
    loaded = read_safetensors(path)
    assert all(loaded[k].dtype == np.float32 for k in tensors)


def llama_cpp_permute(weight, n_heads):
    """llama.cpp's convert_hf_to_gguf permutation of q/k rows (rotary halves interleaved)."""
    rows = weight.shape[0]
    return (
        weight.reshape(n_heads, 2, rows // n_heads // 2, *weight.shape[1:])
        .swapaxes(1, 2)
        .reshape(weight.shape)
    )


def test_unpermute_rows_undoes_llama_cpp_permutation():
    weight = np.random.default_rng(0).standard_normal((6 * 8, 5)).astype(np.float32)
    np.testing.assert_array_equal(unpermute_rows(llama_cpp_permute(weight, 6), 6), weight)


def write_tiny_gguf(path, tiny, config, tensors, architecture="llama", kind=None):
    """A GGUF as llama.cpp's converter writes it (q/k rows permuted): float32, or with every
    matrix quantized to `kind` ("Q4_1", "Q8_0") by gguf's own quantizer."""
    import gguf

    writer = gguf.GGUFWriter(str(path), architecture)
    writer.add_block_count(config["num_hidden_layers"])
    writer.add_context_length(config["max_position_embeddings"])
    writer.add_embedding_length(config["hidden_size"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_head_count(config["num_attention_heads"])
    writer.add_head_count_kv(config["num_key_value_heads"])
    writer.add_layer_norm_rms_eps(config["rms_norm_eps"])
    writer.add_rope_freq_base(config["rope_theta"])
    writer.add_vocab_size(config["vocab_size"])
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("smollm")
    writer.add_token_list(tiny.tokens())
    writer.add_token_types([3] * len(tiny.specials) + [1] * (len(tiny.tokens()) - 3))
    writer.add_token_merges(tiny.merges)
    writer.add_eos_token_id(2)
    writer.add_bos_token_id(1)
    writer.add_chat_template(tiny.chat_template)
    names = {
        "model.embed_tokens.weight": "token_embd.weight",
        "model.norm.weight": "output_norm.weight",
    }
    layer_names = {
        "input_layernorm": "attn_norm",
        "self_attn.q_proj": "attn_q",
        "self_attn.k_proj": "attn_k",
        "self_attn.v_proj": "attn_v",
        "self_attn.o_proj": "attn_output",
        "post_attention_layernorm": "ffn_norm",
        "mlp.gate_proj": "ffn_gate",
        "mlp.up_proj": "ffn_up",
        "mlp.down_proj": "ffn_down",
    }
    for name, array in tensors.items():
        if name in names:
            gguf_name = names[name]
        else:
            _, _, layer, rest = name.split(".", 3)
            gguf_name = f"blk.{layer}.{layer_names[rest.removesuffix('.weight')]}.weight"
        if "q_proj" in name:
            array = llama_cpp_permute(array, config["num_attention_heads"])
        elif "k_proj" in name:
            array = llama_cpp_permute(array, config["num_key_value_heads"])
        if kind is None or array.ndim == 1:
            writer.add_tensor(gguf_name, np.ascontiguousarray(array))
        else:
            block_type = gguf.GGMLQuantizationType[kind]
            raw = gguf.quants.quantize(np.ascontiguousarray(array), block_type)
            writer.add_tensor(gguf_name, raw, raw_dtype=block_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def test_a_gguf_file_loads_as_the_same_model_as_its_hugging_face_folder(
    tmp_path, monkeypatch, tiny
):
    monkeypatch.setenv("CORRAL_HOME", str(tmp_path / "home"))
    config = tiny.config()
    write_tiny_gguf(tmp_path / "tiny.gguf", tiny, config, tiny.tensors(config))
    from_gguf = load_model(tmp_path / "tiny.gguf", progress=False)
    from_folder = load_model(tiny.write(tmp_path / "folder"))
    assert from_gguf.path == tmp_path / "tiny.gguf"  # read directly, nothing converted
    ids = from_folder.tokenizer.encode("<|im_start|>user\nhello 123<|im_end|>")
    assert 261 in ids  # the merged token "hell"
    assert from_gguf.tokenizer.encode("<|im_start|>user\nhello 123<|im_end|>") == ids
    np.testing.assert_allclose(from_gguf.logits(ids), from_folder.logits(ids), atol=1e-5)
    assert from_gguf.render_chat([{"role": "user", "content": "x"}]) == from_folder.render_chat(
        [{"role": "user", "content": "x"}]
    )
    assert from_gguf.eos_ids == (2,)
    assert not (tmp_path / "home" / "models").exists()


def test_a_gguf_of_another_architecture_is_refused(tmp_path, monkeypatch, tiny):
    monkeypatch.setenv("CORRAL_HOME", str(tmp_path / "home"))
    config = tiny.config()
    write_tiny_gguf(
        tmp_path / "other.gguf", tiny, config, tiny.tensors(config), architecture="gpt2"
    )
    with pytest.raises(ModelLoadError, match="architecture 'gpt2' is not supported") as error:
        load_model(tmp_path / "other.gguf", progress=False)
    assert error.value.path == tmp_path / "other.gguf"


def test_a_file_that_is_not_gguf_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv("CORRAL_HOME", str(tmp_path / "home"))
    (tmp_path / "bad.gguf").write_bytes(b"not a gguf file at all")
    with pytest.raises(ModelLoadError, match="not a readable GGUF") as error:
        load_model(tmp_path / "bad.gguf", progress=False)
    assert error.value.path == tmp_path / "bad.gguf"
