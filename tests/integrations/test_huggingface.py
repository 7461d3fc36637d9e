"""The transformers LogitsProcessor: outputs of `model.generate` under a regex or a JSON Schema
validate with `re.fullmatch` / `jsonschema` (independent of corral's compiler), decoded by the
tokenizer itself. Models: tiny random Llamas built from a config (no hub), and the real SmolLM2
weights from corral's cache folder (slow)."""

from __future__ import annotations

import json
import re

import jsonschema
import pytest

pytest.importorskip("transformers", reason="transformers is not installed (corral[transformers])")
import torch  # noqa: E402
from corral.integrations.huggingface import (  # noqa: E402
    CorralLogitsProcessor,
    hf_vocabulary,
    logits_processor,
)
from corral.integrations.rows import grammar_index  # noqa: E402
from corral.kernels import Constraint, VocabularyError  # noqa: E402
from corral.model.loading import default_model_folder  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from tokenizers import Tokenizer, decoders, models, pre_tokenizers  # noqa: E402
from transformers import (  # noqa: E402
    LlamaConfig,
    LlamaForCausalLM,
    LogitsProcessorList,
    PreTrainedTokenizerFast,
)

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 6},
        "age": {"type": "integer"},
        "ok": {"type": "boolean"},
    },
    "required": ["name", "age"],
}
REGEX = r"(cat|car|dog)s? [0-9]{1,3}"


@pytest.fixture(scope="module")
def smol_tokenizer():
    return PreTrainedTokenizerFast.from_pretrained(str(default_model_folder(progress=False)))


def tiny_llama(vocab_size: int, eos: int, seed: int) -> LlamaForCausalLM:
    """A randomly initialized 2-layer Llama (float32, eval mode)."""
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        eos_token_id=eos,
        bos_token_id=None,
        pad_token_id=eos,
    )
    return LlamaForCausalLM(config).eval()


def generate(model, tokenizer, prompts, processors, max_new_tokens, **options):
    """(the generated texts, decoded by the tokenizer with special tokens skipped, one per row;
    whether each row stopped on EOS). `generate` reports no finish reason: a row stops on EOS
    (and is then padded with `pad_token_id`, EOS here), else max_new_tokens cut it."""
    inputs = tokenizer(prompts, return_tensors="pt", padding=True)
    with torch.no_grad():
        out = model.generate(
            **inputs,
            logits_processor=processors,
            max_new_tokens=max_new_tokens,
            pad_token_id=tokenizer.eos_token_id,
            **options,
        )
    new = out[:, inputs["input_ids"].shape[1] :]
    eos = torch.tensor(model.generation_config.eos_token_id)
    stopped = torch.isin(new, eos).any(1).tolist()
    return [tokenizer.decode(row, skip_special_tokens=True) for row in new], stopped


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_llama_sampled_schema_outputs_validate(smol_tokenizer, seed):
    tokenizer = smol_tokenizer
    tokenizer.padding_side = "left"
    model = tiny_llama(len(tokenizer), tokenizer.eos_token_id, seed)
    processors = logits_processor(tokenizer, schema=SCHEMA, max_new_tokens=40)
    torch.manual_seed(seed)
    texts, stopped = generate(model, tokenizer, ["Hi", "Who are you?", "x"], processors, 40,
                              do_sample=True, num_return_sequences=2)  # fmt: skip
    assert len(texts) == 6 and all(stopped)
    for text in texts:
        jsonschema.validate(json.loads(text), SCHEMA)


def test_random_llama_greedy_regex_and_eos(smol_tokenizer):
    tokenizer = smol_tokenizer
    tokenizer.padding_side = "left"
    model = tiny_llama(len(tokenizer), tokenizer.eos_token_id, 3)
    processors = logits_processor(tokenizer, regex=REGEX, max_new_tokens=12)
    texts, stopped = generate(model, tokenizer, ["a", "bb"], processors, 12, do_sample=False)
    assert all(stopped)
    for text in texts:
        assert re.fullmatch(REGEX, text, re.ASCII), text
    processors = logits_processor(tokenizer, regex="yes|no", max_new_tokens=8)
    texts, stopped = generate(model, tokenizer, ["a", "bb"], processors, 8, do_sample=False)
    assert all(stopped) and all(text in ("yes", "no") for text in texts)


def test_one_grammar_per_batch_item(smol_tokenizer):
    tokenizer = smol_tokenizer
    tokenizer.padding_side = "left"
    model = tiny_llama(len(tokenizer), tokenizer.eos_token_id, 4)
    patterns = ["[a-z]{3}", "[0-9]{2}-[0-9]{2}"]
    vocabulary = hf_vocabulary(tokenizer)
    processors = logits_processor(tokenizer, regex=patterns, max_new_tokens=10,
                                  vocabulary=vocabulary)  # fmt: skip
    torch.manual_seed(0)
    texts, stopped = generate(model, tokenizer, ["one", "two"], processors, 10, do_sample=True,
                              num_return_sequences=3)  # fmt: skip
    assert all(stopped)
    for i, text in enumerate(texts):
        assert re.fullmatch(patterns[i // 3], text, re.ASCII), (i, text)


def test_beam_search_outputs_validate(smol_tokenizer):
    tokenizer = smol_tokenizer
    tokenizer.padding_side = "left"
    model = tiny_llama(len(tokenizer), tokenizer.eos_token_id, 5)
    processors = logits_processor(tokenizer, schema=SCHEMA, max_new_tokens=30)
    texts, stopped = generate(model, tokenizer, ["Hi", "Hello there"], processors, 30,
                              num_beams=3, num_return_sequences=3, do_sample=False)  # fmt: skip
    assert len(texts) == 6 and all(stopped)
    for text in texts:
        jsonschema.validate(json.loads(text), SCHEMA)


@pytest.fixture(scope="module")
def schema_index(smol_tokenizer):
    return grammar_index(hf_vocabulary(smol_tokenizer), schema=SCHEMA)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(slack=st.integers(0, 12), seed=st.integers(0, 2**16), beams=st.booleans())
def test_every_budget_that_fits_ends_with_eos(smol_tokenizer, schema_index, slack, seed, beams):
    """max_new_tokens from the shortest answer and its EOS up: every row stops on EOS."""
    tokenizer = smol_tokenizer
    tokenizer.padding_side = "left"
    max_new_tokens = Constraint(schema_index).tokens_to_complete() + 1 + slack
    model = tiny_llama(len(tokenizer), tokenizer.eos_token_id, seed)
    processors = LogitsProcessorList([CorralLogitsProcessor([schema_index], max_new_tokens)])
    torch.manual_seed(seed)
    options = {"num_beams": 2, "do_sample": False} if beams else {"do_sample": True}
    texts, stopped = generate(model, tokenizer, ["Hi", "x"], processors, max_new_tokens,
                              num_return_sequences=2, **options)  # fmt: skip
    assert all(stopped), (max_new_tokens, texts)
    for text in texts:
        jsonschema.validate(json.loads(text), SCHEMA)


def byte_fallback_tokenizer() -> PreTrainedTokenizerFast:
    """A SentencePiece-style BPE with byte fallback: specials, the 256 `<0xNN>` tokens, `▁` and
    a few pieces (no merges needed: every piece here is in the vocabulary)."""
    pieces = ["<unk>", "<s>", "</s>", *[f"<0x{b:02X}>" for b in range(256)], "▁"]
    pieces += ["▁{", '"', "name", "age", "ok", "true", "false", ":", ",", "}", "▁x", "1", "2"]
    backend = Tokenizer(
        models.BPE({p: i for i, p in enumerate(pieces)}, [], unk_token="<unk>", byte_fallback=True)
    )
    backend.pre_tokenizer = pre_tokenizers.Metaspace()
    backend.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, unk_token="<unk>", bos_token="<s>", eos_token="</s>",
        pad_token="</s>", padding_side="left",
    )  # fmt: skip


def test_byte_fallback_vocabulary_is_read_and_constrains():
    tokenizer = byte_fallback_tokenizer()
    vocabulary = hf_vocabulary(tokenizer)
    assert vocabulary.tokens[3 + 0x41] == b"A"
    assert vocabulary.tokens[3 + 256] == b" "
    assert vocabulary.eos_ids == (2,)
    model = tiny_llama(len(tokenizer), 2, 6)
    processors = logits_processor(tokenizer, schema=SCHEMA, max_new_tokens=40)
    torch.manual_seed(1)
    texts, stopped = generate(model, tokenizer, ["x", "x x"], processors, 40, do_sample=True,
                              num_return_sequences=2)  # fmt: skip
    assert all(stopped)
    for text in texts:
        jsonschema.validate(json.loads(text), SCHEMA)


def test_vocabulary_without_bytes_is_refused():
    backend = Tokenizer(models.WordPiece({"[UNK]": 0, "a": 1, "##b": 2}, unk_token="[UNK]"))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]", eos_token="a")
    with pytest.raises(VocabularyError, match="neither byte-level nor has byte fallback"):
        hf_vocabulary(tokenizer)


def test_bad_arguments_are_refused(smol_tokenizer):
    with pytest.raises(ValueError, match="exactly one of regex and schema"):
        logits_processor(smol_tokenizer)
    with pytest.raises(ValueError, match="max_new_tokens"):
        logits_processor(smol_tokenizer, regex="a", max_new_tokens=0)


@pytest.mark.slow
def test_real_smollm2_outputs_validate(smol_tokenizer):
    folder = default_model_folder(progress=False)
    tokenizer = smol_tokenizer
    tokenizer.padding_side = "left"
    model = LlamaForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
    messages = [
        [{"role": "user", "content": "Describe a person called Ann, 31, as JSON."}],
        [{"role": "user", "content": "Give me a cat's name and age as JSON."}],
    ]
    prompts = [tokenizer.apply_chat_template(m, tokenize=False, add_generation_prompt=True)
               for m in messages]  # fmt: skip
    eos = model.generation_config.eos_token_id
    processors = logits_processor(tokenizer, schema=SCHEMA, max_new_tokens=40, eos_token_id=eos)
    texts, stopped = generate(model, tokenizer, prompts, processors, 40, do_sample=False)
    assert all(stopped)
    for text in texts:
        jsonschema.validate(json.loads(text), SCHEMA)
    processors = logits_processor(tokenizer, regex=REGEX, max_new_tokens=12, eos_token_id=eos)
    texts, stopped = generate(model, tokenizer, prompts, processors, 12, do_sample=False)
    assert all(stopped)
    for text in texts:
        assert re.fullmatch(REGEX, text, re.ASCII), text
