// Atomic file replacement, the one mechanism behind every file melforge must
// never leave half-written (checkpoints, safetensors, config.toml, report.json,
// predictions): the content goes to a temporary file in the same folder, which
// is fsynced, renamed over the target, and the folder is fsynced. A crash leaves
// the old file or the new one, complete; on an error the temporary is removed
// and the exception names the file and the system's reason.
#pragma once

#include <filesystem>
#include <functional>
#include <string_view>

namespace mf {

// `write_tmp` writes the whole content to the path it is given (and closes it);
// it reports its own failures by throwing.
void write_file_atomic(const std::filesystem::path& path,
                       const std::function<void(const std::filesystem::path& tmp)>& write_tmp);

void write_text_atomic(const std::filesystem::path& path, std::string_view text);

// Test seam: while on, the process kills itself (SIGKILL) after the temporary
// is complete and synced, before the rename: what a crash there leaves behind
// is then observable (tests/model/test_checkpoint.cpp). Off by default; only
// tests turn it on.
void set_crash_before_rename_for_testing(bool on);

}  // namespace mf
