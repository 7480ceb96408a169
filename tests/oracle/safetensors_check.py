"""Parses a safetensors file written by melforge's test with nothing but the
format's definition (8-byte length, JSON header, raw data) and checks the
values through numpy and torch's own bfloat16/float16 decoding."""
import json
import struct
import sys

import numpy as np
import torch

path = sys.argv[1]
raw = open(path, "rb").read()
(n,) = struct.unpack("<Q", raw[:8])
assert (8 + n) % 8 == 0, "header not padded to 8 bytes"
header = json.loads(raw[8 : 8 + n].decode("utf-8"))
data = raw[8 + n :]
assert header["__metadata__"] == {"format": "pt", "producer": "melforge"}, header["__metadata__"]

def tensor(name):
    h = header[name]
    b, e = h["data_offsets"]
    dt = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16, "I32": torch.int32}[h["dtype"]]
    return torch.frombuffer(bytearray(data[b:e]), dtype=dt).reshape(h["shape"])

a = tensor("blocks.0.conv.weight")
assert a.shape == (2, 3) and a.dtype == torch.float32
assert torch.equal(a, torch.arange(6, dtype=torch.float32).reshape(2, 3) - 2.5), a
b = tensor("head.bias")
assert b.dtype == torch.bfloat16 and b.float().tolist() == [1.0, -2.0, 0.5, 3.0], b
c = tensor("fc.weight")
assert c.dtype == torch.float16 and c.float().tolist() == [0.25, -1.0, 65504.0], c
d = tensor("count")
assert d.tolist() == [7, -9]
assert sum(h["data_offsets"][1] - h["data_offsets"][0] for k, h in header.items() if k != "__metadata__") == len(data)
print("safetensors_check: OK")
