"""corral.model: SmolLM2 and the Llama family (Llama 3, Mistral, Qwen2/3, Gemma 3 text:
docs/models.md) on the CPU in NumPy: weights, tokenizer, chat template, forward pass with a KV
cache and batched decode (docs/design.md section 6).

Modules: `config` (LlamaConfig from config.json), `weights` (safetensors, GGUF conversion, the
cache dir), `tokenizer`, `chat` (chat templates), `llama` (the forward pass, pure functions),
`kv_cache` (KVCache), `model` (Model: prefill, decode), `loading` (load_model), `generate` (the
batched generation engine), `generation_request` (its requests, results and their checks),
`errors`.

    from corral.model import load_model
    model = load_model()                       # downloads and converts the default model once
    ids = model.tokenizer.encode(model.render_chat([{"role": "user", "content": "Hi"}]))
    cache = model.new_cache(n_slots=8, max_len=1024)
    logits = model.prefill(cache, 0, ids)      # float32 [V]
    logits = model.decode(cache, [0], [int(logits.argmax())])   # float32 [1, V]
"""

from corral.model.chat import render_chat
from corral.model.config import LlamaConfig
from corral.model.errors import (
    CacheError,
    ChatTemplateError,
    ContextLengthError,
    ModelError,
    ModelLoadError,
    RequestError,
)
from corral.model.kv_cache import KVCache
from corral.model.loading import download_wheel, load_folder, load_model
from corral.model.model import Model
from corral.model.tokenizer import Tokenizer
from corral.model.weights import cache_dir, convert_gguf

__all__ = [
    "CacheError",
    "ChatTemplateError",
    "ContextLengthError",
    "KVCache",
    "LlamaConfig",
    "Model",
    "ModelError",
    "ModelLoadError",
    "RequestError",
    "Tokenizer",
    "cache_dir",
    "convert_gguf",
    "download_wheel",
    "load_folder",
    "load_model",
    "render_chat",
]
