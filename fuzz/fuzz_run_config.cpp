// Fuzz target: the run configuration as `melforge train --config FILE --set
// key=value ...` builds it (model::load_toml_string, apply_override for each
// --set, validate), then the property the run directory relies on: the
// resolved TOML written to RUN_DIR/config.toml (to_toml) loads back, validates
// and resolves to the same text (checkpoints store it and eval reloads it).
//
// Input: TOML text; the lines after a line that is exactly "--set" are --set
// assignments, one per line (fuzz/seeds/run_config/ has examples).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "engine/error.hpp"
#include "fuzz/fuzz_support.hpp"
#include "model/run_config.hpp"

namespace {
constexpr const char* kTarget = "run_config";

void split(std::string_view in, std::string& toml, std::vector<std::string>& sets) {
  std::size_t pos = 0;
  bool in_sets = false;
  while (pos <= in.size()) {
    std::size_t nl = in.find('\n', pos);
    if (nl == std::string_view::npos) nl = in.size();
    const std::string_view line = in.substr(pos, nl - pos);
    if (!in_sets && line == "--set") {
      in_sets = true;
    } else if (in_sets) {
      if (!line.empty()) sets.emplace_back(line);
    } else {
      toml.append(line);
      toml.push_back('\n');
    }
    pos = nl + 1;
  }
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  mf::fuzz::quiet();
  std::string toml;
  std::vector<std::string> sets;
  split(std::string_view(reinterpret_cast<const char*>(data), size), toml, sets);
  std::string resolved;
  try {
    mf::model::RunConfig cfg;
    mf::model::load_toml_string(cfg, toml, "fuzz.toml");
    for (const std::string& s : sets) mf::model::apply_override(cfg, s);
    mf::model::validate(cfg);
    resolved = mf::model::to_toml(cfg);
  } catch (const mf::Error&) {
    return 0;
  } catch (...) {
    mf::fuzz::fail_uncaught(kTarget);
  }
  // A configuration that validated must round-trip through config.toml.
  try {
    mf::model::RunConfig again;
    mf::model::load_toml_string(again, resolved, "resolved config.toml");
    mf::model::validate(again);
    FUZZ_CHECK(mf::model::to_toml(again) == resolved, kTarget);
  } catch (const mf::Error& e) {
    std::fprintf(stderr, "fuzz run_config: the resolved configuration does not load back: %s\n--- resolved:\n%s\n",
                 e.what(), resolved.c_str());
    std::abort();
  } catch (...) {
    mf::fuzz::fail_uncaught(kTarget);
  }
  return 0;
}
