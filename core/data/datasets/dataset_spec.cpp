#include "data/datasets/dataset_spec.h"

#include <cctype>
#include <cstdlib>

#include "util/error.h"

namespace stoker {

std::size_t DatasetSpec::pathEnd(const std::string& rest) {
  for (std::size_t pos = rest.find(','); pos != std::string::npos; pos = rest.find(',', pos + 1)) {
    const std::size_t eq = rest.find('=', pos);
    if (eq == std::string::npos) break;
    bool word = eq > pos + 1;
    for (std::size_t i = pos + 1; i < eq && word; ++i) word = std::isalnum(static_cast<unsigned char>(rest[i])) || rest[i] == '_';
    if (word) return pos;
  }
  return std::string::npos;
}

DatasetSpec DatasetSpec::parse(const std::string& spec, const std::string& kind, const std::string& known) {
  DatasetSpec s;
  s.text = spec;
  s.kind = kind;
  std::string rest = spec.substr(kind.size() + 1);
  const std::size_t cut = pathEnd(rest);
  s.path = rest.substr(0, cut);
  if (s.path.empty()) throwBadInput(spec, "no path after \"" + kind + ":\"");
  if (cut == std::string::npos) return s;
  const std::string opts = rest.substr(cut + 1);
  for (std::size_t pos = 0; pos <= opts.size();) {
    const std::size_t comma = opts.find(',', pos);
    const std::string kv = opts.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    const std::size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) throwBadInput(spec, "options are key=value (got \"" + kv + "\"; known: " + known + ")");
    const std::string key = kv.substr(0, eq);
    if (("," + known + ",").find("," + key + ",") == std::string::npos)
      throwBadInput(spec, "unknown option \"" + key + "\" (known: " + known + ")");
    if (!s.options.emplace(key, kv.substr(eq + 1)).second) throwBadInput(spec, "option \"" + key + "\" given twice");
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return s;
}

std::int64_t DatasetSpec::integer(const std::string& key, std::int64_t fallback, std::int64_t lo, std::int64_t hi) const {
  const auto it = options.find(key);
  if (it == options.end()) return fallback;
  char* end = nullptr;
  const long long v = std::strtoll(it->second.c_str(), &end, 10);
  if (it->second.empty() || *end != '\0' || v < lo || v > hi)
    throwBadInput(text, key + " must be a whole number " + std::to_string(lo) + "-" + std::to_string(hi) + " (got \"" +
                            it->second + "\")");
  return v;
}

}  // namespace stoker
