#include "train/run_log.hpp"


#include <cstring>

#include <fmt/format.h>

#include "engine/error.hpp"

namespace fs = std::filesystem;

namespace mf::train {

std::vector<nlohmann::json> read_jsonl(const fs::path& path) {
  std::vector<nlohmann::json> out;
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line)) {
    if (line.empty()) continue;
    try {
      out.push_back(nlohmann::json::parse(line));
    } catch (const nlohmann::json::exception&) {
      // A line torn by a crash: skip it.
    }
  }
  return out;
}

// Text from files is checked to be UTF-8 where it is read; should a string
// slip through, its bad bytes become U+FFFD rather than the run's outputs
// being lost to a serialisation error at the end.
static std::string dump_text(const nlohmann::json& j, int indent) {
  return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

JsonlWriter::JsonlWriter(const fs::path& path, std::int64_t resume_step) {
  std::error_code ec;
  if (resume_step >= 0 && fs::exists(path, ec)) {
    std::vector<nlohmann::json> keep;
    for (auto& j : read_jsonl(path))
      if (!j.contains("step") || j["step"].get<std::int64_t>() <= resume_step) keep.push_back(std::move(j));
    std::string text;
    for (const auto& j : keep) text += dump_text(j, -1) + '\n';
    write_text_atomic(path, text);
  }
  out_.open(path, std::ios::app);
  MF_CHECK(out_.is_open(), "cannot open {} for writing", path.string());
}

void JsonlWriter::write(const nlohmann::json& j) {
  if (!out_.is_open()) return;
  out_ << dump_text(j, -1) << '\n';
  out_.flush();
}

void write_json_atomic(const fs::path& path, const nlohmann::json& j) {
  write_text_atomic(path, dump_text(j, 2) + "\n");
}

}  // namespace mf::train
