"""Read numpy arrays out of pickles without numpy, and without running arbitrary pickled code.

CIFAR-10's python version is a set of pickles holding numpy arrays. numpy is not a dependency (torch
does not need it), and `pickle.load` on a file fetched from S3 would execute whatever globals it names.
This unpickler allows only the handful of globals numpy uses to pickle a plain array and rebuilds each
array as a torch tensor straight from its raw bytes.

Covered: Python 2 pickles as CIFAR ships them (numpy.core.multiarray._reconstruct + BUILD state),
Python 3 pickles of protocol 2-4 (bytes via _codecs.encode) and protocol 5 (numpy._core.numeric
._frombuffer), for numpy 1 and 2 module names.
"""

from __future__ import annotations

import io
import pickle
from typing import Any, BinaryIO

import torch

_TORCH_DTYPES = {
    "u1": torch.uint8,
    "i1": torch.int8,
    "i2": torch.int16,
    "i4": torch.int32,
    "i8": torch.int64,
    "f4": torch.float32,
    "f8": torch.float64,
    "b1": torch.bool,
}


class UnsupportedPickle(ValueError):
    """The pickle names something other than plain numpy arrays and builtin containers."""


def _text(value: str | bytes) -> str:
    return value.decode("latin1") if isinstance(value, bytes) else value


class _DType:
    """Stand-in for numpy.dtype: remembers the kind code and byte order."""

    def __init__(self, code: str | bytes, _align: object = False, _copy: object = True) -> None:
        code = _text(code)
        self.byteorder = code[0] if code[0] in "<>|=" else "|"
        self.code = code.lstrip("<>|=")

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        # (version, byteorder, subdescr, names, fields, elsize, alignment, flags[, metadata])
        if state[3] is not None or state[2] is not None:
            raise UnsupportedPickle("structured numpy dtypes are not supported")
        self.byteorder = _text(state[1])

    def torch_dtype(self) -> torch.dtype:
        if self.byteorder == ">" and self.code not in ("u1", "i1", "b1"):
            raise UnsupportedPickle(f"big-endian arrays are not supported (dtype >{self.code})")
        if self.code not in _TORCH_DTYPES:
            raise UnsupportedPickle(f"numpy dtype {self.code!r} is not supported")
        return _TORCH_DTYPES[self.code]


def _as_tensor(raw: bytes | bytearray, dtype: _DType, shape: tuple[int, ...], fortran: bool) -> torch.Tensor:
    flat = torch.frombuffer(bytearray(raw), dtype=dtype.torch_dtype()) if len(raw) else torch.empty(0)
    if fortran:
        return flat.reshape(shape[::-1]).permute(*reversed(range(len(shape)))).contiguous()
    return flat.reshape(shape)


class _Array:
    """Stand-in for numpy.ndarray while unpickling; `tensor` holds the result once BUILD ran."""

    tensor: torch.Tensor

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        _version, shape, dtype, fortran, raw = state if len(state) == 5 else (0, *state)
        if not isinstance(raw, bytes | bytearray):
            raise UnsupportedPickle("object arrays are not supported")
        self.tensor = _as_tensor(raw, dtype, tuple(shape), bool(fortran))


class _NdarrayClass:
    """Marker for the `numpy.ndarray` global passed to _reconstruct."""


def _reconstruct(cls: object, _shape: object, _typecode: object) -> _Array:
    if cls is not _NdarrayClass:
        raise UnsupportedPickle("only numpy.ndarray can be reconstructed")
    return _Array()


def _frombuffer(buf: bytes | bytearray | pickle.PickleBuffer, dtype: _DType, shape: tuple[int, ...], order: str):
    return _as_tensor(bytes(buf), dtype, tuple(shape), order == "F")


def _codecs_encode(text: str, encoding: str = "utf-8") -> bytes:
    if encoding != "latin1":
        raise UnsupportedPickle(f"unexpected _codecs.encode encoding {encoding!r}")
    return text.encode("latin1")


_ALLOWED: dict[tuple[str, str], object] = {
    ("numpy", "ndarray"): _NdarrayClass,
    ("numpy", "dtype"): _DType,
    ("_codecs", "encode"): _codecs_encode,
}
for _core in ("numpy.core", "numpy._core"):
    _ALLOWED[(f"{_core}.multiarray", "_reconstruct")] = _reconstruct
    _ALLOWED[(f"{_core}.numeric", "_frombuffer")] = _frombuffer


class _ArrayUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        try:
            return _ALLOWED[(module, name)]
        except KeyError:
            raise UnsupportedPickle(f"refusing to load global {module}.{name}") from None


def _tensors(value: Any) -> Any:
    """Replace array stand-ins inside builtin containers with their tensors."""
    if isinstance(value, _Array):
        return value.tensor
    if isinstance(value, dict):
        return {key: _tensors(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_tensors(item) for item in value)
    return value


def load_array_pickle(stream: BinaryIO | bytes) -> Any:
    """Unpickle ``stream`` (a file or its bytes) with numpy arrays as torch tensors.

    Byte strings from Python 2 stay bytes (``encoding="bytes"``), as CIFAR's own loader does.
    Raises UnsupportedPickle for anything beyond arrays and builtins, pickle.UnpicklingError (or
    EOFError) for a damaged file.
    """
    if isinstance(stream, bytes):
        stream = io.BytesIO(stream)
    return _tensors(_ArrayUnpickler(stream, encoding="bytes").load())
