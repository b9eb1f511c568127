#include "io/pt_file.h"

#include <ATen/ATen.h>
#include <caffe2/serialize/inline_container.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <fstream>
#include <set>

#include "io/pickle_writer.h"
#include "io/safetensors_writer.h"
#include "util/atomic_file.h"
#include "util/error.h"

namespace stoker {
namespace {

using Kind = PyValue::Kind;
constexpr int kMaxNesting = 64;

std::string describeScalar(const PyValue& v) {
  switch (v.kind) {
    case Kind::None: return "None";
    case Kind::Bool: return v.boolean ? "True" : "False";
    case Kind::Int: return std::to_string(v.integer);
    case Kind::Float: {
      char buf[32];
      auto end = std::to_chars(buf, buf + sizeof buf, v.real).ptr;  // shortest round-trip form
      return std::string(buf, end);
    }
    case Kind::String: return v.text;
    case Kind::Bytes: return "<" + std::to_string(v.text.size()) + " bytes>";
    default: return "<object>";
  }
}

std::string keyText(const PyValue& k, const std::string& subject) {
  if (k.kind == Kind::String) return k.text;
  if (k.kind == Kind::Int) return std::to_string(k.integer);
  throwBadInput(subject, "state dict has a key that is neither a string nor an integer");
}

void flatten(const PyRef& v, const std::string& prefix, int depth, const std::string& subject,
             std::vector<PtTensorInfo>& tensors, std::map<std::string, std::string>& extras) {
  if (depth > kMaxNesting) throwBadInput(subject, "state dict nests deeper than 64 levels");
  auto join = [&](const std::string& k) { return prefix.empty() ? k : prefix + "." + k; };
  switch (v->kind) {
    case Kind::Tensor: tensors.push_back({prefix, v->tensor}); return;
    case Kind::Dict:
      for (auto& [k, val] : v->dict) flatten(val, join(keyText(*k, subject)), depth + 1, subject, tensors, extras);
      return;
    case Kind::List: case Kind::Tuple:
      for (std::size_t i = 0; i < v->items.size(); ++i)
        flatten(v->items[i], join(std::to_string(i)), depth + 1, subject, tensors, extras);
      return;
    default: extras[prefix] = describeScalar(*v);
  }
}

[[noreturn]] void rethrowTorch(const std::string& path, const c10::Error& e, const std::string& what) {
  throwBadInput(path, what + ": " + e.what_without_backtrace());
}

std::string pickleHeaderCheck(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throwIo(path, "cannot open", errno);
  char head[4] = {};
  in.read(head, 4);
  if (in.gcount() == 4 && std::memcmp(head, "PK\x03\x04", 4) == 0) return {};
  if (static_cast<unsigned char>(head[0]) == 0x80)
    return "legacy (pre-1.6) torch.save format; re-save it with a current torch.save";
  return "not a PyTorch .pt archive (no zip signature)";
}


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

}  // namespace

std::uint64_t PtTensorInfo::nbytes() const {
  std::uint64_t n = 1;
  for (auto s : ref.size) n *= static_cast<std::uint64_t>(s);
  return n * dtypeBits(ref.dtype) / 8;
}

PtFile PtFile::open(const std::string& path) {
  if (auto problem = pickleHeaderCheck(path); !problem.empty()) throwBadInput(path, problem);
  PtFile f;
  f.path_ = path;
  try {
    f.reader_ = std::make_shared<caffe2::serialize::PyTorchStreamReader>(path);
    if (f.reader_->hasRecord("byteorder")) {
      auto [ptr, size] = f.reader_->getRecord("byteorder");
      std::string order(static_cast<const char*>(ptr.get()), size);
      if (order != "little") throwBadInput(path, "big-endian .pt files are not supported");
    }
    if (!f.reader_->hasRecord("data.pkl")) throwBadInput(path, "archive has no data.pkl");
    auto [pkl, size] = f.reader_->getRecord("data.pkl");
    PyRef root = unpickle(static_cast<const std::uint8_t*>(pkl.get()), size, path);
    if (root->kind != Kind::Dict) throwBadInput(path, "top-level object is not a dict (state dict)");
    flatten(root, "", 0, path, f.tensors_, f.extras_);
  } catch (const c10::Error& e) {
    rethrowTorch(path, e, "corrupt .pt archive");
  }
  return f;
}

std::optional<std::uint64_t> PtFile::inPlaceOffset(const PtTensorInfo& info) const {
  const auto& r = info.ref;
  if (dtypeBits(r.dtype) % 8 != 0) return std::nullopt;
  const std::uint64_t elem = dtypeBits(r.dtype) / 8;
  // C-contiguous? (dimensions of size 1 may carry any stride)
  std::int64_t expect = 1;
  for (std::size_t k = r.size.size(); k-- > 0;) {
    if (r.size[k] != 1 && r.stride[k] != expect) return std::nullopt;
    expect *= r.size[k];
  }
  try {
    const std::string record = "data/" + r.storageKey;
    if (!reader_->hasRecord(record)) return std::nullopt;
    const std::uint64_t dataAt = reader_->getRecordOffset(record);
    // The zip local header sits right before the data: find it to learn the
    // compression method (0 = stored) and that it really belongs to `record`.
    std::ifstream in(path_, std::ios::binary);
    const std::uint64_t back = std::min<std::uint64_t>(dataAt, 30 + 1024 + 256);
    std::string buf(back, '\0');
    in.seekg(static_cast<std::streamoff>(dataAt - back));
    in.read(buf.data(), static_cast<std::streamsize>(back));
    if (in.gcount() != static_cast<std::streamsize>(back)) return std::nullopt;
    const std::string suffix = "/" + record;
    for (std::size_t at = back; at-- > 0;) {
      if (at + 30 > back || buf.compare(at, 4, "PK\x03\x04") != 0) continue;
      auto u16 = [&](std::size_t o) {
        return static_cast<unsigned>(static_cast<unsigned char>(buf[at + o])) |
               (static_cast<unsigned>(static_cast<unsigned char>(buf[at + o + 1])) << 8);
      };
      const std::size_t nameLen = u16(26), extraLen = u16(28);
      if (at + 30 + nameLen + extraLen != back || at + 30 + nameLen > back) continue;
      const std::string name = buf.substr(at + 30, nameLen);
      if (name.size() < suffix.size() || name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
        continue;
      if (u16(8) != 0) return std::nullopt;  // compressed
      const std::uint64_t begin = dataAt + static_cast<std::uint64_t>(r.offset) * elem;
      const std::uint64_t end = begin + info.nbytes();
      const std::uint64_t recordEnd = dataAt + static_cast<std::uint64_t>(r.storageNumel) * elem;
      if (end > recordEnd) return std::nullopt;
      return begin;
    }
  } catch (const c10::Error&) {
  }
  return std::nullopt;
}

HostTensor PtFile::load(const PtTensorInfo& info) const {
  const auto& r = info.ref;
  const std::size_t elem = dtypeBits(r.dtype) / 8;
  try {
    auto [ptr, size] = reader_->getRecord("data/" + r.storageKey);
    if (size != static_cast<std::size_t>(r.storageNumel) * elem)
      throwBadInput(path_, "storage record data/" + r.storageKey + " holds " + std::to_string(size) +
                               " bytes, expected " + std::to_string(r.storageNumel * elem));
    auto storage = std::make_shared<at::DataPtr>(std::move(ptr));
    HostTensor probe;
    probe.dtype = r.dtype;
    probe.shape = {r.storageNumel};
    probe.data = static_cast<const std::uint8_t*>(storage->get());
    probe.nbytes = size;
    probe.owner = storage;
    at::Tensor flat = probe.toTorch();
    at::Tensor t = flat.as_strided(r.size, r.stride, r.offset).contiguous();
    if (t.storage().is_alias_of(flat.storage())) {
      // Already contiguous: serve the bytes of the record without copying.
      HostTensor h;
      h.dtype = r.dtype;
      h.shape = r.size;
      h.data = probe.data + static_cast<std::uint64_t>(r.offset) * elem;
      h.nbytes = info.nbytes();
      h.owner = storage;
      return h;
    }
    return hostTensorFromTorch(t);
  } catch (const c10::Error& e) {
    rethrowTorch(path_, e, "cannot read tensor \"" + info.name + "\"");
  }
}

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
  std::unique_ptr<Error> writeError;
  // The sink never reports a failure to the zip writer: libtorch's writer throws from inside
  // miniz on a short write, and its destructor then finalises the broken archive and throws
  // again -- std::terminate (a full disk aborted `--to pt`; found by tests/soak/convert_faults.py).
  // The first error is kept, everything after it is discarded, and the temp file is removed.
  auto sink = [&](const void* data, std::size_t n) -> std::size_t {
    if (writeError) return n;
    try {
      file.write(data, n);
    } catch (const Error& e) {
      writeError = std::make_unique<Error>(e);
    }
    return n;
  };
  try {
    caffe2::serialize::PyTorchStreamWriter zip(sink);
    zip.writeRecord("data.pkl", p.out.data(), p.out.size());
    for (std::size_t i = 0; i < specs.size() && !writeError; ++i) {
      HostTensor t = produce(i);
      auto expected = dtypeBytesFor(specs[i].dtype, static_cast<std::uint64_t>(t.elementCount()));
      if (t.dtype != specs[i].dtype || !expected || *expected != t.nbytes)
        throw Error(ErrorKind::Internal, path, "tensor \"" + specs[i].name + "\" does not match its spec");
      zip.writeRecord("data/" + std::to_string(i), t.data, t.nbytes);
    }
    // After a write error the remaining records cost nothing (the sink discards them), and
    // finishing the archive here keeps its destructor quiet.
    zip.writeRecord("byteorder", "little", 6);
    zip.writeEndOfFile();
  } catch (const c10::Error& e) {
    if (writeError) throw *writeError;
    throw Error(ErrorKind::Io, path, std::string("cannot write .pt archive: ") + e.what_without_backtrace());
  }
  if (writeError) throw *writeError;
  file.commit();
}

std::uint64_t writeTensorZip(const std::function<void(const void*, std::size_t)>& sink, const TensorSpec& spec,
                             const HostTensor& t, const std::string& subject) {
  auto expected = dtypeBytesFor(spec.dtype, static_cast<std::uint64_t>(t.elementCount()));
  if (t.dtype != spec.dtype || !expected || *expected != t.nbytes)
    throw Error(ErrorKind::Internal, subject, "tensor \"" + spec.name + "\" does not match its spec");
  PickleBuilder p;
  rebuildTensor(p, spec, "0", true, subject);
  p.out += '.';
  std::uint64_t written = 0;
  std::unique_ptr<Error> writeError;  // as in writePtStreaming: never throw through miniz
  auto counted = [&](const void* data, std::size_t n) -> std::size_t {
    if (writeError) return n;
    try {
      sink(data, n);
      written += n;
    } catch (const Error& e) {
      writeError = std::make_unique<Error>(e);
    }
    return n;
  };
  try {
    caffe2::serialize::PyTorchStreamWriter zip(counted);
    zip.writeRecord("data.pkl", p.out.data(), p.out.size());
    zip.writeRecord("data/0", t.data, t.nbytes);
    zip.writeRecord("byteorder", "little", 6);
    zip.writeEndOfFile();
  } catch (const c10::Error& e) {
    if (writeError) throw *writeError;
    throw Error(ErrorKind::Io, subject, std::string("cannot write a torch.save item: ") + e.what_without_backtrace());
  }
  if (writeError) throw *writeError;
  return written;
}

}  // namespace stoker
