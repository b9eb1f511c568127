// batches_module: the CPython extension stoker._batches, the per-batch path of stoker.Loader
// without ctypes. One call waits for the next batch with the GIL released (checking for Ctrl-C
// between waits) and returns its fields as torch.Tensors wrapping the core's own tensors
// (THPVariable_Wrap), or an int when there is no batch: 0 after the last, -1 on an error that
// stoker_last_error() names. It finds the core through the address of stoker_epoch_next_tensors,
// which the package passes to bind() from the ctypes-loaded libstoker_c, so the two share one copy
// of the core. Optional: where it was not built (no Python.h), the package uses the ctypes path.
#include <Python.h>
#include <torch/csrc/autograd/python_variable.h>

#include "stoker_c_tensors.h"

namespace {

constexpr int kMaxFields = 64;  // as _MAX_FIELDS in loader.py
stoker_epoch_next_tensors_fn nextTensors = nullptr;

PyObject* bind(PyObject*, PyObject* address) {
  void* p = PyLong_AsVoidPtr(address);
  if (!p) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "stoker._batches.bind: a null address");
    return nullptr;
  }
  nextTensors = reinterpret_cast<stoker_epoch_next_tensors_fn>(p);
  Py_RETURN_NONE;
}

// next(epoch_handle: int, wait_ms: int) -> tuple of tensors | int
PyObject* next(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 2) {
    PyErr_SetString(PyExc_TypeError, "stoker._batches.next(epoch_handle, wait_ms)");
    return nullptr;
  }
  auto* epoch = static_cast<StokerEpoch*>(PyLong_AsVoidPtr(args[0]));
  const int waitMs = static_cast<int>(PyLong_AsLong(args[1]));
  if (PyErr_Occurred()) return nullptr;
  if (!nextTensors || !epoch) {
    PyErr_SetString(PyExc_RuntimeError, "stoker._batches.next: not bound, or a closed epoch");
    return nullptr;
  }
  at::Tensor fields[kMaxFields];
  int n;
  for (;;) {
    Py_BEGIN_ALLOW_THREADS
    n = nextTensors(epoch, waitMs, fields, kMaxFields);
    Py_END_ALLOW_THREADS
    if (n != STOKER_NOT_READY) break;
    if (PyErr_CheckSignals() < 0) return nullptr;  // KeyboardInterrupt: the caller stops the epoch
  }
  if (n <= 0) return PyLong_FromLong(n);
  PyObject* batch = PyTuple_New(n);
  if (!batch) return nullptr;
  for (int f = 0; f < n; ++f) {
    PyObject* t = THPVariable_Wrap(std::move(fields[f]));
    if (!t) {
      Py_DECREF(batch);
      return nullptr;
    }
    PyTuple_SET_ITEM(batch, f, t);
  }
  return batch;
}

PyMethodDef methods[] = {
    {"bind", bind, METH_O, "bind(address of stoker_epoch_next_tensors)"},
    {"next", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(next)), METH_FASTCALL,
     "next(epoch_handle, wait_ms) -> tuple of tensors, or 0 after the last batch, -1 on error"},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "_batches", "stoker.Loader's per-batch path (see batches_module.cpp)", -1,
                      methods, nullptr, nullptr, nullptr, nullptr};

}  // namespace

PyMODINIT_FUNC PyInit__batches() { return PyModule_Create(&module); }
