// util/job_threads: a remote batch's fetches on threads kept between calls. A loader worker
// fetching a batch's images max_inflight_parts at a time started and joined that many threads per
// batch (1,264 thread starts in a 5,000-photo epoch, each faulting in its stack and TLS); here
// each calling thread keeps its own helpers, started on first use and joined when it exits.
#pragma once

#include <cstdint>
#include <functional>

namespace stoker {

// fetch(i) for every i in [0, count) on `threads` kept helper threads (taken in index order),
// while the caller runs use(0), use(1), ... each as soon as its fetch has returned: a remote batch's
// first image is decoded while the rest download, not after the last arrives. fetch must not
// throw (keep the error for use to throw). An exception from use stops the helpers taking more
// items, waits for the fetches running, and is rethrown. Nested in a body, the fetches run first.
// `waited`, when given, gains the seconds the caller spent waiting for fetches (a read stage).
void forEachFetchedInOrder(std::int64_t count, int threads, const std::function<void(std::int64_t)>& fetch,
                           const std::function<void(std::int64_t)>& use, double* waited = nullptr);

}  // namespace stoker
