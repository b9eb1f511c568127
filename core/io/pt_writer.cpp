#include "io/pt_file.h"

#include <ATen/ATen.h>
#include <caffe2/serialize/inline_container.h>

#include <set>

#include "io/pickle_writer.h"
#include "io/safetensors_writer.h"
#include "util/atomic_file.h"
#include "util/error.h"

// The .pt and DCP-item writers: libtorch's zip writer (PyTorchStreamWriter), so this half of
// io/pt_file lives in stoker_core, not in the torch-free stoker_bytes.
namespace stoker {
namespace {

// _rebuild_tensor_v2(persistent storage `key`, 0, shape, row-major stride, False, OrderedDict())
void rebuildTensor(PickleBuilder& p, const TensorSpec& spec, const std::string& key, bool torch2,
                   const std::string& path) {
  std::string cls = torchStorageClass(spec.dtype, torch2);
  if (cls.empty())
    throwBadInput(path, "tensor \"" + spec.name + "\" has dtype " + std::string(dtypeName(spec.dtype)) +
                            (torch2 ? ", which torch.save cannot store" : ", which torch.save (1.13) cannot store"));
  std::vector<std::int64_t> stride(spec.shape.size(), 1);
  for (std::size_t k = spec.shape.size(); k-- > 1;) stride[k - 1] = stride[k] * std::max<std::int64_t>(spec.shape[k], 1);
  std::int64_t numel = 1;
  for (auto d : spec.shape) numel *= d;
  p.global("torch._utils", "_rebuild_tensor_v2");
  p.out += '(';
  p.out += '(';  // persistent id ('storage', cls, key, 'cpu', numel)
  p.text("storage");
  p.global("torch", cls.c_str());
  p.text(key);
  p.text("cpu");
  p.integer(numel);
  p.out += "tQ";
  p.integer(0);
  p.intTuple(spec.shape);
  p.intTuple(stride);
  p.out += '\x89';  // requires_grad=False
  p.emptyOrderedDict();
  p.out += "tR";
}


void checkSpec(const TensorSpec& spec, const HostTensor& t, const std::string& subject) {
  auto expected = dtypeBytesFor(spec.dtype, static_cast<std::uint64_t>(t.elementCount()));
  if (t.dtype != spec.dtype || !expected || *expected != t.nbytes)
    throw Error(ErrorKind::Internal, subject, "tensor \"" + spec.name + "\" does not match its spec");
}

// A torch.save zip through libtorch's writer: `records` writes the records, then byteorder and the
// directory follow; returns the bytes `sink` took. The sink never reports a failure to the zip
// writer: libtorch's writer throws from inside miniz on a short write, and its destructor then
// finalises the broken archive and throws again -- std::terminate (a full disk aborted `--to pt`;
// found by tests/soak/convert_faults.py). The first error is kept, everything after it is
// discarded (`failed` tells `records` to stop), and it is thrown once the writer is gone.
std::uint64_t writeTorchZip(const std::function<void(const void*, std::size_t)>& sink, const std::string& subject,
                            const char* what,
                            const std::function<void(caffe2::serialize::PyTorchStreamWriter&, const bool& failed)>& records) {
  std::uint64_t written = 0;
  std::unique_ptr<Error> writeError;
  bool failed = false;
  auto guarded = [&](const void* data, std::size_t n) -> std::size_t {
    if (failed) return n;
    try {
      sink(data, n);
      written += n;
    } catch (const Error& e) {
      writeError = std::make_unique<Error>(e);
      failed = true;
    }
    return n;
  };
  try {
    caffe2::serialize::PyTorchStreamWriter zip(guarded);
    records(zip, failed);
    // After a write error the remaining records cost nothing (the sink discards them), and
    // finishing the archive here keeps its destructor quiet.
    zip.writeRecord("byteorder", "little", 6);
    zip.writeEndOfFile();
  } catch (const c10::Error& e) {
    if (writeError) throw *writeError;
    throw Error(ErrorKind::Io, subject, std::string(what) + ": " + e.what_without_backtrace());
  }
  if (writeError) throw *writeError;
  return written;
}

}  // namespace

void writePt(const std::string& path, const std::vector<std::pair<std::string, HostTensor>>& tensors) {
  std::vector<TensorSpec> specs;
  for (const auto& [name, t] : tensors) specs.push_back({name, t.dtype, t.shape});
  writePtStreaming(path, specs, [&](std::size_t i) { return tensors[i].second; });
}

void writePtStreaming(const std::string& path, const std::vector<TensorSpec>& specs,
                      const std::function<HostTensor(std::size_t)>& produce) {
  std::set<std::string> names;
  for (const auto& spec : specs)
    if (!names.insert(spec.name).second) throwBadInput(path, "tensor \"" + spec.name + "\" appears twice");
  PickleBuilder p;
  p.emptyOrderedDict();
  p.out += '(';
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const auto& spec = specs[i];
    p.text(spec.name);
    rebuildTensor(p, spec, std::to_string(i), false, path);
  }
  p.out += "u.";

  AtomicFile file(path);
  writeTorchZip([&](const void* data, std::size_t n) { file.write(data, n); }, path, "cannot write .pt archive",
                [&](caffe2::serialize::PyTorchStreamWriter& zip, const bool& failed) {
                  zip.writeRecord("data.pkl", p.out.data(), p.out.size());
                  for (std::size_t i = 0; i < specs.size() && !failed; ++i) {
                    HostTensor t = produce(i);
                    checkSpec(specs[i], t, path);
                    zip.writeRecord("data/" + std::to_string(i), t.data, t.nbytes);
                  }
                });
  file.commit();
}

std::uint64_t writeTensorZip(const std::function<void(const void*, std::size_t)>& sink, const TensorSpec& spec,
                             const HostTensor& t, const std::string& subject) {
  checkSpec(spec, t, subject);
  PickleBuilder p;
  rebuildTensor(p, spec, "0", true, subject);
  p.out += '.';
  return writeTorchZip(sink, subject, "cannot write a torch.save item",
                       [&](caffe2::serialize::PyTorchStreamWriter& zip, const bool&) {
                         zip.writeRecord("data.pkl", p.out.data(), p.out.size());
                         zip.writeRecord("data/0", t.data, t.nbytes);
                       });
}

}  // namespace stoker
