"""A GGUF file's metadata (its key-value section), read without its tensors.

`gguf.GGUFReader` maps every item of every array to its own NumPy view, which takes tens of
seconds on a 262k-token vocabulary with half a million merges; the metadata section is a plain
sequence of typed values (GGUF versions 2 and 3), read here in one pass: arrays of numbers with
`numpy.frombuffer`, strings decoded as UTF-8 (an invalid byte becomes U+FFFD).
"""

from __future__ import annotations

import mmap
import struct
from pathlib import Path

import numpy as np
from corral.model.errors import ModelLoadError

_STRING, _ARRAY = 8, 9
# GGUF value type -> NumPy dtype (little-endian files; version 2 and 3).
_NUMBERS = {
    0: "<u1",
    1: "<i1",
    2: "<u2",
    3: "<i2",
    4: "<u4",
    5: "<i4",
    6: "<f4",
    7: "?",
    10: "<u8",
    11: "<i8",
    12: "<f8",
}


def read_gguf_metadata(path: str | Path, prefixes: tuple[str, ...] = ()) -> dict[str, object]:
    """The key -> value metadata of a GGUF file.

    Args:
        path: the GGUF file.
        prefixes: keep only the keys starting with one of these (all keys when empty); the
            others are skipped over, not decoded.

    Returns:
        Scalars as Python `int`, `float`, `bool` or `str`; arrays as Python lists (of numbers,
        strings or lists).

    Raises:
        ModelLoadError: naming the file, when it is missing, not GGUF, of a version other than
            2 or 3, or its metadata is truncated or holds an unknown value type.
    """
    path = Path(path)
    if not path.is_file():
        raise ModelLoadError(path, "file not found")
    with open(path, "rb") as file:
        try:
            buffer = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
        except ValueError as error:  # an empty file
            raise ModelLoadError(path, f"not a GGUF file: {error}") from error
        with buffer:
            try:
                return _read(buffer, prefixes, path)
            except (struct.error, ValueError, IndexError) as error:
                raise ModelLoadError(
                    path, f"truncated or malformed GGUF metadata: {error}"
                ) from error


def _read(buffer, prefixes: tuple[str, ...], path: Path) -> dict[str, object]:
    fields, _, _ = read_fields(buffer, path, lambda key: not prefixes or key.startswith(prefixes))
    return {key: value for key, value in fields.items() if not prefixes or key.startswith(prefixes)}


def read_fields(buffer, path: Path, keep) -> tuple[dict[str, object], int, int]:
    """The header and key-value section of a GGUF file in `buffer` (bytes or an mmap):
    (fields, the offset just after them, the file's tensor count). Arrays of the keys for which
    `keep(key)` is false are skipped over, not decoded, and left out; scalars are all kept.

    Raises:
        ModelLoadError: naming `path`, for a file that is not GGUF, of a version other than 2 or
            3, or holds an unknown value type; `struct.error`, `ValueError` or `IndexError` for a
            truncated one (the callers name the file).
    """
    magic, version = struct.unpack_from("<4sI", buffer, 0)
    if magic != b"GGUF":
        raise ModelLoadError(path, "not a GGUF file (no GGUF magic)")
    if version not in (2, 3):
        raise ModelLoadError(path, f"GGUF version {version} is not supported (only 2 and 3)")
    n_tensors, count = struct.unpack_from("<QQ", buffer, 8)
    at, fields = 24, {}
    for _ in range(count):
        key, at = read_string(buffer, at)
        (kind,) = struct.unpack_from("<I", buffer, at)
        value, at = _value(buffer, at + 4, kind, keep(key), path)
        if value is not None:
            fields[key] = value
    return fields, at, n_tensors


def read_string(buffer, at: int) -> tuple[str, int]:
    """(the GGUF string at byte `at`, the offset after it); invalid UTF-8 becomes U+FFFD."""
    (length,) = struct.unpack_from("<Q", buffer, at)
    end = at + 8 + length
    if end > len(buffer):
        raise ValueError(f"a string runs past the end of the file at byte {at}")
    return buffer[at + 8 : end].decode("utf-8", errors="replace"), end


def _value(buffer, at: int, kind: int, keep: bool, path: Path) -> tuple[object, int]:
    """(value, the offset after it) of a value of GGUF type `kind` at `at`; an array is skipped
    (None) unless `keep`."""
    if kind == _STRING:
        return read_string(buffer, at)
    if kind in _NUMBERS:
        dtype = np.dtype(_NUMBERS[kind])
        return np.frombuffer(buffer, dtype, 1, at)[0].item(), at + dtype.itemsize
    if kind != _ARRAY:
        raise ModelLoadError(path, f"unknown GGUF value type {kind} at byte {at}")
    item, n = struct.unpack_from("<IQ", buffer, at)
    at += 12
    if item in _NUMBERS:
        dtype = np.dtype(_NUMBERS[item])
        end = at + n * dtype.itemsize
        if end > len(buffer):
            raise ValueError(f"an array runs past the end of the file at byte {at}")
        return (np.frombuffer(buffer, dtype, n, at).tolist() if keep else None), end
    items = []
    for _ in range(n):
        if item == _STRING and not keep:  # skipped without decoding
            at += 8 + struct.unpack_from("<Q", buffer, at)[0]
            continue
        value, at = _value(buffer, at, item, keep, path)
        items.append(value)
    return (items if keep else None), at
