#include "io/pt_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>

#include "io/remote_zip_reader.h"
#include "io/strided_gather.h"
#include "net/remote_object.h"
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

// The bytes of the names and values flatten makes: a key of 1 MiB shared by a million entries
// (memoised, a few MB of pickle) asked for a TiB of names (found in review).
constexpr std::uint64_t kMaxFlattenedBytes = 64u << 20;  // a 100,000-tensor model names ~10 MB

void flatten(const PyRef& v, const std::string& prefix, int depth, const std::string& subject,
             std::vector<PtTensorInfo>& tensors, std::map<std::string, std::string>& extras, std::uint64_t& made) {
  if (depth > kMaxNesting) throwBadInput(subject, "state dict nests deeper than 64 levels");
  auto join = [&](const std::string& k) {
    std::string name = prefix.empty() ? k : prefix + "." + k;
    if ((made += name.size()) > kMaxFlattenedBytes)
      throwBadInput(subject, "state dict names take more than " + std::to_string(kMaxFlattenedBytes) + " bytes");
    return name;
  };
  switch (v->kind) {
    case Kind::Tensor: tensors.push_back({prefix, v->tensor}); return;
    case Kind::Dict:
      for (auto& [k, val] : v->dict) flatten(val, join(keyText(*k, subject)), depth + 1, subject, tensors, extras, made);
      return;
    case Kind::List: case Kind::Tuple:
      for (std::size_t i = 0; i < v->items.size(); ++i)
        flatten(v->items[i], join(std::to_string(i)), depth + 1, subject, tensors, extras, made);
      return;
    default:
      extras[prefix] = describeScalar(*v);
      if ((made += extras[prefix].size()) > kMaxFlattenedBytes)
        throwBadInput(subject, "state dict values take more than " + std::to_string(kMaxFlattenedBytes) + " bytes");
  }
}

// What is wrong with a file that starts with these bytes, for a .pt; empty when it is a zip.
std::string zipSignatureProblem(const std::uint8_t* head, std::size_t n) {
  if (n >= 4 && std::memcmp(head, "PK\x03\x04", 4) == 0) return {};
  if (n >= 1 && head[0] == 0x80) return "legacy (pre-1.6) torch.save format; re-save it with a current torch.save";
  return "not a PyTorch .pt archive (no zip signature)";
}

std::string pickleHeaderCheck(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throwIo(path, "cannot open", errno);
  char head[4] = {};
  in.read(head, 4);
  return zipSignatureProblem(reinterpret_cast<const std::uint8_t*>(head), static_cast<std::size_t>(in.gcount()));
}


}  // namespace

std::uint64_t PtTensorInfo::nbytes() const {
  std::uint64_t n = 1;
  for (auto s : ref.size) n *= static_cast<std::uint64_t>(s);
  // The pickle reader refused a tensor whose count or bytes overflow (checkBounds).
  return dtypeBytesFor(ref.dtype, n).value_or(~std::uint64_t{0});
}

PtFile PtFile::open(const std::string& path) {
  if (auto problem = pickleHeaderCheck(path); !problem.empty()) throwBadInput(path, problem);
  PtFile f;
  f.path_ = path;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throwIo(path, "cannot open", errno);
  f.fd_ = std::shared_ptr<const int>(new int(fd), [](const int* p) {
    ::close(*p);
    delete p;
  });
  struct stat st {};
  if (::fstat(fd, &st) != 0) throwIo(path, "cannot stat", errno);
  f.zip_ = std::make_shared<ZipArchive>(ZipArchive::open(fd, 0, static_cast<std::uint64_t>(st.st_size), path));
  f.readRecords();
  return f;
}

PtFile PtFile::open(const std::shared_ptr<const RemoteObject>& object) {
  const std::string& url = object->url();
  const auto& head = object->head();
  if (auto problem = zipSignatureProblem(head.data(), head.size()); !problem.empty()) throwBadInput(url, problem);
  PtFile f;
  f.path_ = url;
  f.zip_ = std::make_shared<ZipArchive>(ZipArchive::open(remoteZipReader(object), 0, object->size(), url));
  f.readRecords();
  return f;
}

void PtFile::readRecords() {
  const std::string& path = path_;
  if (const auto* order = zip_->find("byteorder")) {
    if (order->size > 16) throwBadInput(path, "its byteorder record holds " + std::to_string(order->size) + " bytes");
    const auto bytes = zip_->read(*order);
    if (std::string(bytes.begin(), bytes.end()) != "little") throwBadInput(path, "big-endian .pt files are not supported");
  }
  const auto* pkl = zip_->find("data.pkl");
  if (!pkl) throwBadInput(path, "archive has no data.pkl");
  if (pkl->size > (1u << 30)) throwBadInput(path, "data.pkl is larger than 1 GiB");
  const auto bytes = zip_->read(*pkl);
  PyRef root = unpickle(bytes.data(), bytes.size(), path);
  if (root->kind != Kind::Dict) throwBadInput(path, "top-level object is not a dict (state dict)");
  std::uint64_t made = 0;
  flatten(root, "", 0, path, tensors_, extras_, made);
}

const ZipArchive::Record& PtFile::storageRecord(const PtTensorInfo& info) const {
  const auto& r = info.ref;
  const auto* record = zip_->find("data/" + r.storageKey);
  if (!record) throwBadInput(path_, "tensor \"" + info.name + "\": the archive has no record data/" + r.storageKey);
  const std::uint64_t expected = static_cast<std::uint64_t>(r.storageNumel) * (dtypeBits(r.dtype) / 8);
  if (record->size != expected)
    throwBadInput(path_, "storage record data/" + r.storageKey + " holds " + std::to_string(record->size) +
                             " bytes, expected " + std::to_string(expected));
  return *record;
}

std::optional<std::uint64_t> PtFile::inPlaceOffset(const PtTensorInfo& info) const {
  const auto& r = info.ref;
  if (dtypeBits(r.dtype) % 8 != 0 || !isRowMajor(r.size, r.stride)) return std::nullopt;
  const auto* record = zip_->find("data/" + r.storageKey);
  if (!record || !record->stored) return std::nullopt;
  const std::uint64_t elem = dtypeBits(r.dtype) / 8;
  const std::uint64_t begin = static_cast<std::uint64_t>(r.offset) * elem;
  if (begin + info.nbytes() > record->size) return std::nullopt;
  return record->dataOffset + begin;
}

HostTensor PtFile::load(const PtTensorInfo& info) const {
  const auto& r = info.ref;
  const std::size_t elem = dtypeBits(r.dtype) / 8;
  const auto& record = storageRecord(info);
  auto storage = std::make_shared<std::vector<std::uint8_t>>(zip_->read(record));
  HostTensor h;
  h.dtype = r.dtype;
  h.shape = r.size;
  h.nbytes = info.nbytes();
  if (isRowMajor(r.size, r.stride)) {  // serve the record's bytes without another copy
    h.data = storage->data() + static_cast<std::uint64_t>(r.offset) * elem;
    h.owner = storage;
    return h;
  }
  auto out = std::make_shared<std::vector<std::uint8_t>>(static_cast<std::size_t>(h.nbytes));
  gatherStrided(storage->data(), elem, r.offset, r.size, r.stride, out->data());
  h.data = out->data();
  h.owner = out;
  return h;
}

}  // namespace stoker
