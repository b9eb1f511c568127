#include "cli_progress.h"

#include <csignal>
#include <cstdio>
#include <unistd.h>

#include "cli_output.h"
#include "util/redacted_url.h"

namespace stoker {
namespace {

CancelToken* gToken = nullptr;

extern "C" void onInterrupt(int sig) {
  if (gToken && !gToken->cancelled()) {
    gToken->cancel();  // a relaxed atomic store: async-signal-safe
    return;
  }
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

std::string duration(double s) {
  char buf[32];
  if (s < 0) return "?";
  if (s < 60) std::snprintf(buf, sizeof buf, "%.0fs", s);
  else if (s < 3600) std::snprintf(buf, sizeof buf, "%dm%02ds", static_cast<int>(s) / 60, static_cast<int>(s) % 60);
  else std::snprintf(buf, sizeof buf, "%dh%02dm", static_cast<int>(s) / 3600, static_cast<int>(s) / 60 % 60);
  return buf;
}

std::string rate(double perSecond) {
  char buf[32];
  std::snprintf(buf, sizeof buf, perSecond < 10 ? "%.1f" : "%.0f", perSecond);
  return buf;
}

}  // namespace

TerminalProgress::TerminalProgress(std::string verb, bool quiet)
    : verb_(std::move(verb)), quiet_(quiet), tty_(::isatty(STDERR_FILENO) == 1) {}

TerminalProgress::~TerminalProgress() {
  if (drawn_ && tty_) std::fprintf(stderr, "\n");
}

void TerminalProgress::progress(const ProgressUpdate& u) {
  if (quiet_) return;
  const auto now = std::chrono::steady_clock::now();
  if (!tty_ && !u.finished && now - lastLine_ < std::chrono::seconds(5)) return;
  lastLine_ = now;
  const std::string named = redactedUrl(u.item);  // an item may be a remote file's URL
  std::string item = named.size() > 40 ? "..." + named.substr(named.size() - 37) : named;
  if (!u.unit.empty() && u.total == 0 && !u.finished) {  // a count whose total is not known ("12000 objects listed")
    std::fprintf(stderr, "%s%s  %llu %s  %s/s  %s%s", tty_ ? "\r\033[K" : "", verb_.c_str(), static_cast<unsigned long long>(u.done),
                 u.unit.c_str(), rate(u.perSecond).c_str(), item.c_str(), tty_ ? "" : "\n");
    std::fflush(stderr);
    drawn_ = true;
    return;
  }
  const double pct = u.total ? 100.0 * static_cast<double>(u.done) / static_cast<double>(u.total) : 100.0;
  // Bytes, or a count of what the unit names ("3 / 10 class folders listed  1.5/s").
  const std::string amount = u.unit.empty() ? humanBytes(u.done) + " / " + humanBytes(u.total) + "  " +
                                                  humanBytes(static_cast<std::uint64_t>(u.perSecond)) + "/s"
                                            : std::to_string(u.done) + " / " + std::to_string(u.total) + " " + u.unit + "  " +
                                                  rate(u.perSecond) + "/s";
  std::fprintf(stderr, "%s%s %5.1f%%  %s  ETA %s  %s%s", tty_ ? "\r\033[K" : "", verb_.c_str(), pct, amount.c_str(),
               u.finished ? "0s" : duration(u.etaSeconds).c_str(), item.c_str(), tty_ ? "" : "\n");
  std::fflush(stderr);
  drawn_ = true;
}

void TerminalProgress::note(const std::string& text) {
  std::fprintf(stderr, "%s%s\n", drawn_ && tty_ ? "\r\033[K" : "", redactedUrl(text).c_str());
}

void cancelOnInterrupt(CancelToken& token) {
  gToken = &token;
  std::signal(SIGINT, onInterrupt);
  std::signal(SIGTERM, onInterrupt);
}

}  // namespace stoker
