#include "io/dcp_metadata.h"

#include <map>
#include <utility>

#include "io/pickle_reader.h"
#include "util/error.h"

namespace stoker {
namespace {

using Kind = PyValue::Kind;

class MetadataReader {
 public:
  explicit MetadataReader(std::string subject) : subject_(std::move(subject)) {}

  DcpMetadata read(const PyRef& root) {
    const PyValue& md = object(root, "Metadata", "the pickled object");
    DcpMetadata out;
    out.torch2Modules = root->text.rfind("torch.distributed.checkpoint.", 0) == 0;
    if (const PyRef* v = field(md, "version"); v && (*v)->kind == Kind::String) out.version = (*v)->text;

    // storage_data: {MetadataIndex(fqn, offset): _StorageInfo}, matched by (fqn, chunk offsets).
    std::map<std::pair<std::string, std::vector<std::int64_t>>, DcpStorage> tensorItems;
    std::map<std::string, DcpStorage> byteItems;
    const PyRef* storageData = field(md, "storage_data");
    if (!storageData || (*storageData)->kind != Kind::Dict) fail("Metadata.storage_data is not a dict");
    for (const auto& [key, value] : (*storageData)->dict) {
      const PyValue& index = object(key, "MetadataIndex", "a storage_data key");
      const std::string fqn = text(require(index, "fqn"), "MetadataIndex.fqn");
      DcpStorage storage = storageInfo(value, fqn);
      const PyRef* offset = field(index, "offset");
      if (!offset || (*offset)->kind == Kind::None)
        byteItems[fqn] = std::move(storage);
      else
        tensorItems[{fqn, ints(*offset, "MetadataIndex.offset")}] = std::move(storage);
    }

    const PyRef& sdm = require(md, "state_dict_metadata");
    if (sdm->kind != Kind::Dict) fail("Metadata.state_dict_metadata is not a dict");
    for (const auto& [key, value] : sdm->dict) {
      DcpEntry e;
      e.fqn = text(key, "a state_dict_metadata key");
      if (value->kind == Kind::Object && className(value->text) == "BytesStorageMetadata") {
        e.isTensor = false;
        if (auto it = byteItems.find(e.fqn); it != byteItems.end()) e.bytes = it->second;
        out.entries.push_back(std::move(e));
        continue;
      }
      const PyValue& tsm = object(value, "TensorStorageMetadata", "state_dict_metadata[\"" + e.fqn + "\"]");
      readProperties(require(tsm, "properties"), e);
      e.size = ints(require(tsm, "size"), "TensorStorageMetadata.size");
      const PyRef& chunks = require(tsm, "chunks");
      if (chunks->kind != Kind::List && chunks->kind != Kind::Tuple) fail(e.fqn + ": chunks is not a list");
      for (const auto& c : chunks->items) {
        const PyValue& chunk = object(c, "ChunkStorageMetadata", e.fqn + ": a chunk");
        DcpChunk dc;
        dc.offsets = ints(require(chunk, "offsets"), "ChunkStorageMetadata.offsets");
        dc.sizes = ints(require(chunk, "sizes"), "ChunkStorageMetadata.sizes");
        if (auto it = tensorItems.find({e.fqn, dc.offsets}); it != tensorItems.end()) dc.storage = it->second;
        e.chunks.push_back(std::move(dc));
      }
      out.entries.push_back(std::move(e));
    }
    return out;
  }

 private:
  [[noreturn]] void fail(const std::string& why) { throwBadInput(subject_, why); }

  static std::string className(const std::string& full) { return full.substr(full.rfind('.') + 1); }

  const PyValue& object(const PyRef& v, const char* cls, const std::string& what) {
    if (v->kind != Kind::Object || className(v->text) != cls)
      fail(what + " is not a DCP " + cls + " (is this a torch.distributed.checkpoint .metadata?)");
    return *v;
  }
  static const PyRef* field(const PyValue& obj, const char* name) {
    for (const auto& [k, v] : obj.dict)
      if (k->kind == Kind::String && k->text == name) return &v;
    return nullptr;
  }
  const PyRef& require(const PyValue& obj, const char* name) {
    const PyRef* v = field(obj, name);
    if (!v) fail(className(obj.text) + " has no field " + name);
    return *v;
  }
  // Names are copied out of the shared pickle values once per entry: a long name memoised once and
  // named by every entry would multiply (found in review). Each is capped, and so is their sum.
  std::string text(const PyRef& v, const std::string& what, std::size_t cap = 64 << 10) {
    if (v->kind != Kind::String) fail(what + " is not a string");
    if (v->text.size() > cap) fail(what + " is longer than " + std::to_string(cap) + " bytes");
    copiedText_ += v->text.size();
    if (copiedText_ > (1ull << 30)) fail("names add up to more than 1 GiB");
    return v->text;
  }
  std::int64_t integer(const PyRef& v, const std::string& what) {
    if (v->kind != Kind::Int) fail(what + " is not an integer");
    return v->integer;
  }
  std::vector<std::int64_t> ints(const PyRef& v, const std::string& what) {
    if (v->kind != Kind::Tuple && v->kind != Kind::List) fail(what + " is not a tuple of integers");
    std::vector<std::int64_t> out;
    for (const auto& x : v->items) out.push_back(integer(x, what));
    return out;
  }

  DcpStorage storageInfo(const PyRef& v, const std::string& fqn) {
    const PyValue& info = object(v, "_StorageInfo", "the storage of \"" + fqn + "\"");
    DcpStorage s;
    s.relativePath = text(require(info, "relative_path"), "_StorageInfo.relative_path", 4096);
    const std::int64_t offset = integer(require(info, "offset"), "_StorageInfo.offset");
    const std::int64_t length = integer(require(info, "length"), "_StorageInfo.length");
    if (offset < 0 || length < 0) fail("\"" + fqn + "\": negative item offset or length");
    s.offset = static_cast<std::uint64_t>(offset);
    s.length = static_cast<std::uint64_t>(length);
    if (const PyRef* t = field(info, "transform_descriptors"); t && (*t)->kind != Kind::None) {
      if ((*t)->kind != Kind::List && (*t)->kind != Kind::Tuple) fail("_StorageInfo.transform_descriptors is not a list");
      for (const auto& d : (*t)->items) s.transforms.push_back(text(d, "a transform descriptor"));
    }
    return s;
  }

  // TensorProperties pickles as a 5-tuple (dtype, layout, requires_grad, memory_format, pin_memory).
  void readProperties(const PyRef& v, DcpEntry& e) {
    const PyValue& props = object(v, "TensorProperties", e.fqn + ": properties");
    const PyRef* dtype = nullptr;
    if (!props.items.empty())
      dtype = &props.items[0];
    else
      dtype = field(props, "dtype");
    if (!dtype || (*dtype)->kind != Kind::Global) fail(e.fqn + ": TensorProperties has no dtype");
    e.torchDtype = (*dtype)->text;
    e.dtype = dtypeFromTorchName(e.torchDtype);
    if (props.items.size() > 1 && props.items[1]->kind == Kind::String && props.items[1]->text != "torch.strided")
      fail(e.fqn + ": layout " + props.items[1]->text + " is not supported (only dense, strided tensors)");
  }

  std::string subject_;
  std::uint64_t copiedText_ = 0;
};

}  // namespace

DcpMetadata parseDcpMetadata(const std::uint8_t* data, std::size_t n, const std::string& subject) {
  if (n == 0) throwBadInput(subject, "is empty (an interrupted save?)");
  if (data[0] != 0x80) throwBadInput(subject, "is not a pickle (a DCP .metadata starts with the pickle PROTO opcode)");
  PyRef root = unpickle(data, n, subject, PickleProfile::DcpMetadata);
  return MetadataReader(subject).read(root);
}

}  // namespace stoker
