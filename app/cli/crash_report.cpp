#include "crash_report.h"

#include <csignal>
#include <cstdint>
#include <cstring>
#include <execinfo.h>
#include <initializer_list>
#include <ucontext.h>
#include <unistd.h>

namespace stoker {
namespace {

// Only write(2) from here on: the handler runs in a process whose heap may be what broke.
void say(const char* text) {
  const ssize_t ignored = ::write(STDERR_FILENO, text, std::strlen(text));
  (void)ignored;
}

void sayNumber(std::uintptr_t v, int base) {
  char buf[32];
  int n = 0;
  do {
    buf[n++] = "0123456789abcdef"[v % base];
    v /= base;
  } while (v && n < 31);
  char out[34] = {};
  for (int i = 0; i < n; ++i) out[i] = buf[n - 1 - i];
  say(base == 16 ? "0x" : "");
  say(out);
}

extern "C" void onCrash(int sig, siginfo_t* info, void* context) {
  // The program itself: after the front end's exec, argv[0] (what the frames below are named by)
  // still says `stoker` while the code is stoker-torch's.
  char exe[4096];
  const ssize_t len = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  exe[len > 0 ? len : 0] = '\0';
  say("stoker: crashed with signal ");
  sayNumber(static_cast<std::uintptr_t>(sig), 10);
  say(" (");
  say(strsignal(sig));
  say(") at address ");
  sayNumber(reinterpret_cast<std::uintptr_t>(info->si_addr), 16);
#if defined(__x86_64__)
  const auto* uc = static_cast<const ucontext_t*>(context);
  const auto pc = static_cast<std::uintptr_t>(uc->uc_mcontext.gregs[REG_RIP]);
  const auto sp = static_cast<std::uintptr_t>(uc->uc_mcontext.gregs[REG_RSP]);
  say(", pc ");
  sayNumber(pc, 16);
  say("\n");
  if (pc == 0 && sp != 0) {
    // A call through a null function pointer: the unwinder cannot leave pc 0, but the call left
    // its return address on top of the stack.
    void* caller = *reinterpret_cast<void* const*>(sp);
    say("called from:\n");
    backtrace_symbols_fd(&caller, 1, STDERR_FILENO);
  }
#else
  (void)context;
  say("\n");
#endif
  void* frames[64];
  const int n = backtrace(frames, 64);
  say("backtrace (the program is ");
  say(exe);
  say("):\n");
  backtrace_symbols_fd(frames, n, STDERR_FILENO);
  say("stoker: this is a bug; addr2line -f -C -e BINARY OFFSET names each frame. Please report it with the lines above.\n");
  // SA_RESETHAND put the default action back: returning re-executes the faulting instruction (a
  // signal sent by kill(2) is raised again), and the default action ends the process as it would have.
  if (info->si_code <= 0) std::raise(sig);
}

}  // namespace

void installCrashReport() {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  return;  // the sanitizer's runtime reports fatal signals itself, with more
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
  return;
#endif
#endif
  void* warm[1];
  backtrace(warm, 1);  // loads the unwinder now: its first call may allocate, the handler's must not
  // A stack overflow is reported too: the handler runs on a stack of its own.
  static char altStack[64 * 1024];
  stack_t ss{};
  ss.ss_sp = altStack;
  ss.ss_size = sizeof altStack;
  sigaltstack(&ss, nullptr);
  struct sigaction sa {};
  sa.sa_sigaction = onCrash;
  sa.sa_flags = SA_SIGINFO | SA_RESETHAND | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGSEGV, SIGBUS, SIGILL, SIGFPE}) sigaction(sig, &sa, nullptr);
}

}  // namespace stoker
