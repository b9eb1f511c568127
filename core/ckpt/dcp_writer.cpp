#include "ckpt/dcp_writer.h"

#include <nlohmann/json.hpp>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <map>

#include "ckpt/convert_journal.h"
#include "ckpt/tensor_stream.h"
#include "ckpt/torch_ops.h"
#include "io/dcp_item.h"
#include "io/dcp_metadata.h"
#include "io/pickle_writer.h"
#include "io/pt_file.h"
#include "io/safetensors_writer.h"
#include "io/zstd_item.h"
#include "util/atomic_file.h"
#include "util/error.h"
#include "util/read_file.h"
#include "util/read_only_fd.h"

namespace stoker {
namespace fs = std::filesystem;
namespace {

const char* kMetadataModule = "torch.distributed.checkpoint.metadata";
const char* kFilesystemModule = "torch.distributed.checkpoint.filesystem";

const char* torchDtypeName(Dtype d) {
  switch (d) {
    case Dtype::F32: return "float32";
    case Dtype::F64: return "float64";
    case Dtype::F16: return "float16";
    case Dtype::BF16: return "bfloat16";
    case Dtype::I64: return "int64";
    case Dtype::I32: return "int32";
    case Dtype::I16: return "int16";
    case Dtype::I8: return "int8";
    case Dtype::U8: return "uint8";
    case Dtype::BOOL: return "bool";
    case Dtype::C64: return "complex64";
    case Dtype::U16: return "uint16";
    case Dtype::U32: return "uint32";
    case Dtype::U64: return "uint64";
    case Dtype::F8_E5M2: return "float8_e5m2";
    case Dtype::F8_E4M3: return "float8_e4m3fn";
    case Dtype::F8_E8M0: return "float8_e8m0fnu";
    default: return nullptr;
  }
}

// `cls()` NEWOBJ, then BUILD with a dict whose items `fill` pushes.
template <typename Fill>
void dataclass(PickleBuilder& p, const char* module, const char* cls, Fill fill) {
  p.global(module, cls);
  p.emptyTuple();
  p.newObject();
  p.emptyDict();
  p.mark();
  fill();
  p.setItems();
  p.build();
}

void torchSize(PickleBuilder& p, const std::vector<std::int64_t>& v) {
  p.global("torch", "Size");
  p.mark();
  p.intTuple(v);
  p.tuple();
  p.reduce();
}

// TensorProperties pickles its 5-tuple state (dtype, layout, requires_grad, memory_format, pin_memory).
void tensorProperties(PickleBuilder& p, Dtype dtype) {
  p.global(kMetadataModule, "TensorProperties");
  p.emptyTuple();
  p.newObject();
  p.mark();
  p.global("torch", torchDtypeName(dtype));
  p.global("torch.serialization", "_get_layout");
  p.mark();
  p.text("torch.strided");
  p.tuple();
  p.reduce();
  p.boolean(false);
  p.global("builtins", "getattr");  // what Python >= 3.11 writes for an enum member
  p.mark();
  p.global(kMetadataModule, "_MEM_FORMAT_ENCODING");
  p.text("TORCH_CONTIGUOUS_FORMAT");
  p.tuple();
  p.reduce();
  p.boolean(false);
  p.tuple();
  p.build();
}

void storageInfo(PickleBuilder& p, const std::string& file, const DcpWrittenItem& item) {
  dataclass(p, kFilesystemModule, "_StorageInfo", [&] {
    p.text("relative_path");
    p.text(file);
    p.text("offset");
    p.integer(static_cast<std::int64_t>(item.offset));
    p.text("length");
    p.integer(static_cast<std::int64_t>(item.length));
  });
}

}  // namespace

std::vector<DcpWrittenItem> writeDcpFile(const std::string& path, const PlannedFile& f,
                                         const std::vector<CheckpointInfo::Item>& bytesItems, SourceFiles& source,
                                         const std::function<HostTensor(std::size_t)>& produce) {
  AtomicFile file(path);
  std::vector<DcpWrittenItem> items;
  for (const auto& b : bytesItems) {
    DcpWrittenItem item{b.name, file.bytesWritten(), b.bytes, true};
    if (b.zstd) {  // written plain, streamed: DCP readers without the zstandard module load it too
      const std::string& from = source.info().files[b.file];
      const std::uint64_t plain = decompressZstdItem(source.reader(b.file), b.offset, b.storedBytes, b.bytes,
                                                     from + ": \"" + b.name + "\"",
                                                     [&](const std::uint8_t* p, std::size_t n) { file.write(p, n); });
      if (plain != b.bytes) throwBadInput(from, "\"" + b.name + "\": a zstd item changed since it was inspected");
    } else if (source.isRemote(b.file)) {  // a remote DCP's step counters, RNG states, configs
      std::vector<std::uint8_t> chunk(static_cast<std::size_t>(std::min<std::uint64_t>(b.bytes, 4ull << 20)));
      for (std::uint64_t done = 0; done < b.bytes;) {
        const std::uint64_t n = std::min<std::uint64_t>(chunk.size(), b.bytes - done);
        source.read(b.file, chunk.data(), n, b.offset + done);
        file.write(chunk.data(), static_cast<std::size_t>(n));
        done += n;
      }
    } else {
      file.copyFrom(source.fd(b.file), b.offset, b.bytes, source.info().files[b.file]);
    }
    items.push_back(std::move(item));
  }
  for (std::size_t k = 0; k < f.tensors.size(); ++k) {
    const PlannedTensor& t = f.tensors[k];
    if (!torchDtypeName(t.dtype))
      throwBadInput(path, "tensor \"" + t.name + "\" has dtype " + std::string(dtypeName(t.dtype)) +
                              ", which torch.save cannot store");
    const HostTensor h = produce(k);
    DcpWrittenItem item;
    item.fqn = t.name;
    item.offset = file.bytesWritten();
    item.length = requireTorchCheckpointOps("writing a DCP item")
                      .writeTensorZip([&](const void* data, std::size_t n) { file.write(data, n); },
                                      TensorSpec{t.name, t.dtype, t.box.shape}, h, path);
    items.push_back(std::move(item));
  }
  file.commit();
  return items;
}

std::string dcpItemsLog(const std::vector<DcpWrittenItem>& items) {
  nlohmann::json j = nlohmann::json::array();
  for (const auto& i : items)
    j.push_back({{"fqn", i.fqn}, {"offset", i.offset}, {"length", i.length}, {"bytes", i.bytes}});
  return j.dump() + "\n";
}

std::vector<DcpWrittenItem> parseDcpItemsLog(const std::string& text, const std::string& subject) {
  std::vector<DcpWrittenItem> items;
  try {
    for (const auto& j : nlohmann::json::parse(text))
      items.push_back({j.at("fqn").get<std::string>(), j.at("offset").get<std::uint64_t>(),
                       j.at("length").get<std::uint64_t>(), j.value("bytes", false)});
  } catch (const nlohmann::json::exception& e) {
    throwBadInput(subject, std::string("corrupt item log: ") + e.what());
  }
  return items;
}

std::string dcpItemsLogPath(const std::string& dst, const std::string& file) {
  return (fs::path(ConvertJournal::directory(dst)) / ("dcp-items-" + file + ".json")).string();
}

std::string dcpMetadataPickle(const ReshardPlan& plan,
                              const std::function<std::vector<DcpWrittenItem>(const std::string& file)>& itemsOf) {
  // Every chunk of every tensor, by name (names sort as the plan made them: sorted).
  struct Chunk {
    const PlannedTensor* tensor;
    std::string file;
    DcpWrittenItem item;
  };
  std::map<std::string, std::vector<Chunk>> byName;
  std::map<std::string, std::pair<std::string, DcpWrittenItem>> byteItems;  // name -> (file, item)
  for (const auto& f : plan.files) {
    auto items = itemsOf(f.name);
    std::size_t k = 0;
    for (const auto& item : items)
      if (item.bytes) byteItems[item.fqn] = {f.name, item};
    items.erase(std::remove_if(items.begin(), items.end(), [](const DcpWrittenItem& i) { return i.bytes; }), items.end());
    if (items.size() != f.tensors.size())
      throw Error(ErrorKind::Internal, f.name, "its item log lists " + std::to_string(items.size()) + " tensor items, the plan " +
                                                   std::to_string(f.tensors.size()));
    for (; k < items.size(); ++k) {
      if (items[k].fqn != f.tensors[k].name)
        throw Error(ErrorKind::Internal, f.name, "its item log disagrees with the plan at \"" + items[k].fqn + "\"");
      byName[items[k].fqn].push_back({&f.tensors[k], f.name, items[k]});
    }
  }
  PickleBuilder p;
  dataclass(p, kMetadataModule, "Metadata", [&] {
    p.text("state_dict_metadata");
    p.emptyDict();
    p.mark();
    for (const auto& entry : byName) {  // no structured bindings: C++17 lambdas cannot capture them (clang)
      const std::string& name = entry.first;
      const auto& chunks = entry.second;
      const PlannedTensor& first = *chunks.front().tensor;
      p.text(name);
      dataclass(p, kMetadataModule, "TensorStorageMetadata", [&] {
        p.text("properties");
        tensorProperties(p, first.dtype);
        p.text("size");
        torchSize(p, first.source->shape);
        p.text("chunks");
        p.out += ']';  // EMPTY_LIST, MARK, items, APPENDS
        p.mark();
        for (const auto& c : chunks)
          dataclass(p, kMetadataModule, "ChunkStorageMetadata", [&] {
            p.text("offsets");
            torchSize(p, c.tensor->box.start);
            p.text("sizes");
            torchSize(p, c.tensor->box.shape);
          });
        p.out += 'e';
      });
    }
    for (const auto& [name, fileAndItem] : byteItems) {
      p.text(name);
      p.global(kMetadataModule, "BytesStorageMetadata");
      p.emptyTuple();
      p.newObject();
    }
    p.setItems();
    // planner_data maps each flat name to its path in the state dict: the name itself, so
    // dcp_to_torch_save gives back the flat names a model's state_dict() has.
    p.text("planner_data");
    p.emptyDict();
    p.mark();
    for (const auto& [name, chunks] : byName) {
      p.text(name);
      p.mark();
      p.text(name);
      p.tuple();
    }
    p.setItems();
    p.text("storage_data");
    p.emptyDict();
    p.mark();
    for (const auto& entry : byName) {
      const std::string& name = entry.first;
      const auto& chunks = entry.second;
      for (std::size_t i = 0; i < chunks.size(); ++i) {
        const Chunk& c = chunks[i];
        dataclass(p, kMetadataModule, "MetadataIndex", [&] {
          p.text("fqn");
          p.text(name);
          p.text("offset");
          torchSize(p, c.tensor->box.start);
          p.text("index");
          p.integer(static_cast<std::int64_t>(i));
        });
        storageInfo(p, c.file, c.item);
      }
    }
    for (const auto& entry : byteItems) {
      const std::string& name = entry.first;
      const auto& fileAndItem = entry.second;
      dataclass(p, kMetadataModule, "MetadataIndex", [&] {
        p.text("fqn");
        p.text(name);
        p.text("offset");
        p.none();
        p.text("index");
        p.none();
      });
      storageInfo(p, fileAndItem.first, fileAndItem.second);
    }
    p.setItems();
  });
  p.stop();
  return p.out;
}

bool dcpOutputMatchesPlan(const ReshardPlan& plan, const std::string& dst) {
  try {
    std::vector<std::uint8_t> bytes;
    readWholeFile((fs::path(dst) / plan.indexName).string(), 256u << 20, bytes);
    const DcpMetadata md = parseDcpMetadata(bytes.data(), bytes.size(), plan.indexName);
    std::map<std::pair<std::string, std::vector<std::int64_t>>, std::pair<const DcpEntry*, const DcpChunk*>> chunks;
    std::map<std::string, const DcpEntry*> byteEntries;
    for (const auto& e : md.entries) {
      if (!e.isTensor) byteEntries[e.fqn] = &e;
      for (const auto& c : e.chunks) chunks[{e.fqn, c.offsets}] = {&e, &c};
    }
    std::size_t planned = 0;
    for (std::size_t fi = 0; fi < plan.files.size(); ++fi) {
      const PlannedFile& f = plan.files[fi];
      const std::string path = (fs::path(dst) / f.name).string();
      std::vector<std::pair<std::uint64_t, std::uint64_t>> spans;  // (offset, length) of each item
      auto inThisFile = [&](const std::optional<DcpStorage>& s) {
        if (!s || s->relativePath != f.name || !s->transforms.empty()) return false;
        spans.emplace_back(s->offset, s->length);
        return true;
      };
      if (fi == 0)
        for (const auto& b : plan.bytesItems) {
          auto it = byteEntries.find(b.name);
          if (it == byteEntries.end() || !inThisFile(it->second->bytes) || spans.back().second != b.bytes) return false;
        }
      ReadOnlyFd fd(path);
      if (fd.get() < 0) return false;
      for (const auto& t : f.tensors) {
        auto it = chunks.find({t.name, t.box.start});
        if (it == chunks.end()) return false;
        const DcpEntry& e = *it->second.first;
        const DcpChunk& c = *it->second.second;
        if (e.dtype != t.dtype || e.size != t.source->shape || c.sizes != t.box.shape || !inThisFile(c.storage))
          return false;
        const DcpTensorItem item = readDcpTensorItem(fd.get(), path, c.storage->offset, c.storage->length, path);
        if (item.ref.dtype != t.dtype || item.ref.size != t.box.shape) return false;
        ++planned;
      }
      std::sort(spans.begin(), spans.end());
      std::uint64_t end = 0;
      for (const auto& [offset, length] : spans) {
        if (offset != end) return false;
        end += length;
      }
      struct stat st {};
      if (::fstat(fd.get(), &st) != 0 || static_cast<std::uint64_t>(st.st_size) != end) return false;
    }
    return planned == chunks.size() && byteEntries.size() == plan.bytesItems.size();
  } catch (const Error&) {
    return false;  // unreadable or not what the plan makes: not a finished conversion
  }
}

}  // namespace stoker
