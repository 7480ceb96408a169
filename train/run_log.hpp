// The run directory's logs: metrics.jsonl (one JSON object per line: a line
// per log interval, type "train", and per evaluation, type "eval"), and JSON
// files written atomically (report.json).
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/atomic_file.hpp"

namespace mf::train {

class JsonlWriter {
 public:
  JsonlWriter() = default;
  // Appends to `path` (created when missing). With resume_step >= 0, lines
  // logged after that step by an interrupted run are dropped first, so a
  // resumed run's log reads as one uninterrupted run.
  explicit JsonlWriter(const std::filesystem::path& path, std::int64_t resume_step = -1);
  void write(const nlohmann::json& j);  // one line, flushed
  bool is_open() const { return out_.is_open(); }

 private:
  std::ofstream out_;
};

// Every parsable line of a JSONL file (a torn last line is skipped).
std::vector<nlohmann::json> read_jsonl(const std::filesystem::path& path);

// Atomic text files: engine/atomic_file.hpp.
using ::mf::write_text_atomic;

// Pretty JSON through write_text_atomic.
void write_json_atomic(const std::filesystem::path& path, const nlohmann::json& j);

}  // namespace mf::train
