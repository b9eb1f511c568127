#!/usr/bin/python3
"""Writes two 16-bit-per-sample RGB TIFFs, which PIL can read but not write: DIR/rgb16-le.tif
(little-endian) and DIR/rgb16-be.tif (big-endian), 120x90, uncompressed, one strip. Their first row
holds values v = 257k + 128, where libtiff's rounding to 8 bits ((v + 128) / 257) and PIL's high
byte (v >> 8) give different answers.

    write_tiff16.py DIR
"""
import os
import struct
import sys

import numpy as np


def tiff16(path, pixels, big_endian):
    """A baseline TIFF (TIFF 6.0, section 2) of the [h, w, 3] uint16 array `pixels`."""
    h, w, _ = pixels.shape
    e = ">" if big_endian else "<"
    data = pixels.astype(e + "u2").tobytes()
    SHORT, LONG = 3, 4
    # (tag, type, count, value); None: an offset filled in below
    entries = [(256, SHORT, 1, w), (257, SHORT, 1, h), (258, SHORT, 3, None), (259, SHORT, 1, 1),
               (262, SHORT, 1, 2), (273, LONG, 1, None), (277, SHORT, 1, 3), (278, SHORT, 1, h),
               (279, LONG, 1, len(data)), (284, SHORT, 1, 1)]
    ifd_at = 8
    bits_at = ifd_at + 2 + len(entries) * 12 + 4  # BitsPerSample's three SHORTs do not fit in an entry
    data_at = bits_at + 6
    out = (b"MM" if big_endian else b"II") + struct.pack(e + "HI", 42, ifd_at) + struct.pack(e + "H", len(entries))
    for tag, kind, count, value in entries:
        if value is None:
            out += struct.pack(e + "HHII", tag, kind, count, bits_at if tag == 258 else data_at)
        elif kind == SHORT:
            out += struct.pack(e + "HHIHH", tag, kind, count, value, 0)
        else:
            out += struct.pack(e + "HHII", tag, kind, count, value)
    out += struct.pack(e + "I", 0) + struct.pack(e + "HHH", 16, 16, 16) + data
    with open(path, "wb") as f:
        f.write(out)


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 65536, (90, 120, 3), dtype=np.uint16)
    pixels[0, :, 0] = np.arange(120) * 257 + 128
    tiff16(os.path.join(out, "rgb16-le.tif"), pixels, False)
    tiff16(os.path.join(out, "rgb16-be.tif"), pixels, True)


if __name__ == "__main__":
    main()
