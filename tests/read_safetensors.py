#!/usr/bin/env python3
"""An independent reader of the safetensors format, with numpy only: 8 bytes of little-endian
header length, the JSON header ({name: {dtype, shape, data_offsets}}, "__metadata__"), the data.

read_safetensors.py --model ARCH,L,C,H,KH,F,V,T A.safetensors [B.safetensors ...]
checks that each file holds exactly the tensors docs/checkpoints.md names for that model, with
their shapes, and that all files hold the same values: exports of the same training state
written under plans that shard it differently, equal to 1e-4 relative or 5e-5 absolute — 5% of
one AdamW step at lr 1e-3, whose update of an element with a near-zero gradient depends on the
order its gradient was summed in. Exit 0 when they do."""
import argparse
import json
import struct
import sys

try:
    import numpy as np
except ImportError:
    sys.exit("numpy is missing: install python3-numpy (scripts/setup.sh does)")


def read(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    tensors = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        if t["dtype"] != "F32":
            sys.exit(f"{path}: {name} is {t['dtype']}, not F32")
        begin, end = t["data_offsets"]
        tensors[name] = np.frombuffer(data[begin:end], dtype="<f4").reshape(t["shape"])
    return tensors


def documented(arch, L, C, H, KH, F, V, T):
    """The names and shapes of docs/checkpoints.md, "Tensor names"."""
    D = C // H
    names = {"wte": (V, C), "lnf_w": (C,)}
    if arch == "gpt":
        names.update({"wpe": (T, C), "lnf_b": (C,)})
    else:
        names["wout"] = (V, C)
    for l in range(L):
        p = f"layer{l}."
        names.update({p + "ln1_w": (C,), p + "ln2_w": (C,), p + "wq": (H * D, C), p + "wk": (KH * D, C),
                      p + "wv": (KH * D, C), p + "wo": (C, H * D)})
        if arch == "gpt":
            names.update({p + "wfc": (F, C), p + "wproj": (C, F), p + "ln1_b": (C,), p + "ln2_b": (C,), p + "bq": (H * D,),
                          p + "bk": (KH * D,), p + "bv": (KH * D,), p + "bo": (C,), p + "bfc": (F,), p + "bproj": (C,)})
        else:
            names.update({p + "wgate": (F, C), p + "wup": (F, C), p + "wdown": (C, F)})
    return names


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("files", nargs="+")
    a = ap.parse_args()
    arch, *dims = a.model.split(",")
    want = documented(arch, *map(int, dims))
    files = [read(f) for f in a.files]
    for path, tensors in zip(a.files, files):
        got = {k: tuple(v.shape) for k, v in tensors.items()}
        if got != want:
            missing, extra = sorted(set(want) - set(got)), sorted(set(got) - set(want))
            wrong = sorted(k for k in set(want) & set(got) if want[k] != got[k])
            sys.exit(f"{path}: missing {missing}, unexpected {extra}, other shapes {wrong}")
        for k, v in tensors.items():
            if not np.all(np.isfinite(v)):
                sys.exit(f"{path}: {k} holds values that are not finite")
    for path, tensors in zip(a.files[1:], files[1:]):
        for k, v in tensors.items():
            if not np.allclose(v, files[0][k], rtol=1e-4, atol=5e-5):
                sys.exit(f"{path}: {k} differs from {a.files[0]} by up to {np.max(np.abs(v - files[0][k]))}")
    print(f"{len(files)} files, {len(want)} tensors each: same names, shapes and values")


if __name__ == "__main__":
    main()
