#!/usr/bin/python3
"""Token files from a real text corpus that every Debian system has: the copyright texts under
/usr/share/doc/*/copyright (and the licences in /usr/share/common-licenses), one document each,
encoded byte-level (nanoGPT's shakespeare_char idea: one token per byte, vocabulary 256, stored
as uint16).

    make_token_files.py OUT_DIR [--tokens-bytes 64MiB] [--max-docs N]

writes OUT_DIR/tokens.bin (nanoGPT's flat uint16 file, the corpus repeated up to --tokens-bytes)
and OUT_DIR/corpus.idx + corpus.bin (Megatron-LM's MMIDIDX indexed dataset of the documents, uint16,
one sequence per document), plus OUT_DIR/corpus.json (document lengths, for references).
"""
import argparse
import glob
import json
import os
import struct

import numpy as np


def parse_size(text):
    units = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
    for u, m in units.items():
        if text.endswith(u):
            return int(float(text[:-len(u)]) * m)
    return int(text)


def documents(max_docs):
    paths = sorted(glob.glob("/usr/share/doc/*/copyright")) + sorted(glob.glob("/usr/share/common-licenses/*"))
    docs = []
    for p in paths:
        if os.path.isfile(p):
            with open(p, "rb") as f:
                data = f.read()
            if data:
                docs.append(np.frombuffer(data, dtype=np.uint8).astype(np.uint16))
        if max_docs and len(docs) >= max_docs:
            break
    return docs


def write_megatron(prefix, docs):
    """Megatron-LM's indexed dataset, version 1: header, sizes (int32), pointers (int64),
    document indices (int64), as megatron/core/datasets/indexed_dataset.py writes them."""
    with open(prefix + ".bin", "wb") as f:
        for d in docs:
            f.write(d.tobytes())
    sizes = np.array([len(d) for d in docs], dtype=np.int32)
    pointers = np.zeros(len(docs), dtype=np.int64)
    if len(docs) > 1:
        pointers[1:] = np.cumsum(sizes[:-1].astype(np.int64) * 2)
    doc_idx = np.arange(len(docs) + 1, dtype=np.int64)
    with open(prefix + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00")
        f.write(struct.pack("<Q", 1))
        f.write(struct.pack("<B", 8))  # uint16
        f.write(struct.pack("<Q", len(sizes)))
        f.write(struct.pack("<Q", len(doc_idx)))
        f.write(sizes.tobytes())
        f.write(pointers.tobytes())
        f.write(doc_idx.tobytes())


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--tokens-bytes", default="64MiB", help="size of tokens.bin (the corpus repeats)")
    ap.add_argument("--max-docs", type=int, default=0, help="use only the first N documents (0 = all)")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    docs = documents(a.max_docs)
    corpus = np.concatenate(docs)
    target = parse_size(a.tokens_bytes) // 2
    with open(os.path.join(a.out, "tokens.bin"), "wb") as f:
        left = target
        while left > 0:
            part = corpus[:left]
            f.write(part.tobytes())
            left -= len(part)
    write_megatron(os.path.join(a.out, "corpus"), docs)
    with open(os.path.join(a.out, "corpus.json"), "w") as f:
        json.dump({"documents": len(docs), "tokens": int(len(corpus))}, f)
    print(f"{a.out}: tokens.bin {target} tokens, corpus.idx/.bin {len(docs)} documents, {len(corpus)} tokens")


if __name__ == "__main__":
    main()
