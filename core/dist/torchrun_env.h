// dist/torchrun_env: the torchrun environment a rank is started with
// (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT), read and checked.
#pragma once

#include <functional>
#include <optional>
#include <string>

namespace stoker {

struct DistEnv {
  int rank = 0;
  int worldSize = 1;
  int localRank = 0;
  std::string masterAddr = "127.0.0.1";
  int masterPort = 29500;
  // torchrun's agent hosts the store (TORCHELASTIC_USE_AGENT_STORE=True): every rank, rank 0 too,
  // joins it as a client, as torch's env:// rendezvous does. Its keys outlive a restart of the
  // workers, so each attempt (TORCHELASTIC_RESTART_COUNT) keeps its keys apart.
  bool agentStore = false;
  int restartCount = 0;
};

// nullopt when neither RANK nor WORLD_SIZE is set (a single process).
// Throws Error(BadInput) naming the variable: not a number, WORLD_SIZE < 1,
// RANK outside 0..WORLD_SIZE-1, one of RANK/WORLD_SIZE without the other,
// MASTER_PORT outside 1-65535, LOCAL_RANK outside 0..LOCAL_WORLD_SIZE-1 (or
// 0..WORLD_SIZE-1 without it). `getenv` is injectable for tests.
std::optional<DistEnv> distEnvFromEnvironment(
    const std::function<const char*(const char*)>& getenv = [](const char* n) { return std::getenv(n); });

}  // namespace stoker
