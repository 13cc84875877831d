"""A minimal, independent safetensors reader and writer (json + struct + torch).

Debian does not package the `safetensors` Python module, so the reference tests use this
one, written from the format's description (an 8-byte little-endian header length, a JSON
header {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}},
then the tensors' bytes, little-endian, row-major), not from partrain's C++ code.
"""
import json
import struct

import torch

# dtype name -> (torch dtype used to hold it, bytes per element)
_DTYPES = {
    "F64": (torch.float64, 8),
    "F32": (torch.float32, 4),
    "F16": (torch.float16, 2),
    "BF16": (torch.bfloat16, 2),
    "I64": (torch.int64, 8),
    "I32": (torch.int32, 4),
    "I16": (torch.int16, 2),
    "U8": (torch.uint8, 1),
    # torch 1.13 has no uint16: U16 is read through int16 and widened to int32.
    "U16": (torch.int16, 2),
}
_NAMES = {torch.float64: "F64", torch.float32: "F32", torch.float16: "F16",
          torch.bfloat16: "BF16", torch.int64: "I64", torch.int32: "I32",
          torch.int16: "I16", torch.uint8: "U8"}


def load(path):
    """Returns ({name: tensor}, {metadata}). Raises ValueError on a malformed file."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise ValueError(f"{path}: shorter than the 8-byte header length")
    (n,) = struct.unpack("<Q", blob[:8])
    if 8 + n > len(blob):
        raise ValueError(f"{path}: header length {n} runs past the end")
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    data = blob[8 + n:]
    meta = header.pop("__metadata__", {}) or {}
    out = {}
    spans = []
    for name, entry in header.items():
        dtype, size = _DTYPES[entry["dtype"]]
        shape = [int(d) for d in entry["shape"]]
        begin, end = (int(x) for x in entry["data_offsets"])
        numel = 1
        for d in shape:
            numel *= d
        if end - begin != numel * size or end > len(data):
            raise ValueError(f"{path}: tensor {name}: offsets {begin},{end} do not fit "
                             f"{entry['dtype']} {shape}")
        spans.append((begin, end))
        raw = bytearray(data[begin:end])  # a writable copy: frombuffer shares memory
        if numel == 0:
            t = torch.empty(shape, dtype=dtype)
        else:
            t = torch.frombuffer(raw, dtype=dtype).reshape(shape)
        if entry["dtype"] == "U16":
            t = t.to(torch.int32) & 0xFFFF
        out[name] = t
    spans.sort()
    at = 0
    for begin, end in spans:
        if begin != at:
            raise ValueError(f"{path}: tensors do not tile the data section")
        at = end
    if at != len(data):
        raise ValueError(f"{path}: bytes after the last tensor")
    return out, meta


def save(path, tensors, metadata=None, u16=()):
    """Writes {name: tensor} in the given order. Names listed in `u16` are stored as U16."""
    header = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    chunks = []
    offset = 0
    for name, t in tensors.items():
        t = t.detach().contiguous().cpu()
        if name in u16:
            if t.numel() and (int(t.min()) < 0 or int(t.max()) > 0xFFFF):
                raise ValueError(f"{name}: values do not fit uint16")
            raw = struct.pack(f"<{t.numel()}H", *[int(v) for v in t.reshape(-1).tolist()])
            dname = "U16"
        else:
            dname = _NAMES[t.dtype]
            # bytes of the tensor's storage, little-endian on every machine torch runs on here
            raw = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {"dtype": dname, "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((8 - (8 + len(text)) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for raw in chunks:
            f.write(raw)
