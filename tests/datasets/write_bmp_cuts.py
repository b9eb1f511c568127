#!/usr/bin/python3
"""Writes BMPs cut short at every length inside their pixel data, each named for what PIL makes of
it: DIR/<kind>-<bytes>-ok.bmp when PIL reads it, DIR/<kind>-<bytes>-bad.bmp when PIL refuses it.
Kinds: 24-bit (65 pixels wide, so each row ends with a padding byte), 8-bit palette, 1-bit and
32-bit RGBA; the whole file is among them (the longest "cut").

    write_bmp_cuts.py DIR
"""
import io
import os
import struct
import sys

import numpy as np
from PIL import Image


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(1)
    rgb = Image.fromarray(rng.integers(0, 256, (7, 65, 3), dtype=np.uint8))
    small = rgb.resize((13, 9))
    kinds = {"rgb": rgb, "palette": small.convert("P"), "onebit": rgb.convert("1"), "rgba": small.convert("RGBA")}
    for kind, image in kinds.items():
        buffer = io.BytesIO()
        image.save(buffer, "BMP")
        data = buffer.getvalue()
        pixels_at = struct.unpack("<I", data[10:14])[0]  # bfOffBits: where the pixel data starts
        for n in range(pixels_at + 1, len(data) + 1):
            try:
                Image.open(io.BytesIO(data[:n])).convert("RGB")
                verdict = "ok"
            except OSError:
                verdict = "bad"
            with open(os.path.join(out, "%s-%05d-%s.bmp" % (kind, n, verdict)), "wb") as f:
                f.write(data[:n])


if __name__ == "__main__":
    main()
