#include "ckpt/convert_journal.h"

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fcntl.h>
#include <sys/xattr.h>
#include <unistd.h>
#include <xxhash.h>

#include "net/remote_object.h"
#include "util/atomic_file.h"
#include "util/error.h"
#include "util/remove_tree.h"

namespace stoker {
namespace fs = std::filesystem;

namespace {
constexpr const char* kFinishedXattr = "user.stoker.conversion";
}

std::string conversionFingerprint(const CheckpointInfo& source, const ReshardPlan& plan) {
  std::ostringstream s;
  s << "stoker-convert-v1\n" << targetName(plan.target) << "\n";
  for (std::size_t i = 0; i < source.files.size(); ++i) {
    const std::string& path = source.files[i];
    if (i < source.remote.size() && source.remote[i]) {  // a remote file is its URL, size and ETag
      const RemoteObject& o = *source.remote[i];
      // With an ETag pinning the bytes, the URL without its query: a presigned URL expires (often
      // in an hour), and the interrupted conversion is resumed with a newly signed one.
      s << (o.etag().empty() ? path : path.substr(0, path.find('?'))) << ' ' << o.size() << ' ' << o.etag() << "\n";
      continue;
    }
    std::error_code ec;
    auto canonical = fs::weakly_canonical(path, ec);
    auto size = fs::file_size(path, ec);
    auto mtime = fs::last_write_time(path, ec).time_since_epoch().count();
    s << canonical.string() << ' ' << size << ' ' << mtime << "\n";
  }
  for (const auto& f : plan.files) {
    s << f.name << ' ' << f.fileBytes << "\n";
    for (const auto& t : f.tensors) {
      s << t.name << ' ' << dtypeName(t.dtype);
      for (std::size_t d = 0; d < t.box.shape.size(); ++d) s << ' ' << t.box.start[d] << '+' << t.box.shape[d];
      s << "\n";
    }
  }
  s << plan.indexName << "\n" << plan.indexContent;
  const std::string text = s.str();
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(XXH3_64bits(text.data(), text.size())));
  return hex;
}

std::string ConvertJournal::directory(const std::string& dst) { return (fs::path(dst) / ".stoker-journal").string(); }

ConvertJournal::ConvertJournal(std::string dst) : dst_(std::move(dst)), dir_(directory(dst_)) {}

ConvertJournal::~ConvertJournal() {
  if (logFd_ >= 0) ::close(logFd_);
}

std::string ConvertJournal::recordedFingerprint() const {
  std::ifstream in(dir_ + "/plan");
  std::string line;
  if (!in || !std::getline(in, line)) return "";
  return line;
}

void ConvertJournal::start(const std::string& fingerprint, const std::string& description) {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) throwIo(dir_, "cannot create the journal directory", ec.value());
  ::removexattr(dst_.c_str(), kFinishedXattr);  // DST no longer holds that finished conversion
  if (recordedFingerprint() == fingerprint) return;
  AtomicFile plan(dir_ + "/plan");
  const std::string text = fingerprint + "\n" + description + "\n";
  plan.write(text.data(), text.size());
  plan.commit();
}

std::map<std::string, std::uint64_t> ConvertJournal::finishedFiles() const {
  std::map<std::string, std::uint64_t> done;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir_, ec)) {
    if (entry.path().filename().string().rfind("done-", 0) != 0) continue;
    std::ifstream in(entry.path());
    std::string line;
    while (std::getline(in, line)) {
      // A torn last line (crash mid-append) has no newline and is skipped by
      // the size check below failing to parse.
      const auto space = line.find(' ');
      if (space == std::string::npos || space == 0) continue;
      std::uint64_t bytes = 0;
      try {
        bytes = std::stoull(line.substr(0, space));
      } catch (const std::exception&) {
        continue;
      }
      const std::string file = line.substr(space + 1);
      std::error_code sizeError;
      const auto onDisk = fs::file_size(fs::path(dst_) / file, sizeError);
      if (!sizeError && onDisk == bytes) done[file] = bytes;
    }
  }
  return done;
}

void ConvertJournal::markDone(const std::string& file, std::uint64_t bytes) {
  if (logFd_ < 0) {
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    logName_ = dir_ + "/done-" + std::string(host) + "-" + std::to_string(::getpid());
    logFd_ = ::open(logName_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (logFd_ < 0) throwIo(logName_, "cannot open the journal", errno);
  }
  const std::string line = std::to_string(bytes) + " " + file + "\n";
  if (::write(logFd_, line.data(), line.size()) != static_cast<ssize_t>(line.size()))
    throwIo(logName_, "cannot append to the journal", errno);
  if (::fsync(logFd_) != 0) throwIo(logName_, "cannot fsync the journal", errno);
}

// One line a tensor: "<count> <max |x|> <name>" (the name last: it may hold spaces).
void ConvertJournal::recordOverflows(const std::string& file, const std::map<std::string, F16Overflow>& byTensor) {
  std::ostringstream text;
  text.precision(17);
  for (const auto& [name, o] : byTensor)
    if (o.count > 0) text << o.count << ' ' << o.maxAbs << ' ' << name << '\n';
  if (text.tellp() == 0) return;
  AtomicFile out(dir_ + "/f16-" + file);
  const std::string bytes = text.str();
  out.write(bytes.data(), bytes.size());
  out.commit();
}

std::map<std::string, F16Overflow> ConvertJournal::recordedOverflows(const std::string& file) const {
  std::map<std::string, F16Overflow> out;
  std::ifstream in(dir_ + "/f16-" + file);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    F16Overflow o;
    std::string name;
    if (!(fields >> o.count >> o.maxAbs) || fields.get() != ' ' || !std::getline(fields, name) || name.empty()) continue;
    out[name] = o;
  }
  return out;
}

std::string ConvertJournal::finishedFingerprint(const std::string& dst) {
  char value[64];
  const ssize_t n = ::getxattr(dst.c_str(), kFinishedXattr, value, sizeof value);
  return n > 0 ? std::string(value, static_cast<std::size_t>(n)) : std::string();
}

void ConvertJournal::finish(const std::string& fingerprint) {
  // Before the journal goes: killed in between, DST still has its journal and --resume finishes.
  ::setxattr(dst_.c_str(), kFinishedXattr, fingerprint.data(), fingerprint.size(), 0);  // ENOTSUP: sizes only
  if (logFd_ >= 0) {
    ::close(logFd_);
    logFd_ = -1;
  }
  // The plan first: a kill while the tree goes (in readdir order) left a journal whose plan still
  // matched but whose DCP item logs were gone, and every --resume failed on them. Without its plan
  // the rest is no journal, and --resume finds the output finished.
  ::unlink((dir_ + "/plan").c_str());
  std::error_code ec;
  removeTree(dir_, ec);
}

}  // namespace stoker
