"""Stoker's loader in a PyTorch training script.

    import stoker
    loader = stoker.Loader("imagefolder:/data/train", batch_size=64, shuffle=True,
                           transforms="RandomResizedCrop(224),RandomHorizontalFlip(),Normalize(imagenet)")
    for images, labels in loader: ...

The C++ core does the reading, decoding, transforms and batching on threads of its own (the GIL is
released while it works); batches arrive as torch tensors without a copy. See python/README.md.
"""

from . import _native
from ._native import CancelledError, StokerWarning, check_torch
from ._options import preset
from .loader import Loader
from .tuning import plan, tune
from . import ckpt

__version__ = _native._build_info.STOKER_VERSION

__all__ = ["Loader", "tune", "plan", "preset", "ckpt", "CancelledError", "StokerWarning", "check_torch"]
