#include "dist/dist_group.h"

#include <algorithm>
#include <csignal>
#include <string>

#include "util/error.h"

#ifdef STOKER_WITH_C10D
#include <ATen/ATen.h>
#include <torch/version.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
// Our own macro, not torch's USE_C10D_GLOO: the wheels' CMake config defines that on every target
// that links torch, though they ship no Gloo headers (built there with NCCL alone).
#ifdef STOKER_C10D_GLOO
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#define STOKER_WITH_GLOO 1
#endif
#if defined(STOKER_WITH_CUDA) && defined(USE_C10D_NCCL)
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#define STOKER_WITH_NCCL 1
#endif
#endif

namespace stoker {

std::string collectiveBackendName(CollectiveBackend b) { return b == CollectiveBackend::Nccl ? "nccl" : "gloo"; }

CollectiveBackend collectiveBackendFor(int cudaDevice) {
#ifdef STOKER_WITH_NCCL
  if (cudaDevice >= 0) return CollectiveBackend::Nccl;
#endif
  (void)cudaDevice;
  return CollectiveBackend::Gloo;
}

#ifdef STOKER_WITH_C10D

// One of the two groups: ProcessGroupGloo and ProcessGroupNCCL share no base class that has the
// collectives in both libtorch 1.13 (ProcessGroup) and 2.x (Backend), so each is held as itself.
struct DistGroup::Impl {
  DistEnv env;
  CollectiveBackend backend = CollectiveBackend::Gloo;
  c10::intrusive_ptr<c10d::Store> store;  // the TCPStore under this attempt's prefix
#ifdef STOKER_WITH_GLOO
  c10::intrusive_ptr<c10d::ProcessGroupGloo> gloo;
#endif
#ifdef STOKER_WITH_NCCL
  c10::intrusive_ptr<c10d::ProcessGroupNCCL> nccl;
#endif
  at::TensorOptions options(at::ScalarType dtype) const {
    at::TensorOptions o = at::TensorOptions().dtype(dtype);
    return backend == CollectiveBackend::Nccl ? o.device(at::kCUDA, static_cast<c10::DeviceIndex>(cudaDevice)) : o;
  }
  template <class F>
  auto with(F f) {
#if defined(STOKER_WITH_NCCL) && defined(STOKER_WITH_GLOO)
    if (nccl) return f(*nccl);
    return f(*gloo);
#elif defined(STOKER_WITH_NCCL)
    return f(*nccl);
#else
    return f(*gloo);
#endif
  }
  int cudaDevice = -1;
  bool failed = false;  // a collective threw: a peer may be gone

  // A group that ends cleanly shuts NCCL down (flushes its work, destroys the communicators), as
  // destroy_process_group() does; left to its destructor, torch 2.4 and later abort the
  // communicators and warn that destroy_process_group() was not called. After a failed
  // collective the abort is what is wanted: a shutdown would wait for a peer that is gone.
  ~Impl() {
#if defined(STOKER_WITH_NCCL) && (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4))
    if (nccl && !failed) {
      try {
        nccl->shutdown();
      } catch (const std::exception&) {  // the destructor aborts what is left
      }
    }
#endif
  }
};

namespace {

std::string where(const DistEnv& env) { return env.masterAddr + ":" + std::to_string(env.masterPort); }
std::string secs(double s) {
  char t[32];
  std::snprintf(t, sizeof t, "%g s", s);
  return t;
}

template <typename F>
auto collective(bool& failed, const char* name, F f) {
  try {
    return f();
  } catch (const c10::Error& e) {
    failed = true;
    throw Error(ErrorKind::Io, std::string("collective ") + name,
                std::string(e.what_without_backtrace()) + " (did another rank stop?)");
  } catch (const std::exception& e) {
    failed = true;
    throw Error(ErrorKind::Io, std::string("collective ") + name, std::string(e.what()) + " (did another rank stop?)");
  }
}

}  // namespace

bool distAvailable() { return true; }

#ifdef STOKER_WITH_GLOO
// Gloo's socket, in torch's order: GLOO_SOCKET_IFNAME's interfaces where it is set; else on
// MASTER_ADDR where that is this host's (the master, a one-node job), else the host name's
// address. Bound to MASTER_ADDR alone, every rank on another node failed with "Cannot resolve ...
// to a (local) address".
std::vector<std::shared_ptr<::gloo::transport::Device>> glooDevices(const DistEnv& env) {
  if (const char* names = std::getenv("GLOO_SOCKET_IFNAME"); names && *names) {
    std::vector<std::shared_ptr<::gloo::transport::Device>> devices;
    std::string list = names;
    for (std::size_t at = 0; at <= list.size();) {
      const std::size_t comma = std::min(list.find(',', at), list.size());
      if (comma > at) devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(list.substr(at, comma - at)));
      at = comma + 1;
    }
    if (!devices.empty()) return devices;
  }
  try {
    return {c10d::ProcessGroupGloo::createDeviceForHostname(env.masterAddr)};
  } catch (const std::exception&) {
    return {c10d::ProcessGroupGloo::createDefaultDevice()};
  }
}
#endif

std::unique_ptr<DistGroup> DistGroup::connect(const DistEnv& env, double timeoutSeconds, CollectiveBackend backend,
                                              int cudaDevice, double collectiveTimeoutSeconds) {
#ifndef STOKER_WITH_NCCL
  if (backend == CollectiveBackend::Nccl)
    throwBadInput("collectives nccl", "this stoker was built against a libtorch without CUDA/NCCL (use gloo)");
#endif
  if (backend == CollectiveBackend::Nccl && cudaDevice < 0) throwBadInput("collectives nccl", "needs the rank's CUDA device");
#ifndef STOKER_WITH_GLOO
  if (backend == CollectiveBackend::Gloo)
    throwBadInput("collectives gloo", "this stoker was built against a libtorch without Gloo's headers (PyTorch's wheels "
                                      "ship none): ranks that feed a CUDA device talk over nccl, one rank per GPU; CPU "
                                      "ranks and ranks sharing a GPU need a build with Gloo (Debian: libgloo-dev)");
#endif
  // Gloo's TCP pairs write without MSG_NOSIGNAL: when a peer dies, the next write raised SIGPIPE
  // and silently killed this rank instead of failing the collective with a named error (found
  // by tests/soak/feed_kill.py). Python ignores SIGPIPE at start-up, which is why PyTorch users
  // never see it; do the same, unless the program installed a handler of its own.
  struct sigaction current {};
  if (sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) signal(SIGPIPE, SIG_IGN);
  auto impl = std::make_unique<Impl>();
  impl->env = env;
  impl->backend = backend;
  impl->cudaDevice = cudaDevice;
  const auto timeout = std::chrono::milliseconds(static_cast<std::int64_t>(timeoutSeconds * 1000));
  // A collective waits for the slowest rank's step (El Che's first round, a long scan), not for a
  // join: torch's own default (30 min), not the rendezvous's minute.
  const auto collectiveTimeout = std::chrono::milliseconds(static_cast<std::int64_t>(collectiveTimeoutSeconds * 1000));
#ifdef STOKER_WITH_NCCL
  // A dead peer must end a collective with an error, not hang it until NCCL's watchdog aborts the
  // process: blocking wait makes work->wait() wait for the result and throw on timeout.
  // ProcessGroupNCCL reads it from the environment; set here, before the store starts its threads,
  // as setenv is unsafe while another thread reads the environment.
  if (backend == CollectiveBackend::Nccl) {
    ::setenv("TORCH_NCCL_BLOCKING_WAIT", "1", 0);
#if TORCH_VERSION_MAJOR < 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR < 2)
    ::setenv("NCCL_BLOCKING_WAIT", "1", 0);  // its name before torch 2.2 (later ones warn that it is deprecated)
#endif
  }
#endif
  c10d::TCPStoreOptions so;
  so.port = static_cast<std::uint16_t>(env.masterPort);
  so.isServer = env.rank == 0 && !env.agentStore;  // under torchrun's agent, its store is there already
  so.waitWorkers = false;  // we wait ourselves, to say who is missing
  so.timeout = timeout;
  try {
    // Each attempt of an elastic job apart: the agent's store keeps the last attempt's keys, and
    // its "joined" marks would have let this attempt's wait end before its ranks were there.
    impl->store = c10::make_intrusive<c10d::PrefixStore>("stoker/attempt_" + std::to_string(env.restartCount),
                                                         c10::make_intrusive<c10d::TCPStore>(env.masterAddr, so));
  } catch (const std::exception& e) {
    if (so.isServer) throw Error(ErrorKind::Io, "rendezvous", "cannot host the store at " + where(env) + ": " + e.what());
    throw Error(ErrorKind::Timeout, "rendezvous",
                "no store answered at " + where(env) + " within " + secs(timeoutSeconds) +
                    (env.agentStore ? " (is torchrun's agent running?)" : " (is rank 0 running?)"));
  }
  const std::string prefix = "joined/";
  impl->store->set(prefix + std::to_string(env.rank), {1});
  std::vector<std::string> keys;
  for (int r = 0; r < env.worldSize; ++r) keys.push_back(prefix + std::to_string(r));
  try {
    impl->store->wait(keys, timeout);
  } catch (const std::exception&) {
    std::string missing;
    int joined = 0;
    for (int r = 0; r < env.worldSize; ++r) {
      bool here = false;
      try {
        here = impl->store->check({keys[static_cast<std::size_t>(r)]});
      } catch (const std::exception&) {
      }
      if (here) ++joined;
      else missing += (missing.empty() ? "" : ", ") + std::to_string(r);
    }
    throw Error(ErrorKind::Timeout, "rendezvous",
                "only " + std::to_string(joined) + " of " + std::to_string(env.worldSize) + " ranks joined " +
                    where(env) + " within " + secs(timeoutSeconds) + " (missing rank" +
                    (missing.find(',') != std::string::npos ? "s " : " ") + missing + ")");
  }
#ifdef STOKER_WITH_NCCL
  if (backend == CollectiveBackend::Nccl) {
    try {
      c10::cuda::set_device(static_cast<c10::DeviceIndex>(cudaDevice));  // NCCL's communicator binds to the current GPU
      auto opts = c10d::ProcessGroupNCCL::Options::create();
      opts->timeout = collectiveTimeout;
      impl->nccl = c10::make_intrusive<c10d::ProcessGroupNCCL>(impl->store, env.rank, env.worldSize, opts);
    } catch (const std::exception& e) {
      throw Error(ErrorKind::Io, "rendezvous", std::string("NCCL could not connect the ranks: ") + e.what());
    }
    return std::unique_ptr<DistGroup>(new DistGroup(std::move(impl)));
  }
#endif
#ifdef STOKER_WITH_GLOO
  try {
    auto opts = c10d::ProcessGroupGloo::Options::create();
    opts->timeout = collectiveTimeout;
    opts->devices = glooDevices(env);
    impl->gloo = c10::make_intrusive<c10d::ProcessGroupGloo>(impl->store, env.rank, env.worldSize, opts);
  } catch (const std::exception& e) {
    throw Error(ErrorKind::Io, "rendezvous", std::string("Gloo could not connect the ranks: ") + e.what());
  }
#endif
  return std::unique_ptr<DistGroup>(new DistGroup(std::move(impl)));
}

std::vector<std::int64_t> DistGroup::allgather(std::int64_t value) {
  return collective(impl_->failed, "allgather", [&] {
    std::vector<at::Tensor> in{at::full({1}, value, impl_->options(at::kLong))};
    std::vector<std::vector<at::Tensor>> out(1);
    for (int r = 0; r < worldSize(); ++r) out[0].push_back(at::empty({1}, impl_->options(at::kLong)));
    impl_->with([&](auto& g) { g.allgather(out, in)->wait(); });
    std::vector<std::int64_t> v;
    for (const auto& t : out[0]) v.push_back(t.item<std::int64_t>());  // item() waits for the GPU
    return v;
  });
}

std::vector<double> DistGroup::allgather(double value) {
  return collective(impl_->failed, "allgather", [&] {
    std::vector<at::Tensor> in{at::full({1}, value, impl_->options(at::kDouble))};
    std::vector<std::vector<at::Tensor>> out(1);
    for (int r = 0; r < worldSize(); ++r) out[0].push_back(at::empty({1}, impl_->options(at::kDouble)));
    impl_->with([&](auto& g) { g.allgather(out, in)->wait(); });
    std::vector<double> v;
    for (const auto& t : out[0]) v.push_back(t.item<double>());
    return v;
  });
}

std::vector<std::string> DistGroup::allgather(const std::string& bytes) {
  // c10d gathers tensors of one size: the lengths first, then every rank's bytes padded to the longest.
  const std::vector<std::int64_t> lengths = allgather(static_cast<std::int64_t>(bytes.size()));
  for (std::size_t r = 0; r < lengths.size(); ++r)
    if (lengths[r] < 0 || lengths[r] > (std::int64_t(1) << 32))  // another collective's value: not a length
      throw Error(ErrorKind::Internal, "collective allgather",
                  "rank " + std::to_string(r) + " is at another collective (it sent " + std::to_string(lengths[r]) +
                      " for a length): do all ranks run with the same flags?");
  return collective(impl_->failed, "allgather", [&] {
    const std::int64_t longest = std::max<std::int64_t>(1, *std::max_element(lengths.begin(), lengths.end()));
    at::Tensor mine = at::zeros({longest}, at::kByte);
    std::copy(bytes.begin(), bytes.end(), reinterpret_cast<char*>(mine.data_ptr<std::uint8_t>()));
    std::vector<at::Tensor> in{mine.to(impl_->options(at::kByte).device())};
    std::vector<std::vector<at::Tensor>> out(1);
    for (int r = 0; r < worldSize(); ++r) out[0].push_back(at::empty({longest}, impl_->options(at::kByte)));
    impl_->with([&](auto& g) { g.allgather(out, in)->wait(); });
    std::vector<std::string> v;
    for (int r = 0; r < worldSize(); ++r) {
      const at::Tensor got = out[0][static_cast<std::size_t>(r)].cpu();  // waits for the GPU
      v.emplace_back(reinterpret_cast<const char*>(got.data_ptr<std::uint8_t>()),
                     static_cast<std::size_t>(lengths[static_cast<std::size_t>(r)]));
    }
    return v;
  });
}

void DistGroup::barrier() {
  collective(impl_->failed, "barrier", [&] {
    impl_->with([&](auto& g) { g.barrier()->wait(); });
    return 0;
  });
}

#else  // no c10d in this build

struct DistGroup::Impl {
  DistEnv env;
  CollectiveBackend backend = CollectiveBackend::Gloo;
};

bool distAvailable() { return false; }

std::unique_ptr<DistGroup> DistGroup::connect(const DistEnv&, double, CollectiveBackend, int, double) {
  throwBadInput("distributed", "this stoker was built without libtorch's c10d (neither Gloo's headers nor nccl.h were "
                               "found: install libgloo-dev and rebuild)");
}
std::vector<std::int64_t> DistGroup::allgather(std::int64_t) { return {}; }
std::vector<double> DistGroup::allgather(double) { return {}; }
std::vector<std::string> DistGroup::allgather(const std::string&) { return {}; }
void DistGroup::barrier() {}

#endif

DistGroup::DistGroup(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DistGroup::~DistGroup() = default;
int DistGroup::rank() const { return impl_->env.rank; }
int DistGroup::worldSize() const { return impl_->env.worldSize; }
CollectiveBackend DistGroup::backend() const { return impl_->backend; }

}  // namespace stoker
