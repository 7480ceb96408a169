// Fuzz target: a speaker-verification trial list as `melforge verify --trials
// FILE` reads it (model::parse_trials, the VoxCeleb text format "LABEL NAME_A
// NAME_B" per line) against a small fixed name index (model::index_names, as
// verify builds it from the embeddings file's names).
//
// Input: the trial list's text (fuzz/seeds/trials/ has examples; the names the
// index holds are kNames below).
//
// Invariants of a list that parses: every trial is an independent reading of
// a non-blank line (fields split at whitespace, the label 0 or 1, both names
// in the index), in line order and one per such line; and the list written
// back in the format write_trials writes parses to the same trials.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "engine/error.hpp"
#include "fuzz/fuzz_support.hpp"
#include "model/verification.hpp"

namespace {
constexpr const char* kTarget = "trials";

// VoxCeleb-like names, a short one, a UTF-8 one, and two that no line can name
// (whitespace inside): the parser must never match them.
const std::vector<std::string> kNames = {
    "id10270/x6uYqmx31kE/00001.wav", "id10270/8jEAjG6SegY/00008.wav", "id10273/0OCW1HUxZyg/00001.wav",
    "id10273/alFx8mJQSOo/00002.wav", "a", "b", "1", "0", "données/é.wav", "has space.wav", "tab\there.wav"};

const mf::model::NameIndex& names() {
  static const mf::model::NameIndex index = mf::model::index_names(kNames);
  return index;
}

bool space(char c) { return c == ' ' || c == '\t' || c == '\v' || c == '\f' || c == '\r' || c == '\n'; }

// The reference reading of the text: the non-blank lines' fields (split at
// whitespace, as Python's str.split() does for ASCII; docs/verification.md).
std::vector<std::vector<std::string>> reference_lines(std::string_view text) {
  std::vector<std::vector<std::string>> out;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) nl = text.size();
    std::vector<std::string> fields;
    std::string cur;
    for (std::size_t i = pos; i < nl; ++i) {
      if (space(text[i])) {
        if (!cur.empty()) fields.push_back(std::move(cur));
        cur.clear();
      } else {
        cur.push_back(text[i]);
      }
    }
    if (!cur.empty()) fields.push_back(std::move(cur));
    if (!fields.empty()) out.push_back(std::move(fields));
    pos = nl + 1;
  }
  return out;
}

std::vector<mf::model::Trial> parse(const std::string& text, const char* source) {
  std::istringstream in(text);
  return mf::model::parse_trials(in, names(), source);
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  mf::fuzz::quiet();
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::vector<mf::model::Trial> trials;
  try {
    trials = parse(text, "fuzz-trials.txt");
  } catch (const mf::Error&) {
    return 0;
  } catch (...) {
    mf::fuzz::fail_uncaught(kTarget);
  }
  // Every trial is the reading of one non-blank line, in order.
  const std::vector<std::vector<std::string>> lines = reference_lines(text);
  FUZZ_CHECK(trials.size() == lines.size(), kTarget);
  std::string written;
  for (std::size_t t = 0; t < trials.size(); ++t) {
    const mf::model::Trial& tr = trials[t];
    const std::vector<std::string>& f = lines[t];
    FUZZ_CHECK(f.size() == 3, kTarget);
    FUZZ_CHECK(tr.label == (f[0] == "1" ? 1 : 0) && (f[0] == "0" || f[0] == "1"), kTarget);
    FUZZ_CHECK(tr.a >= 0 && tr.a < std::int64_t(kNames.size()) && kNames[std::size_t(tr.a)] == f[1], kTarget);
    FUZZ_CHECK(tr.b >= 0 && tr.b < std::int64_t(kNames.size()) && kNames[std::size_t(tr.b)] == f[2], kTarget);
    written += std::to_string(tr.label) + " " + kNames[std::size_t(tr.a)] + " " + kNames[std::size_t(tr.b)] + "\n";
  }
  // The list as write_trials writes it reads back to the same trials.
  try {
    FUZZ_CHECK(parse(written, "written trials") == trials, kTarget);
  } catch (const mf::Error& e) {
    std::fprintf(stderr, "fuzz trials: the list written back does not parse: %s\n", e.what());
    std::abort();
  } catch (...) {
    mf::fuzz::fail_uncaught(kTarget);
  }
  return 0;
}
