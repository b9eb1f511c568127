#include "dist/torchrun_env.h"

#include <cstdlib>
#include <string>

#include "util/error.h"

namespace stoker {
namespace {

int parseInt(const char* name, const char* text) {
  const std::string s = text;
  std::size_t used = 0;
  int v = 0;
  try {
    v = std::stoi(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != s.size()) throwBadInput(name, "\"" + s + "\" is not a whole number");
  return v;
}

}  // namespace

std::optional<DistEnv> distEnvFromEnvironment(const std::function<const char*(const char*)>& getenv) {
  const char* rank = getenv("RANK");
  const char* world = getenv("WORLD_SIZE");
  if (!rank && !world) return std::nullopt;
  if (!rank || !world) throwBadInput(rank ? "WORLD_SIZE" : "RANK", "is not set (torchrun sets RANK and WORLD_SIZE together)");
  DistEnv env;
  env.worldSize = parseInt("WORLD_SIZE", world);
  env.rank = parseInt("RANK", rank);
  if (env.worldSize < 1) throwBadInput("WORLD_SIZE", "must be at least 1 (got " + std::to_string(env.worldSize) + ")");
  if (env.rank < 0 || env.rank >= env.worldSize)
    throwBadInput("RANK", std::to_string(env.rank) + " is not a rank of WORLD_SIZE " + std::to_string(env.worldSize) +
                              " (0-" + std::to_string(env.worldSize - 1) + ")");
  if (const char* local = getenv("LOCAL_RANK")) {
    env.localRank = parseInt("LOCAL_RANK", local);
    const char* localWorld = getenv("LOCAL_WORLD_SIZE");
    const int ranksHere = localWorld ? parseInt("LOCAL_WORLD_SIZE", localWorld) : env.worldSize;
    if (env.localRank < 0 || env.localRank >= ranksHere)
      throwBadInput("LOCAL_RANK", std::to_string(env.localRank) + " is not a rank of this node's " + std::to_string(ranksHere) +
                                      (localWorld ? " (LOCAL_WORLD_SIZE)" : " (WORLD_SIZE)"));
  }
  if (const char* agent = getenv("TORCHELASTIC_USE_AGENT_STORE")) env.agentStore = std::string(agent) == "True";
  if (const char* restarts = getenv("TORCHELASTIC_RESTART_COUNT")) {
    env.restartCount = parseInt("TORCHELASTIC_RESTART_COUNT", restarts);
    if (env.restartCount < 0) throwBadInput("TORCHELASTIC_RESTART_COUNT", "must be 0 or more (got " + std::to_string(env.restartCount) + ")");
  }
  if (const char* addr = getenv("MASTER_ADDR"); addr && *addr) env.masterAddr = addr;
  if (const char* port = getenv("MASTER_PORT")) env.masterPort = parseInt("MASTER_PORT", port);
  if (env.masterPort < 1 || env.masterPort > 65535)
    throwBadInput("MASTER_PORT", std::to_string(env.masterPort) + " is not a port (1-65535)");
  return env;
}

}  // namespace stoker
