"""The C ABI of libstoker_c.so (python/native/stoker_c.h), loaded with ctypes.

Why ctypes over a C ABI: the library must match the libtorch of the torch this process imports,
and that is all it depends on -- no Python.h, no pybind11 (pip's torch wheels bring neither for
the interpreter; Debian needs python3-dev). ctypes releases the GIL during every call, so the
core's waits and the consumer's share of the work run while other Python threads go on.
Tensors cross as DLPack capsules, without a copy, in both directions. Batches take a shorter way
where the build made the optional extension stoker._batches: it wraps the core's tensors as
torch.Tensors itself (see _load_batches).
"""

import ctypes
import json
import os
import re

import torch
import torch.utils.dlpack

from . import _build_info


def _release(version):
    """'1.13.0a0+git' -> (1, 13, 0): the release a build and an import must share."""
    m = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", version or "")
    return tuple(int(x or 0) for x in m.groups()) if m else None


def check_torch(imported=None, imported_cuda=None):
    """Refuse a library built for another torch (its C++ ABI is the library's), naming both."""
    imported = torch.__version__ if imported is None else imported
    imported_cuda = torch.version.cuda is not None if imported_cuda is None else imported_cuda
    built = _build_info.TORCH_VERSION
    if _release(built) != _release(imported):
        raise ImportError(
            f"stoker: this build of Stoker's Python module was made for torch {built}, but this process "
            f"imported torch {imported}; rebuild Stoker against it (cmake -DTorch_DIR=$(python3 -c "
            f"'import torch; print(torch.utils.cmake_prefix_path)')/Torch)")
    if _build_info.CUDA and not imported_cuda:
        raise ImportError(f"stoker: built against a CUDA libtorch ({built}), but the imported torch {imported} has no CUDA")


check_torch()

_here = os.path.dirname(os.path.abspath(__file__))
lib = ctypes.CDLL(os.path.join(_here, "libstoker_c.so"))

_c_char_p = ctypes.c_char_p
_void_p = ctypes.c_void_p
_i64 = ctypes.c_int64
PROGRESS = ctypes.CFUNCTYPE(ctypes.c_int, _void_p, ctypes.c_uint64, ctypes.c_uint64, _c_char_p)
# The ranks' all-gather of WebDataset scans: returns memory from stoker_strdup (the core frees it).
EXCHANGE = ctypes.CFUNCTYPE(_void_p, _void_p, _c_char_p)

# Strings come back as malloc'd char* (c_void_p, so ctypes does not copy and lose the pointer).
for name, args in {
    "stoker_build_info": [],
    "stoker_preset": [_c_char_p, ctypes.c_int, ctypes.c_int],
    "stoker_options_normalize": [_c_char_p],
    "stoker_knobs": [],
    "stoker_dataset_kinds": [],
    "stoker_plan": [_c_char_p],
    "stoker_loader_describe": [_void_p],
    "stoker_ckpt_inspect": [_c_char_p],
    "stoker_ckpt_convert": [_c_char_p, _c_char_p, _c_char_p, PROGRESS, _void_p],
    "stoker_ckpt_verify": [_c_char_p, _c_char_p, PROGRESS, _void_p],
    "stoker_tune": [_c_char_p, _c_char_p, _c_char_p, PROGRESS, _void_p],
}.items():
    f = getattr(lib, name)
    f.argtypes, f.restype = args, _void_p

lib.stoker_prefetch_for_workers.argtypes, lib.stoker_prefetch_for_workers.restype = [ctypes.c_int], ctypes.c_int
lib.stoker_last_error.restype = _c_char_p
lib.stoker_last_error_kind.restype = ctypes.c_int
lib.stoker_free.argtypes = [_void_p]
lib.stoker_strdup.argtypes = [_c_char_p]
lib.stoker_strdup.restype = _void_p
lib.stoker_loader_open.argtypes = [_c_char_p, _c_char_p, _c_char_p, _c_char_p, _c_char_p, ctypes.c_int, EXCHANGE, _void_p]
lib.stoker_loader_open.restype = _void_p
lib.stoker_loader_from_dlpack.argtypes = [ctypes.POINTER(_void_p), ctypes.c_int, _c_char_p, _c_char_p, _c_char_p,
                                          _c_char_p, _c_char_p, ctypes.c_int]
lib.stoker_loader_from_dlpack.restype = _void_p
lib.stoker_loader_free.argtypes = [_void_p]
lib.stoker_loader_raise_workers_for_network.argtypes = [_void_p, ctypes.c_int]
lib.stoker_loader_raise_workers_for_network.restype = ctypes.c_int
lib.stoker_loader_order.argtypes = [_void_p, _i64, ctypes.POINTER(_i64), _i64]
lib.stoker_loader_order.restype = _i64
lib.stoker_epoch_start.argtypes = [_void_p, _i64, ctypes.POINTER(_i64), _i64, ctypes.POINTER(_i64), _i64]
lib.stoker_epoch_start.restype = _void_p
lib.stoker_epoch_queue_next.argtypes = [_void_p, _i64, ctypes.POINTER(_i64), _i64, ctypes.POINTER(_i64), _i64]
lib.stoker_epoch_queue_next.restype = ctypes.c_int
lib.stoker_epoch_next.argtypes = [_void_p, ctypes.c_int, ctypes.POINTER(_void_p), ctypes.c_int]
lib.stoker_epoch_next.restype = ctypes.c_int
lib.stoker_epoch_indices.argtypes = [_void_p]
lib.stoker_epoch_indices.restype = _void_p
NOT_READY = -2
CLOSED = -3  # the epoch was closed, also by another thread while this one waited in it
lib.stoker_quiesce.argtypes, lib.stoker_quiesce.restype = [ctypes.c_int], ctypes.c_int
lib.stoker_forget_calls_after_fork.argtypes, lib.stoker_forget_calls_after_fork.restype = [], None
lib.stoker_epoch_free.argtypes = [_void_p]


def _load_batches():
    """stoker._batches, the per-batch path without ctypes (python/native/batches_module.cpp), bound
    to this process's libstoker_c; None where it was not built (no Python.h at build time) or
    STOKER_PYTHON_CTYPES=1 asks for the ctypes path."""
    if os.environ.get("STOKER_PYTHON_CTYPES") == "1":
        return None
    try:
        from . import _batches
    except ImportError:
        return None
    _batches.bind(ctypes.cast(lib.stoker_epoch_next_tensors, _void_p).value)
    return _batches


batches = _load_batches()

_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.argtypes = [_void_p, _c_char_p, _void_p]
_capsule_new.restype = ctypes.py_object
_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.argtypes = [ctypes.py_object, _c_char_p]
_capsule_pointer.restype = _void_p
_capsule_set_name = ctypes.pythonapi.PyCapsule_SetName
_capsule_set_name.argtypes = [ctypes.py_object, _c_char_p]
_capsule_set_name.restype = ctypes.c_int
_DLTENSOR = b"dltensor"
_USED = b"used_dltensor"

class CancelledError(RuntimeError):
    """A long operation stopped because its progress callback asked it to."""


class StokerWarning(UserWarning):
    """A loader's advice: a setting that costs speed or downloads here (describe()["advice"])."""


def raise_last_error():
    """The core's error of this thread as the Python exception a user expects."""
    kind = lib.stoker_last_error_kind()
    message = (lib.stoker_last_error() or b"").decode("utf-8", "replace")
    if kind == 1:
        raise ValueError(message)
    if kind == 2:
        if "No such file or directory" in message:
            raise FileNotFoundError(message)
        raise OSError(message)
    if kind == 3:
        raise CancelledError(message)
    if kind == 4:
        raise TimeoutError(message)
    if kind == 5:
        raise MemoryError(message)
    if kind == 7:
        raise ConnectionError(message)
    raise RuntimeError(message or "stoker: unknown error")


def take_json(pointer):
    """A char* JSON answer: parsed and freed; NULL raises the core's error."""
    if not pointer:
        raise_last_error()
    try:
        return json.loads(ctypes.string_at(pointer).decode("utf-8", "replace"))
    finally:
        lib.stoker_free(pointer)


def _plain(value):
    """What json cannot write by itself: numpy and torch numbers and arrays (a config's np.int64
    batch size, WeightedRandomSampler's weights as a tensor) as the Python values they hold."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def dumps(value):
    """json.dumps for what crosses into the core: numpy and torch values are taken as their numbers."""
    return json.dumps(value, default=_plain)


def encode(text):
    return None if text is None else str(text).encode("utf-8")


def encode_path(path):
    """A file system path or dataset spec as the bytes the file system holds: a name that is not
    UTF-8 (os.listdir gives it with surrogates) failed with UnicodeEncodeError under encode()."""
    return None if path is None else os.fsencode(path)


_from_dlpack = getattr(torch._C, "_from_dlpack", None) or torch.utils.dlpack.from_dlpack


def tensor_from_dlpack(pointer):
    """A DLManagedTensor* from the core as a torch.Tensor viewing the same memory."""
    return _from_dlpack(_capsule_new(pointer, _DLTENSOR, None))


def dlpack_from_tensor(tensor):
    """A DLManagedTensor* whose ownership passes to the core (the capsule is marked used)."""
    capsule = torch.utils.dlpack.to_dlpack(tensor)
    pointer = _capsule_pointer(capsule, _DLTENSOR)
    _capsule_set_name(capsule, _USED)
    return pointer


def build_info():
    return take_json(lib.stoker_build_info())
