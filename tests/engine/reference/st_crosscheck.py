#!/usr/bin/python3
"""safetensors interoperability between partrain and PyTorch, one half of each direction.

    st_crosscheck.py write FILE   write the known tensors below with the Python writer
    st_crosscheck.py check FILE   read FILE (written by partrain) and check the known tensors

The known tensors are defined here and, independently, in safetensors_test.cc.
Exit 0 on success, 1 with a message on a mismatch, 77 when torch is missing (test skip).
"""
import os
import sys

try:
    import torch
except ImportError:
    print("torch is not installed for", sys.executable)
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_min  # noqa: E402


def known():
    f32 = torch.tensor([(i - 7) * 0.375 for i in range(24)], dtype=torch.float32).reshape(2, 3, 4)
    bf16 = torch.tensor([i * 0.5 - 1 for i in range(5)], dtype=torch.bfloat16)
    f16 = torch.tensor([-0.5, -0.25, 0.0, 0.25, 2.0 ** -14, 2.0 ** -24],
                       dtype=torch.float16).reshape(3, 2)
    i32 = torch.tensor([-2 ** 31, -1, 0, 2 ** 31 - 1], dtype=torch.int32)
    i64 = torch.tensor([-(2 ** 40), 2 ** 40 + 3], dtype=torch.int64)
    u16 = torch.tensor([0, 40000, 65535], dtype=torch.int32)
    scalar = torch.tensor(3.5, dtype=torch.float32)
    empty = torch.zeros(0, 3, dtype=torch.float32)
    tensors = {"h.0.attn.c_attn.weight": f32, "bf16": bf16, "f16": f16, "i32": i32,
               "i64": i64, "u16": u16, "scalar": scalar, "empty": empty}
    return tensors, {"format": "pt", "note": "quote \" and backslash \\ and é"}


def main():
    mode, path = sys.argv[1], sys.argv[2]
    want, want_meta = known()
    if mode == "write":
        safetensors_min.save(path, want, want_meta, u16=("u16",))
        return 0
    got, meta = safetensors_min.load(path)
    if meta != want_meta:
        print(f"metadata differs: {meta!r} != {want_meta!r}")
        return 1
    if set(got) != set(want):
        print(f"names differ: {sorted(got)} != {sorted(want)}")
        return 1
    for name, w in want.items():
        g = got[name]
        if name != "u16" and g.dtype != w.dtype:
            print(f"{name}: dtype {g.dtype} != {w.dtype}")
            return 1
        if list(g.shape) != list(w.shape) or not torch.equal(g.to(w.dtype), w):
            print(f"{name}: {g} != {w}")
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
