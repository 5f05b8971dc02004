#!/usr/bin/env python3
"""An independent Megatron indexed dataset (MMIDIDX version 1) writer and
reader, written from the published layout of Megatron-LM's
megatron/core/datasets/indexed_dataset.py (python3 standard library only):

    PREFIX.idx, little-endian:
      9 bytes  magic  b"MMIDIDX\\x00\\x00"
      u64      version = 1
      u8       dtype code: 1 u8, 2 i8, 3 i16, 4 i32, 5 i64, 6 f64, 7 f32, 8 u16
      u64      sequence count S
      u64      document count + 1 = N
      i32[S]   sequence lengths (tokens)
      i64[S]   byte offset of each sequence in PREFIX.bin
      i64[N]   document index: first sequence of each document, last = S
    PREFIX.bin: the tokens.

  megatron_indexed.py write PREFIX DTYPE_CODE DOCS_JSON
      DOCS_JSON: a list of documents, each a list of sequences (lists of ids).
  megatron_indexed.py read PREFIX
      prints {"dtype": name, "documents": n, "sequences": s, "ids": [[...] per document]}
"""
import json
import struct
import sys

DTYPES = {1: ("B", "uint8"), 2: ("b", "int8"), 3: ("h", "int16"), 4: ("i", "int32"),
          5: ("q", "int64"), 6: ("d", "float64"), 7: ("f", "float32"), 8: ("H", "uint16")}


def write(prefix, code, docs):
    fmt = "<" + DTYPES[code][0]
    size = struct.calcsize(fmt)
    lengths, pointers, doc_index, offset = [], [], [0], 0
    with open(prefix + ".bin", "wb") as b:
        for doc in docs:
            for seq in doc:
                b.write(b"".join(struct.pack(fmt, t) for t in seq))
                lengths.append(len(seq))
                pointers.append(offset)
                offset += len(seq) * size
            doc_index.append(len(lengths))
    with open(prefix + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00")
        f.write(struct.pack("<Q", 1))
        f.write(struct.pack("<B", code))
        f.write(struct.pack("<Q", len(lengths)))
        f.write(struct.pack("<Q", len(doc_index)))
        f.write(struct.pack("<%di" % len(lengths), *lengths))
        f.write(struct.pack("<%dq" % len(pointers), *pointers))
        f.write(struct.pack("<%dq" % len(doc_index), *doc_index))


def read(prefix):
    idx = open(prefix + ".idx", "rb").read()
    binary = open(prefix + ".bin", "rb").read()
    assert idx[:9] == b"MMIDIDX\x00\x00", "magic"
    (version,) = struct.unpack_from("<Q", idx, 9)
    assert version == 1, version
    code = idx[17]
    s, n = struct.unpack_from("<QQ", idx, 18)
    at = 34
    lengths = struct.unpack_from("<%di" % s, idx, at)
    at += 4 * s
    pointers = struct.unpack_from("<%dq" % s, idx, at)
    at += 8 * s
    doc_index = struct.unpack_from("<%dq" % n, idx, at)
    assert at + 8 * n == len(idx), "size"
    fmt = "<" + DTYPES[code][0]
    size = struct.calcsize(fmt)
    docs = []
    for d in range(n - 1):
        ids = []
        for q in range(doc_index[d], doc_index[d + 1]):
            ids.extend(struct.unpack_from("<%d%s" % (lengths[q], fmt[1]), binary, pointers[q]))
            assert pointers[q] + lengths[q] * size <= len(binary), "pointer"
        docs.append(ids)
    return {"dtype": DTYPES[code][1], "documents": n - 1, "sequences": s, "ids": docs}


if __name__ == "__main__":
    if sys.argv[1] == "write":
        write(sys.argv[2], int(sys.argv[3]), json.load(open(sys.argv[4])))
    elif sys.argv[1] == "read":
        print(json.dumps(read(sys.argv[2])))
    else:
        sys.exit(__doc__)
