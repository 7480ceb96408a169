// main() for the replay build of a fuzz target: runs LLVMFuzzerTestOneInput
// once on each file named on the command line, or on each file of a named
// folder (sorted). The normal test suite replays tests/fuzz_regressions/<target>/
// this way, without libFuzzer and with any compiler; a crash, sanitizer report
// or failed invariant fails the test.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  std::vector<fs::path> inputs;
  for (int i = 1; i < argc; ++i) {
    const fs::path p(argv[i]);
    if (fs::is_directory(p)) {
      std::vector<fs::path> here;
      for (const auto& e : fs::directory_iterator(p))
        if (e.is_regular_file() && e.path().extension() != ".md") here.push_back(e.path());
      std::sort(here.begin(), here.end());
      inputs.insert(inputs.end(), here.begin(), here.end());
    } else if (fs::is_regular_file(p)) {
      inputs.push_back(p);
    } else if (fs::exists(p)) {
      std::fprintf(stderr, "replay: %s is neither a file nor a folder\n", argv[i]);
      return 2;
    }  // a regression folder that does not exist yet holds no cases
  }
  for (const fs::path& p : inputs) {
    std::ifstream f(p, std::ios::binary);
    const std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    std::fprintf(stderr, "replay: %s (%zu bytes)\n", p.c_str(), bytes.size());
    LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
  }
  std::fprintf(stderr, "replay: %zu input(s), no failure\n", inputs.size());
  return 0;
}
