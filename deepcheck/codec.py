"""State tree <-> JSON skeleton + flat byte stream.

Only tensors and byte buffers are bulk data: they are laid out back to back (each aligned to 64 bytes)
in one flat stream that is sharded and shipped with buffer-protocol sends, never pickled. Everything
else (numbers, strings, the shape of the containers) is small and becomes a JSON skeleton stored in the
manifest. Tagged JSON rather than pickle so that loading a checkpoint never runs code, and so that every
supported type round-trips exactly: tuples stay tuples, integer dict keys stay integers, -0.0 and NaN
survive. Anything else is refused at save time with the path of the offending value.

torch is imported only when a tensor is met, so holder ranks (and byte-only states) never load it.
"""

from __future__ import annotations

import base64
import ctypes
import json
import zlib
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from . import lazytorch
from .errors import StateError

ALIGN = 64
TAG = "$"


@dataclass(frozen=True)
class Leaf:
    kind: str  # "tensor", "bytes" or "bytearray"
    offset: int  # first byte in the flat stream
    nbytes: int  # payload size
    dtype: str = ""  # torch dtype name, tensors only ("float32")
    shape: tuple[int, ...] = ()  # tensor shape

    def to_json(self) -> list[Any]:
        return [self.kind, self.offset, self.nbytes, self.dtype, list(self.shape)]

    @classmethod
    def from_json(cls, raw: list[Any]) -> Leaf:
        kind, offset, nbytes, dtype, shape = raw
        return cls(kind, int(offset), int(nbytes), str(dtype), tuple(int(d) for d in shape))


@dataclass(frozen=True)
class Elsewhere:
    """A bytearray leaf that another trainer holds (DeepCheck.save's `owners`): laid out as that trainer's
    bytearray of `nbytes` is, so every trainer's layout agrees, and never read here (it lies outside this
    trainer's range of the stream)."""

    nbytes: int


@dataclass
class Flattened:
    skeleton: Any  # JSON-able tree with {"$": "leaf", "i": k} where bulk data was
    leaves: list[Leaf] = field(default_factory=list)
    sources: list[Any] = field(
        default_factory=list
    )  # contiguous tensors or memoryviews, one per leaf (None: Elsewhere)
    total: int = 0  # size of the flat stream

    def layout(self) -> dict[str, Any]:
        return {"skeleton": self.skeleton, "leaves": [leaf.to_json() for leaf in self.leaves]}

    def layout_crc(self) -> int:
        """Fingerprint of the layout; trainers that disagree on it hold different states."""
        return zlib.crc32(json.dumps(self.layout(), sort_keys=True).encode())


def _is_tensor(obj: Any) -> bool:
    torch = lazytorch.loaded()
    return torch is not None and isinstance(obj, torch.Tensor)


def _is_dtype(obj: Any) -> bool:
    torch = lazytorch.loaded()
    return torch is not None and isinstance(obj, torch.dtype)


def _dtype_name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


def _plain_tensor(t: Any, path: str) -> Any:
    import torch

    if t.layout != torch.strided or t.is_quantized or t.device.type == "meta":
        raise StateError(
            f"{path}: {t.layout} / quantized / meta tensors cannot be checkpointed; convert to a dense tensor"
        )
    return t.detach().contiguous()


class _Encoder:
    def __init__(self, inline: bool):
        self.inline = inline
        self.out = Flattened(skeleton=None)

    def payload(self, kind: str, src: Any, nbytes: int, dtype: str = "", shape: tuple[int, ...] = ()) -> Any:
        offset = -(-self.out.total // ALIGN) * ALIGN
        self.out.leaves.append(Leaf(kind, offset, nbytes, dtype, shape))
        self.out.sources.append(src)
        self.out.total = offset + nbytes
        return {TAG: "leaf", "i": len(self.out.leaves) - 1}

    def encode(self, obj: Any, path: str) -> Any:
        if obj is None or isinstance(obj, (bool, str)):
            return obj
        if isinstance(obj, int):
            return int(obj)
        if isinstance(obj, float):
            return float(obj)
        if isinstance(obj, complex):
            return {TAG: "complex", "v": [obj.real, obj.imag]}
        if isinstance(obj, Elsewhere) and not self.inline:
            return self.payload("bytearray", None, obj.nbytes)
        if isinstance(obj, (bytes, bytearray)):
            kind = type(obj).__name__
            if self.inline:
                return {TAG: kind, "b64": base64.b64encode(obj).decode()}
            return self.payload(kind, memoryview(obj), len(obj))
        if _is_tensor(obj):
            t = _plain_tensor(obj, path)
            if self.inline:
                return {
                    TAG: "tensor",
                    "dtype": _dtype_name(t.dtype),
                    "shape": list(t.shape),
                    "b64": base64.b64encode(_tensor_bytes(t)).decode(),
                }
            return self.payload("tensor", t, t.numel() * t.element_size(), _dtype_name(t.dtype), tuple(t.shape))
        if _is_dtype(obj):
            return {TAG: "dtype", "v": _dtype_name(obj)}
        if type(obj) in (dict, OrderedDict):
            kind = "dict" if type(obj) is dict else "odict"
            return {
                TAG: kind,
                "items": [
                    [self.encode(k, f"{path} key {k!r}"), self.encode(v, f"{path}[{k!r}]")] for k, v in obj.items()
                ],
            }
        if type(obj) in (list, tuple):
            items = [self.encode(v, f"{path}[{i}]") for i, v in enumerate(obj)]
            return items if type(obj) is list else {TAG: "tuple", "items": items}
        if type(obj) in (set, frozenset):
            return {TAG: type(obj).__name__, "items": [self.encode(v, f"{path} item") for v in obj]}
        raise StateError(
            f"{path}: cannot checkpoint a value of type {type(obj).__module__}.{type(obj).__qualname__}; "
            "supported: tensors, bytes, bytearray, None, bool, int, float, complex, str, torch.dtype, "
            "and dict/OrderedDict/list/tuple/set of those"
        )


def flatten(state: Any, *, inline: bool = False) -> Flattened:
    """Split `state` into a JSON skeleton and bulk leaves; with `inline=True` bulk data goes into the JSON."""
    enc = _Encoder(inline)
    enc.out.skeleton = enc.encode(state, "state")
    return enc.out


def _tensor_bytes(t: Any) -> bytes:
    """Raw bytes of a small tensor (used for inline rank state such as RNG states)."""
    t = t.cpu().contiguous()
    return ctypes.string_at(t.data_ptr(), t.numel() * t.element_size())


def _tensor_from(buf: bytearray, offset: int, nbytes: int, dtype: str, shape: tuple[int, ...]) -> Any:
    import torch

    dt = getattr(torch, dtype, None)
    if not isinstance(dt, torch.dtype):
        raise StateError(f"checkpoint names an unknown torch dtype {dtype!r}")
    t = torch.empty(shape, dtype=dt)
    if nbytes != t.numel() * t.element_size():
        raise StateError(f"checkpoint tensor of {dtype}{list(shape)} claims {nbytes} bytes")
    if nbytes:
        src = torch.frombuffer(buf, dtype=torch.uint8, count=nbytes, offset=offset)
        t.reshape(-1).view(torch.uint8).copy_(src)
    return t


class _Decoder:
    def __init__(self, leaves: list[Leaf], flat: bytearray | None):
        self.leaves = leaves
        self.flat = flat

    def leaf(self, i: int) -> Any:
        leaf = self.leaves[i]
        if self.flat is None or leaf.offset + leaf.nbytes > len(self.flat):
            raise StateError(f"checkpoint leaf {i} lies outside the {len(self.flat or b'')}-byte stream")
        if leaf.kind == "tensor":
            return _tensor_from(self.flat, leaf.offset, leaf.nbytes, leaf.dtype, leaf.shape)
        raw = bytes(memoryview(self.flat)[leaf.offset : leaf.offset + leaf.nbytes])
        return raw if leaf.kind == "bytes" else bytearray(raw)

    def decode(self, node: Any) -> Any:
        if isinstance(node, list):
            return [self.decode(v) for v in node]
        if not isinstance(node, dict):
            return node
        kind = node[TAG]
        if kind == "leaf":
            return self.leaf(node["i"])
        if kind in ("dict", "odict"):
            pairs = [(self.decode(k), self.decode(v)) for k, v in node["items"]]
            return dict(pairs) if kind == "dict" else OrderedDict(pairs)
        if kind in ("tuple", "set", "frozenset"):
            return {"tuple": tuple, "set": set, "frozenset": frozenset}[kind](self.decode(v) for v in node["items"])
        if kind in ("bytes", "bytearray"):
            raw = base64.b64decode(node["b64"])
            return raw if kind == "bytes" else bytearray(raw)
        if kind == "tensor":
            raw = bytearray(base64.b64decode(node["b64"]))
            return _tensor_from(raw, 0, len(raw), node["dtype"], tuple(node["shape"]))
        if kind == "complex":
            return complex(*node["v"])
        if kind == "dtype":
            import torch

            return getattr(torch, node["v"])
        raise StateError(f"checkpoint skeleton has an unknown tag {kind!r}; written by a newer DeepCheck?")


def unflatten(skeleton: Any, leaves: list[Leaf], flat: bytearray | None = None) -> Any:
    """Rebuild the state; tensors come back as contiguous CPU tensors with their own memory."""
    return _Decoder(leaves, flat).decode(skeleton)
