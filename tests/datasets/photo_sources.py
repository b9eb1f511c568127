"""The real photographs the image benchmarks and tests start from: the sample photos Debian ships
in python3-skimage (skimage/data). Found where the package put them, or unpacked from its .deb
(apt-get download + dpkg -x into a temporary folder) when the package is not installed."""
import glob
import os
import subprocess
import tempfile

# One class per source photo; the grayscale ones stay grayscale JPEGs, as some of ImageNet's are.
PHOTOS = ["astronaut.png", "chelsea.png", "coffee.png", "rocket.jpg", "motorcycle_left.png",
          "hubble_deep_field.jpg", "retina.jpg", "ihc.png", "camera.png", "brick.png", "grass.png",
          "gravel.png", "moon.png", "coins.png", "page.png"]


def skimage_data_dir():
    # STOKER_SKIMAGE_DATA: a folder holding these photos, for machines without Debian's package or
    # apt (a GPU machine is given them carried).
    for d in [os.environ.get("STOKER_SKIMAGE_DATA", "")] + glob.glob("/usr/lib/python3/dist-packages/skimage/data"):
        if d and os.path.exists(os.path.join(d, "astronaut.png")):
            return d
    work = tempfile.mkdtemp(prefix="stoker-skimage-")
    subprocess.run(["apt-get", "download", "python3-skimage"], cwd=work, check=True, capture_output=True)
    deb = glob.glob(os.path.join(work, "python3-skimage_*.deb"))[0]
    subprocess.run(["dpkg", "-x", deb, os.path.join(work, "x")], check=True)
    return glob.glob(os.path.join(work, "x/usr/lib/python3/dist-packages/skimage/data"))[0]


def photos(count):
    """The first `count` source photos as (name, PIL.Image)."""
    from PIL import Image
    d = skimage_data_dir()
    out = []
    for name in PHOTOS[:count]:
        img = Image.open(os.path.join(d, name))
        img = img.convert("L" if img.mode in ("L", "I;16", "I", "1") else "RGB")
        out.append((os.path.splitext(name)[0], img))
    return out
