#include "ckpt/convert.h"

#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <algorithm>
#include <exception>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>
#include <mutex>

#include "ckpt/convert_journal.h"
#include "ckpt/dcp_writer.h"
#include "ckpt/tensor_stream.h"
#include "ckpt/torch_ops.h"
#include "io/pickle_reader.h"
#include "io/pt_file.h"
#include "io/safetensors_writer.h"
#include "net/remote_url.h"
#include "util/atomic_file.h"
#include "util/error.h"
#include "util/progress.h"
#include "util/remove_tree.h"
#include "util/run_jobs.h"

namespace stoker {
namespace fs = std::filesystem;

namespace {

// Fixed per job on top of the streaming buffers: the output file's write buffer.
constexpr std::uint64_t kWriterBufferBytes = 4ull << 20;
constexpr std::uint64_t kMinJobBytes = 8ull << 20;

std::string mib(std::uint64_t bytes) {
  return std::to_string((bytes + (1 << 20) - 1) >> 20) + " MiB";
}

class WriterSink : public ByteSink {
 public:
  explicit WriterSink(SafetensorsWriter& w) : w_(w) {}
  void append(const void* data, std::size_t n) override { w_.append(data, n); }
  void appendFrom(int fd, std::uint64_t offset, std::uint64_t n, const std::string& source) override {
    w_.appendFrom(fd, offset, n, source);
  }

 private:
  SafetensorsWriter& w_;
};

class MemorySink : public ByteSink {
 public:
  std::vector<std::uint8_t> bytes;
  void append(const void* data, std::size_t n) override {
    auto* p = static_cast<const std::uint8_t*>(data);
    bytes.insert(bytes.end(), p, p + n);
  }
};

// One output tensor whole in `memory` (a .pt record, a DCP item is written in one piece).
HostTensor streamWhole(const PlannedTensor& t, MemorySink& memory, TensorStreamer& streamer,
                       std::map<std::string, F16Overflow>& overflow, const CancelToken& stopOthers) {
  stopOthers.throwIfCancelled("conversion");
  memory.bytes.clear();
  memory.bytes.shrink_to_fit();
  memory.bytes.reserve(t.nbytes);
  streamer.stream(t, memory, &overflow[t.name]);
  HostTensor h;
  h.dtype = t.dtype;
  h.shape = t.box.shape;
  h.data = memory.bytes.data();
  h.nbytes = memory.bytes.size();
  return h;
}

bool isInside(const fs::path& child, const fs::path& parent) {
  auto c = child.begin(), p = parent.begin();
  for (; p != parent.end(); ++p, ++c)
    if (c == child.end() || *c != *p) return false;
  return true;
}

bool looksLikeOurOutput(const std::string& name) {
  auto endsWith = [&](const char* suffix) {
    const std::string s(suffix);
    return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
  };
  return (name.rfind("rank_", 0) == 0 && endsWith(".safetensors")) ||
         (name.rfind("model", 0) == 0 && endsWith(".safetensors")) || name == "model.safetensors.index.json" ||
         name == "metadata.json" || name == "model.pt" || name == ".stoker-journal" || name == ".metadata" ||
         (name.rfind("__", 0) == 0 && endsWith(".distcp")) ||
         name.find(".stoker-tmp-") != std::string::npos;
}

// Temporary files of conversions that died (their process, on this host, is gone).
void removeStaleTemporaries(const std::string& dst) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dst, ec))
    if (isOrphanedTemporary(entry.path().string())) fs::remove(entry.path(), ec);
}

}  // namespace

namespace {

// What one job holds at once for an output tensor: the whole tensor when its format writes a
// record in one piece (.pt, DCP), plus every source piece it reads whole (kept until the tensor is
// written: a tensor split along a later dim takes each row from every piece in turn) -- a strided
// .pt view (loaded whole), or a strided DCP item, gathered from its storage record, which is read
// whole (torch.save keeps a view's entire storage, which may be far larger than the chunk), or a
// compressed one, decompressed whole; one such record at a time.
struct WholeTensor {
  std::uint64_t bytes = 0;
  std::string name;
  bool strided = false;  // held because of how the source stores it (else: how the target writes it)
};

WholeTensor largestWholeTensor(const ReshardPlan& plan) {
  WholeTensor whole;
  const bool recordsWhole = plan.target.kind == TargetKind::Pt || plan.target.kind == TargetKind::Dcp;
  for (const auto& f : plan.files)
    for (const auto& t : f.tensors) {
      std::uint64_t gathered = 0, record = 0;
      for (const auto& seg : t.segments) {  // one per piece the output box meets
        const TensorPiece& p = *seg.piece;
        if (p.strided) {
          std::uint64_t numel = 1;
          for (auto d : p.shape) numel *= static_cast<std::uint64_t>(d);
          gathered += dtypeBytesFor(t.source->dtype, numel).value_or(0);
          record = std::max(record, p.strided->zstd ? p.strided->plainBytes : p.strided->storageBytes);
        } else if (p.loadFromPt) {
          gathered += t.source->nbytes;
        }
      }
      const std::uint64_t piece = gathered + record;
      const std::uint64_t held = (recordsWhole ? t.nbytes : 0) + piece;
      if (held > whole.bytes) whole = {held, t.name, piece > 0};
    }
  return whole;
}

// Jobs share out the output files: no more of them work at once than there are files.
int concurrentJobs(const ReshardPlan& plan, int jobs) {
  return std::max(1, std::min<int>(jobs, static_cast<int>(std::max<std::size_t>(plan.files.size(), 1))));
}

}  // namespace

void validateConvertOptions(const ReshardPlan& plan, const ConvertOptions& o) {
  if (o.jobs < 1 || o.jobs > 256) throwBadInput("--jobs " + std::to_string(o.jobs), "must be from 1 to 256");
  if (o.worldSize < 1) throwBadInput("--world-size " + std::to_string(o.worldSize), "must be at least 1");
  if (o.rank < 0 || o.rank >= o.worldSize)
    throwBadInput("--rank " + std::to_string(o.rank), "must be from 0 to world size - 1 (" +
                                                          std::to_string(o.worldSize - 1) + ")");
  if (o.force && o.worldSize > 1)
    throwBadInput("--force", "cannot be combined with --world-size > 1 (one process would delete another's "
                             "work); empty DST first");
  if (o.force && o.resume) throwBadInput("--force", "cannot be combined with --resume");
  const std::uint64_t needed = kMinJobBytes * static_cast<std::uint64_t>(o.jobs);
  if (o.memoryBudget < needed)
    throwBadInput("--memory-budget " + mib(o.memoryBudget),
                  "is too small for --jobs " + std::to_string(o.jobs) + ": needs at least " + mib(needed) +
                      " (8 MiB per job)");
  // A dtype the target cannot hold is refused here, before DST is touched: found by the file's
  // writer, it came after --force had deleted DST's old outputs and a journal was written.
  if (plan.target.kind == TargetKind::Pt || plan.target.kind == TargetKind::Dcp) {
    const bool dcp = plan.target.kind == TargetKind::Dcp;  // DCP's items take torch 2's storages too
    for (const PlannedFile& f : plan.files)
      for (const PlannedTensor& t : f.tensors)
        if (torchStorageClass(t.dtype, dcp).empty())
          throwBadInput(std::string("--to ") + (dcp ? "dcp" : "pt"),
                        "tensor \"" + t.name + "\" has dtype " + std::string(dtypeName(t.dtype)) +
                            (dcp ? ", which torch.save cannot store" : ", which torch.save (1.13) cannot store") +
                            ": pick another --dtype, or --to single / hf / ranks (safetensors)");
  }
  const WholeTensor whole = largestWholeTensor(plan);
  if (whole.bytes + kMinJobBytes > o.memoryBudget)
    throwBadInput("--memory-budget " + mib(o.memoryBudget),
                  "is too small: tensor \"" + whole.name + "\" must be held whole in memory (" + mib(whole.bytes) +
                      (whole.strided ? ", it is stored strided in the source, read whole" :
                                       ", a .pt record or DCP item is written in one piece") +
                      "); raise it to at least " + mib(whole.bytes + kMinJobBytes) +
                      (plan.target.kind == TargetKind::Pt ? " or convert --to single" : ""));
  // Each job writing a file of its own may hold such a tensor at the same time.
  const int together = concurrentJobs(plan, o.jobs);
  if (whole.bytes > 0 && (whole.bytes + kMinJobBytes) * static_cast<std::uint64_t>(together) > o.memoryBudget)
    throwBadInput("--memory-budget " + mib(o.memoryBudget),
                  "is too small for --jobs " + std::to_string(o.jobs) + ": each of " + std::to_string(together) +
                      " jobs may hold a tensor whole (\"" + whole.name + "\": " + mib(whole.bytes) +
                      "); raise it to at least " + mib((whole.bytes + kMinJobBytes) * static_cast<std::uint64_t>(together)) +
                      " or use --jobs " + std::to_string(std::max<std::uint64_t>(1, o.memoryBudget / (whole.bytes + kMinJobBytes))));
}

namespace {

bool holdsOnlyJournal(const std::string& dst) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dst, ec))
    if (entry.path().filename() != ".stoker-journal") return false;
  return !ec;
}

// Decides whether DST may be written and prepares it. Nothing is written
// before every check passed.
void prepareDestination(const CheckpointInfo& source, const std::string& dst, const std::string& fingerprint,
                        const ConvertOptions& o, ConvertJournal& journal) {
  std::error_code ec;
  const fs::path dstPath = fs::weakly_canonical(fs::absolute(dst), ec);
  for (const auto& file : source.files) {
    if (isRemotePath(file)) continue;
    const fs::path src = fs::weakly_canonical(fs::absolute(file), ec);
    if (isInside(src, dstPath))
      throwBadInput(dst, "contains the source file " + file + "; choose a directory of its own");
  }
  if (fs::is_directory(source.path)) {
    const fs::path srcDir = fs::weakly_canonical(fs::absolute(source.path), ec);
    if (isInside(dstPath, srcDir)) throwBadInput(dst, "is inside the source checkpoint " + source.path);
  }
  const bool exists = fs::exists(dst, ec);
  if (!exists) {
    if (o.resume) throwBadInput(dst, "does not exist: there is no conversion to resume");
    fs::create_directories(dst, ec);
    if (ec) throwIo(dst, "cannot create the directory", ec.value());
    return;
  }
  if (!fs::is_directory(dst, ec)) throwBadInput(dst, "exists and is not a directory");
  const std::string recorded = journal.recordedFingerprint();
  if (o.resume) {
    // Killed after creating DST but before its journal was written: nothing was converted yet,
    // so resuming is starting.
    if (recorded.empty() && (fs::is_empty(dst, ec) || holdsOnlyJournal(dst))) return;
    if (recorded.empty())
      throwBadInput(dst, "has no journal: there is no interrupted conversion to resume (a finished conversion "
                         "removes its journal; stoker ckpt verify SRC DST checks it)");
    if (recorded != fingerprint)
      throwBadInput(dst, "holds an interrupted conversion of a different source or target; resume it with the "
                         "same SRC and --to/--dtype, or pass --force to start over");
    removeStaleTemporaries(dst);
    return;
  }
  if (o.worldSize > 1 && recorded == fingerprint) {  // a cooperating process started it
    removeStaleTemporaries(dst);  // a rank relaunched after a kill (an OOM) leaves none behind
    return;
  }
  if (o.worldSize > 1 && recorded.empty() && holdsOnlyJournal(dst)) return;  // ...and is writing its plan now
  if (o.force) {
    for (const auto& entry : fs::directory_iterator(dst, ec))
      if (looksLikeOurOutput(entry.path().filename().string())) removeTree(entry.path().string(), ec);
    return;
  }
  if (fs::is_empty(dst, ec)) return;
  if (!recorded.empty())
    throwBadInput(dst, "holds an interrupted conversion; pass --resume to finish it or --force to start over");
  throwBadInput(dst, "already exists; pass --force to replace the checkpoint files in it");
}

// A conversion killed after it finished (index written, journal removed) but before it exited
// leaves no journal: it is complete when every planned file has exactly its planned size --
// the journal's own evidence -- and the index holds exactly the planned bytes.
bool finishedWithoutJournal(const ReshardPlan& plan, const std::string& dst, const std::string& fingerprint) {
  std::error_code ec;
  // DCP: sizes are known only once written, so the .metadata (written last) must list each
  // planned item where its file holds it.
  if (plan.indexFromItems) return dcpOutputMatchesPlan(plan, dst);
  // .pt: sized only once written too (its zip's records around the planned data bytes), and it has
  // no index: the fingerprint a finished conversion marks DST with decides, with every file at
  // least its data's bytes (a cut one is smaller). By the planned sizes, a finished --to pt was
  // "no journal to resume".
  const bool pt = plan.target.kind == TargetKind::Pt;
  for (const auto& f : plan.files) {
    const auto size = fs::file_size(fs::path(dst) / f.name, ec);
    if (ec || (pt ? size < f.fileBytes : size != f.fileBytes)) return false;
  }
  if (pt) return ConvertJournal::finishedFingerprint(dst) == fingerprint;
  if (plan.indexName.empty()) return true;
  std::ifstream in(fs::path(dst) / plan.indexName, std::ios::binary);
  const std::string index((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return in.good() || in.eof() ? index == plan.indexContent : false;
}

}  // namespace

bool conversionNeedsLibtorch(const ReshardPlan& plan) {
  if (plan.target.kind == TargetKind::Pt || plan.target.kind == TargetKind::Dcp) return true;
  for (const auto& f : plan.files)
    for (const auto& t : f.tensors)
      if (t.converts()) return true;
  return false;
}

int defaultConvertJobs(const ReshardPlan& plan, std::uint64_t memoryBudget) {
  const int cores = static_cast<int>(std::max(2u, std::thread::hardware_concurrency()));
  // Dtype conversion and zip writing use the CPU: as many jobs as cores.
  const int wanted = conversionNeedsLibtorch(plan) ? cores : std::max(cores, std::min<int>(4, static_cast<int>(plan.files.size())));
  // Never more jobs than the budget has room for, counting a tensor each may have to hold whole.
  const auto room = static_cast<int>(std::min<std::uint64_t>(memoryBudget / (kMinJobBytes + largestWholeTensor(plan).bytes), 256));
  return std::max(1, std::min(wanted, room));
}

std::uint64_t perJobBufferBytes(const ConvertOptions& o) {
  const std::uint64_t perJob = o.memoryBudget / static_cast<std::uint64_t>(std::max(o.jobs, 1));
  // Reading buffer + converted buffer + libtorch temporaries ~ 4 buffers; more
  // than 16 MiB buys no speed.
  const std::uint64_t b = perJob > kWriterBufferBytes ? (perJob - kWriterBufferBytes) / 4 : 0;
  return std::clamp<std::uint64_t>(b, 256 << 10, 16ull << 20);
}

ConvertReport convertCheckpoint(const CheckpointInfo& source, const ReshardPlan& plan, const std::string& dst,
                                const ConvertOptions& o) {
  const auto started = std::chrono::steady_clock::now();
  requireConsistent(source);
  validateConvertOptions(plan, o);
  const std::string fingerprint = conversionFingerprint(source, plan);
  ConvertJournal journal(dst);
  if (o.resume && journal.recordedFingerprint().empty() && finishedWithoutJournal(plan, dst, fingerprint)) {
    // The planned layout and sizes are there; the recorded fingerprint says whether they were made
    // from this source (a later checkpoint of the same model has the same layout).
    const std::string finished = ConvertJournal::finishedFingerprint(dst);
    if (!finished.empty() && finished != fingerprint)
      throwBadInput(dst, "holds a finished conversion of another source or target (or its source files have changed "
                         "since); there is nothing to resume: pass --force to convert again");
    ConvertReport done;  // resuming a finished conversion is a no-op, not an error
    for (const auto& f : plan.files) done.alreadyDone.push_back(f.name);
    done.complete = true;
    done.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    return done;
  }
  prepareDestination(source, dst, fingerprint, o, journal);
  journal.start(fingerprint, redactedUrl(source.path) + " -> " + targetName(plan.target));

  ConvertReport report;
  const auto finished = journal.finishedFiles();
  std::vector<const PlannedFile*> mine;
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < plan.files.size(); ++i) {
    const PlannedFile& f = plan.files[i];
    if (finished.count(f.name)) {
      report.alreadyDone.push_back(f.name);
    } else if (static_cast<int>(i % static_cast<std::size_t>(o.worldSize)) == o.rank) {
      mine.push_back(&f);
      total += f.dataBytes();
    } else {
      report.leftToOthers.push_back(f.name);
    }
  }

  SourceFiles files(source);
  ProgressMeter meter(o.progress, total, 0, std::chrono::milliseconds(o.progressIntervalMs));
  const std::size_t bufferBytes = perJobBufferBytes(o);
  std::atomic<std::size_t> nextFile{0};
  std::atomic<bool> failed{false};
  std::exception_ptr firstError;
  std::mutex mutex;
  std::map<std::string, F16Overflow> overflowByTensor;
  // What an earlier, interrupted run (or a cooperating process) found in the files it finished:
  // this run's warnings cover the whole conversion, not only the files it writes itself.
  auto addOverflows = [&](const std::map<std::string, F16Overflow>& byTensor) {
    for (const auto& [name, count] : byTensor) {
      if (count.count == 0) continue;
      F16Overflow& sum = overflowByTensor[name];  // a tensor split over many files reports once
      sum.count += count.count;
      sum.maxAbs = std::max(sum.maxAbs, count.maxAbs);
    }
  };
  for (const std::string& name : report.alreadyDone) addOverflows(journal.recordedOverflows(name));
  CancelToken stopOthers;  // set when one job fails, so the rest stop early

  auto worker = [&] {
    try {
      // One streamer per job, reused for every file (its 16 MiB buffer is zero-filled once). A job
      // stops within one buffer on the user's cancel, and before its next tensor when another
      // job failed (stopOthers).
      TensorStreamer streamer(files, bufferBytes, o.cancel, &meter);
      for (;;) {
        const std::size_t i = nextFile++;
        if (i >= mine.size() || failed.load()) return;
        const PlannedFile& f = *mine[i];
        const std::string path = (fs::path(dst) / f.name).string();
        std::map<std::string, F16Overflow> overflow;
        if (plan.target.kind == TargetKind::Dcp) {
          MemorySink memory;
          static const std::vector<CheckpointInfo::Item> kNone;
          const auto items = writeDcpFile(path, f, &f == &plan.files.front() ? plan.bytesItems : kNone, files, [&](std::size_t k) {
            return streamWhole(f.tensors[k], memory, streamer, overflow, stopOthers);
          });
          AtomicFile log(dcpItemsLogPath(dst, f.name));
          const std::string text = dcpItemsLog(items);
          log.write(text.data(), text.size());
          log.commit();
        } else if (plan.target.kind == TargetKind::Pt) {
          std::vector<TensorSpec> specs;
          for (const auto& t : f.tensors) specs.push_back({t.name, t.dtype, t.box.shape});
          MemorySink memory;
          requireTorchCheckpointOps("writing a .pt file").writePtStreaming(path, specs, [&](std::size_t k) {
            return streamWhole(f.tensors[k], memory, streamer, overflow, stopOthers);
          });
        } else {
          std::vector<TensorSpec> specs;
          std::map<std::string, const PlannedTensor*> byName;
          for (const auto& t : f.tensors) {
            specs.push_back({t.name, t.dtype, t.box.shape});
            byName[t.name] = &t;
          }
          SafetensorsWriter writer(path, std::move(specs), f.metadata);
          WriterSink sink(writer);
          for (const auto& spec : writer.writeOrder()) {
            stopOthers.throwIfCancelled("conversion");
            streamer.stream(*byName.at(spec.name), sink, &overflow[spec.name]);
          }
          writer.finish();
        }
        std::error_code ec;
        const std::uint64_t size = fs::file_size(path, ec);
        std::lock_guard<std::mutex> lock(mutex);
        journal.recordOverflows(f.name, overflow);
        journal.markDone(f.name, size);
        report.written.push_back(f.name);
        report.bytesWritten += size;
        addOverflows(overflow);
      }
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex);
      if (!firstError) firstError = std::current_exception();
      failed = true;
      stopOthers.cancel();
    }
  };
  runJobs(std::max(1, std::min<int>(o.jobs, static_cast<int>(mine.size()))), worker);
  meter.finish();
  report.f16Overflows.assign(overflowByTensor.begin(), overflowByTensor.end());

  if (firstError) {
    try {
      std::rethrow_exception(firstError);
    } catch (const Error& e) {
      const std::string kept = std::to_string(report.written.size() + report.alreadyDone.size()) +
                               " finished file(s) kept, rerun with --resume to complete the conversion";
      if (e.kind() == ErrorKind::Io) throw Error(ErrorKind::Io, e.subject(), e.reason() + "; " + kept);
      if (e.kind() == ErrorKind::Cancelled) throw Error(ErrorKind::Cancelled, dst, "conversion cancelled; " + kept);
      throw;
    }
  }

  // The index goes last, by whichever process sees every file finished.
  const auto nowFinished = journal.finishedFiles();
  bool all = true;
  for (const auto& f : plan.files) all = all && nowFinished.count(f.name);
  if (all) {
    // A cooperating process that also saw every file done may have written .metadata and removed
    // the journal, item logs included, already: its .metadata is the one this process would write.
    bool othersWroteIt = false;
    std::string content = plan.indexContent;
    if (plan.indexFromItems) {
      try {
        content = dcpMetadataPickle(plan, [&](const std::string& file) {
          const std::string logPath = dcpItemsLogPath(dst, file);
          std::ifstream in(logPath, std::ios::binary);
          if (!in) throwIo(logPath, "cannot read the item log of a finished file", errno);
          return parseDcpItemsLog(std::string(std::istreambuf_iterator<char>(in), {}), logPath);
        });
      } catch (const Error& e) {
        std::error_code ec;
        // Its journal's plan gone: finish() unlinks the plan first, then removes the rest (item
        // logs included) entry by entry, so a missing plan, not a missing folder, says it is done.
        othersWroteIt = e.kind() == ErrorKind::Io && !fs::exists(fs::path(ConvertJournal::directory(dst)) / "plan", ec) &&
                        fs::is_regular_file(fs::path(dst) / plan.indexName, ec);
        if (!othersWroteIt) throw;
      }
    }
    if (!plan.indexName.empty() && !othersWroteIt) {
      AtomicFile index((fs::path(dst) / plan.indexName).string());
      index.write(content.data(), content.size());
      index.commit();
      report.indexWritten = true;
    }
    journal.finish(fingerprint);
    report.complete = true;
    report.leftToOthers.clear();
  }
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return report;
}

}  // namespace stoker
