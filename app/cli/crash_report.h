// crash_report: a front end that crashes anyway (a bug: a call through a null pointer, a bad
// access) says where on stderr before the default action ends it, so a report from a machine we
// cannot reach (a user's, a lent GPU's without gdb) names the frames: addr2line -f -C -e BINARY
// OFFSET turns each "binary(+0xOFFSET)" into a function and line.
#pragma once

namespace stoker {

// SIGSEGV, SIGBUS, SIGILL and SIGFPE print the signal, the faulting address, the program counter,
// the caller when the program counter is 0 (a null function pointer called) and a backtrace, then
// the signal's default action (a core dump where enabled) follows. Not under AddressSanitizer or
// ThreadSanitizer, whose own reports are better.
void installCrashReport();

}  // namespace stoker
