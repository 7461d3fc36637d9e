"""A GGUF file's tensors as they are stored, memory-mapped, beside its model metadata (the
format is ggml's `gguf.md`: a header, key-value metadata, a table of tensor infos, then the
tensors' data at `general.alignment`).

`read_gguf_file(path)` parses the header and the tensor table in one pass over the metadata,
decoding every key except the tokenizer's arrays (skipped: `corral.model.gguf_tokenizer` reads
those), and maps the file once: `GGUFFile.raw(name)` is a tensor's bytes as rows (no copy,
nothing read until used), `GGUFFile.floats(name)` a float tensor (F32, F16, BF16) or a block
tensor dequantized by `gguf.quants` as float32. `gguf.GGUFReader` would build a NumPy view per
array item: over a minute and 0.7 GB for Gemma 3's 262k-token vocabulary.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from corral.model.errors import ModelLoadError
from corral.model.gguf_metadata import read_fields, read_string

FLOAT_TYPES = ("F32", "F16", "BF16")
"""The tensor types read as float arrays."""


@dataclass(frozen=True)
class TensorInfo:
    """One tensor of the table.

    Attributes:
        name: its GGUF name ("blk.0.attn_q.weight").
        kind: its ggml type's name ("F32", "Q4_K", ...).
        shape: NumPy order (ggml's `ne` reversed): a matrix W [n_out, k] is (n_out, k).
        offset: its first byte in the file.
        nbytes: its size in bytes.
    """

    name: str
    kind: str
    shape: tuple[int, ...]
    offset: int
    nbytes: int


@dataclass(frozen=True, eq=False)
class GGUFFile:
    """A parsed GGUF file (`read_gguf_file`).

    Attributes:
        path: the file.
        fields: key -> value of every metadata key but the `tokenizer.` arrays (scalars as
            Python values, arrays as lists).
        tensors: name -> `TensorInfo`, in the file's order.
        data: the whole file, memory-mapped read-only (uint8).
        mapping: the `mmap.mmap` under `data`.
    """

    path: Path
    fields: dict
    tensors: dict[str, TensorInfo]
    data: np.ndarray
    mapping: mmap.mmap

    def release(self) -> None:
        """Drop the file's pages from the process's resident set (`madvise(MADV_DONTNEED)`;
        a no-op where the platform lacks it): after the weights are laid out, only the
        embedding's rows are read again, and they are mapped back as they are looked up (the
        pages stay in the page cache)."""
        advice = getattr(mmap, "MADV_DONTNEED", None)
        if advice is not None:
            self.mapping.madvise(advice)

    def raw(self, name: str) -> np.ndarray:
        """A tensor's bytes, one row of its last axis a row: uint8 [rows, bytes per row], a
        read-only view of the mapped file.

        Raises:
            ModelLoadError: naming the file, if the tensor is missing.
        """
        info = self.info(name)
        rows = int(np.prod(info.shape[:-1], dtype=np.int64))
        return self.data[info.offset : info.offset + info.nbytes].reshape(rows, -1)

    def info(self, name: str) -> TensorInfo:
        """The tensor's `TensorInfo`. Raises `ModelLoadError` naming the file if it is missing."""
        info = self.tensors.get(name)
        if info is None:
            raise ModelLoadError(self.path, f"tensor {name!r} is missing")
        return info

    def floats(self, name: str) -> np.ndarray:
        """A tensor as float32 in its shape: F32 as a view of the file, F16 and BF16 widened, block
        types dequantized (`gguf.quants.dequantize`).

        Raises:
            ModelLoadError: naming the file, for a missing tensor or a type gguf cannot decode.
        """
        info = self.info(name)
        raw = self.data[info.offset : info.offset + info.nbytes]
        if info.kind == "F32":
            return raw.view("<f4").reshape(info.shape)
        if info.kind == "F16":
            return raw.view("<f2").astype(np.float32).reshape(info.shape)
        if info.kind == "BF16":
            return (raw.view("<u2").astype(np.uint32) << 16).view(np.float32).reshape(info.shape)
        return dequantize_rows(self.raw(name), info.kind, self.path, name).reshape(info.shape)


def dequantize_rows(raw: np.ndarray, kind: str, path=None, name: str = "") -> np.ndarray:
    """Rows of blocks of `kind` in float32 (`gguf.quants.dequantize`, ggml's formulas).
    uint8 [n, bytes per row] -> float32 [n, weights per row]

    Raises:
        ModelLoadError: naming `path` and the tensor, for a type gguf cannot dequantize.
    """
    import gguf  # deferred: about 0.3 s of imports

    try:
        kind_type = gguf.GGMLQuantizationType[kind]
        out = gguf.quants.dequantize(np.asarray(raw), kind_type)
    except (KeyError, NotImplementedError, ValueError) as error:
        raise ModelLoadError(path, f"tensor {name!r} of type {kind} cannot be read") from error
    return np.asarray(out, dtype=np.float32).reshape(raw.shape[0], -1)


def read_gguf_file(path: str | Path) -> GGUFFile:
    """Parse a GGUF file's metadata and tensor table and memory-map it.

    Raises:
        ModelLoadError: naming the file, when it is missing, not GGUF (versions 2 and 3), or
            truncated, or a tensor's type, shape or data lies outside what ggml defines or past
            the end of the file.
    """
    path = Path(path)
    if not path.is_file():
        raise ModelLoadError(path, "file not found")
    with open(path, "rb") as file:
        try:
            buffer = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
        except ValueError as error:  # an empty file
            raise ModelLoadError(path, f"not a readable GGUF file: {error}") from error
    try:
        fields, tensors = _parse(buffer, path)
    except (struct.error, ValueError, IndexError, UnicodeDecodeError) as error:
        raise ModelLoadError(
            path, f"not a readable GGUF file: truncated or malformed: {error}"
        ) from error
    return GGUFFile(path, fields, tensors, np.frombuffer(buffer, np.uint8), buffer)


def _parse(buffer, path: Path) -> tuple[dict, dict[str, TensorInfo]]:
    import gguf  # the block sizes of ggml's types

    fields, at, n_tensors = read_fields(buffer, path, lambda key: not key.startswith("tokenizer."))
    infos = []
    for _ in range(n_tensors):
        name, at = read_string(buffer, at)
        (n_dims,) = struct.unpack_from("<I", buffer, at)
        dims = struct.unpack_from(f"<{n_dims}Q", buffer, at + 4)
        kind, offset = struct.unpack_from("<IQ", buffer, at + 4 + 8 * n_dims)
        at += 4 + 8 * n_dims + 12
        try:
            kind_name = gguf.GGMLQuantizationType(kind).name
            weights, size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(kind)]
        except (ValueError, KeyError):
            raise ModelLoadError(path, f"tensor {name!r} has unknown ggml type {kind}") from None
        if not dims or dims[0] % weights:
            raise ModelLoadError(
                path, f"tensor {name!r}: rows of {dims[0] if dims else 0} are not whole "
                f"{kind_name} blocks of {weights}"
            )  # fmt: skip
        nbytes = int(np.prod(dims, dtype=np.int64)) // weights * size
        infos.append((name, kind_name, tuple(int(n) for n in reversed(dims)), offset, nbytes))
    alignment = int(fields.get("general.alignment", 32))
    start = -(-at // alignment) * alignment
    tensors = {}
    for name, kind_name, shape, offset, nbytes in infos:
        if start + offset + nbytes > len(buffer):
            raise ModelLoadError(path, f"tensor {name!r} runs past the end of the file")
        tensors[name] = TensorInfo(name, kind_name, shape, start + offset, nbytes)
    return fields, tensors
