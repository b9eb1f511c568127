"""Zero-code mode: every torch.utils.data.DataLoader the script iterates is watched.

DataLoader.__iter__ is wrapped so that iterating a loader yields the same batches through a
probe iterator; the loader is named by the line of the script that iterates it (the first
frame outside torch and this package). Without torch, there is
nothing to patch and the script runs as it is.
"""

import os
import sys

_state = {"publish": None, "interval_ms": 500}
# Each loader keeps its Watched as an attribute (one epoch count per loader). A dictionary from
# loader to Watched would keep every loader alive: the Watched refers to its loader.
_ATTR = "_stoker_probe_watched"
_OWN_DIR = os.path.dirname(os.path.abspath(__file__))


def _call_site():
    f = sys._getframe(2)
    while f is not None:
        path = f.f_code.co_filename
        if not (path.startswith(_OWN_DIR) or f"{os.sep}torch{os.sep}" in path):
            return f"{os.path.basename(path)}:{f.f_lineno}"
        f = f.f_back
    return None


def _patch_dataloader(module):
    cls = getattr(module, "DataLoader", None)
    if cls is None or getattr(cls, "_stoker_probe_patched", False):
        return
    original = cls.__iter__
    from . import Watched, publisher_for

    def __iter__(self):
        it = original(self)
        w = self.__dict__.get(_ATTR)
        if w is None:
            w = Watched(self, publisher=publisher_for(_state["publish"]), name=_call_site(),
                        interval_ms=_state["interval_ms"])
            w.attached = True
            self.__dict__[_ATTR] = w  # not setattr: DataLoader guards some attributes after init
        from . import _WatchedIterator
        return _WatchedIterator(w, it)

    cls.__iter__ = __iter__
    cls._stoker_probe_patched = True


def install(publish, interval_ms=500):
    from . import publisher_for
    publisher_for(publish)  # a bad address fails here, before the script runs
    _state["publish"] = publish
    _state["interval_ms"] = interval_ms
    try:
        # The script imports torch anyway; without torch there is no DataLoader to watch.
        import torch.utils.data.dataloader as module
    except ImportError:
        return False
    _patch_dataloader(module)
    return True
