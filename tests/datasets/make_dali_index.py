#!/usr/bin/python3
"""Writes DALI WebDataset index files (the format of DALI's tools/wds2idx.py, which DALI's
fn.readers.webdataset reads), made here independently of Stoker with Python's tarfile, so the
tests can check `stoker dataset index` and `wds:...,index=dali` against the format itself.

    make_dali_index.py SHARD.tar [...] [--version v1.2|v1.1]

For each shard, SHARD.idx beside it (the path up to the first dot of the file name): a line
"VERSION SAMPLES", then one line per run of regular members sharing a basename (the name up to
the first dot of its file name): "ext data_offset size name" per member (v1.1: without name).
"""
import argparse
import tarfile


def index_text(shard, version):
    groups, last = [], None
    with tarfile.open(shard) as tar:
        for member in tar:
            if not member.isreg():
                continue
            name = member.name
            dot = name.find(".", name.rfind("/") + 1)
            base, ext = name[:dot], name[dot + 1:]
            item = f"{ext} {member.offset_data} {member.size}" + (f" {name}" if version == "v1.2" else "")
            if base != last:
                groups.append([item])
                last = base
            else:
                groups[-1].append(item)
    return f"{version} {len(groups)}\n" + "".join(" ".join(g) + "\n" for g in groups)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("shards", nargs="+")
    ap.add_argument("--version", default="v1.2", choices=["v1.2", "v1.1"])
    a = ap.parse_args()
    for shard in a.shards:
        slash = shard.rfind("/")
        dot = shard.find(".", slash + 2)
        with open((shard[:dot] if dot >= 0 else shard) + ".idx", "w") as f:
            f.write(index_text(shard, a.version))


if __name__ == "__main__":
    main()
