#include "tools/run_log.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "engine/error.hpp"

namespace fs = std::filesystem;

namespace mf::tools {

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

JsonlWriter::JsonlWriter(const fs::path& path, std::int64_t resume_step) {
  std::error_code ec;
  if (resume_step >= 0 && fs::exists(path, ec)) {
    std::vector<nlohmann::json> keep;
    for (auto& j : read_jsonl(path))
      if (!j.contains("step") || j["step"].get<std::int64_t>() <= resume_step) keep.push_back(std::move(j));
    const fs::path tmp = path.parent_path() / fmt::format(".tmp-{}.{}", path.filename().string(), ::getpid());
    {
      std::ofstream o(tmp, std::ios::trunc);
      for (const auto& j : keep) o << j.dump() << '\n';
    }
    fs::rename(tmp, path, ec);
    MF_CHECK(!ec, "rewriting {}: {}", path.string(), ec.message());
  }
  out_.open(path, std::ios::app);
  MF_CHECK(out_.is_open(), "cannot open {} for writing", path.string());
}

void JsonlWriter::write(const nlohmann::json& j) {
  if (!out_.is_open()) return;
  out_ << j.dump() << '\n';
  out_.flush();
}

void write_text_atomic(const fs::path& path, const std::string& text) {
  const fs::path dir = path.parent_path().empty() ? fs::path(".") : path.parent_path();
  const fs::path tmp = dir / fmt::format(".tmp-{}.{}", path.filename().string(), ::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  MF_CHECK(fd >= 0, "cannot create {}: {}", tmp.string(), std::strerror(errno));
  std::size_t done = 0;
  int err = 0;
  while (done < text.size()) {
    const ssize_t w = ::write(fd, text.data() + done, text.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      err = w < 0 ? errno : EIO;
      break;
    }
    done += std::size_t(w);
  }
  if (!err && ::fsync(fd) != 0) err = errno;
  if (::close(fd) != 0 && !err) err = errno;
  std::error_code ec;
  if (err) {
    fs::remove(tmp, ec);
    MF_THROW("writing {} ({} of {} bytes written): {}", tmp.string(), done, text.size(), std::strerror(err));
  }
  fs::rename(tmp, path, ec);
  if (ec) {
    std::error_code rm;
    fs::remove(tmp, rm);
    MF_THROW("renaming {} to {}: {}", tmp.string(), path.string(), ec.message());
  }
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {  // the rename itself is durable once the folder is synced
    ::fsync(dfd);
    ::close(dfd);
  }
}

void write_json_atomic(const fs::path& path, const nlohmann::json& j) { write_text_atomic(path, j.dump(2) + "\n"); }

}  // namespace mf::tools
