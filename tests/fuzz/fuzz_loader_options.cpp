// Fuzz target: LoaderOptions JSON (options files, the workbench's import, sweeps). What it
// accepts is valid and survives a round trip unchanged.
#include <string>

#include "data/loader_options.h"
#include "fuzz_target.h"

using stoker::fuzz::check;

STOKER_FUZZ_TARGET(loader_options) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const stoker::LoaderOptions o = stoker::loaderOptionsFromJson(text, "fuzz.json");
  stoker::validateLoaderOptions(o);
  const std::string once = stoker::loaderOptionsToJson(o);
  const std::string twice = stoker::loaderOptionsToJson(stoker::loaderOptionsFromJson(once, "round trip"));
  check(once == twice, "options survive a JSON round trip");
  (void)stoker::exportPyTorchSnippet(o);
  (void)stoker::exportCppSnippet(o);
}
