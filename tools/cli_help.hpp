// What `melforge SUBCOMMAND --help` shows for an option: a type that says what
// to write (INT, FLOAT, PATH, DIR, NAME, {a,b,c} for a fixed set of words) and
// the default, as `--option TYPE=DEFAULT`. No option shows CLI11's bare TEXT
// (tests/tools/test_cli.cpp checks every subcommand).
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

namespace mf::cli {

// The words engine/device.hpp's parse_device accepts (N: a GPU index).
inline constexpr const char* kDeviceType = "{auto,cpu,cuda,cuda:N}";

// "{a,b,c}": the type shown for an option that takes one of `words`.
inline std::string one_of_type(const std::vector<std::string>& words) {
  std::string s = "{";
  for (std::size_t i = 0; i < words.size(); ++i) s += (i ? "," : "") + words[i];
  return s + "}";
}

// An option that takes one of `words`, checked by CLI11 while parsing; the
// help shows the words once, as the type (not also as the check's TEXT:{...}).
inline CLI::Option* checked_one_of(CLI::Option* opt, const std::vector<std::string>& words) {
  return opt->type_name(one_of_type(words))->check(CLI::IsMember(words).description(""));
}

// The audio input options of predict and embed: --audio (instead of --data,
// which `cmd` must already have), --set frontend.*, --pad, --threads; `rows`
// says how the command names its output rows for audio input.
inline void add_audio_input_options(CLI::App* cmd, std::vector<std::string>& audio, std::vector<std::string>& sets,
                                    bool& pad, int& threads, const std::string& rows) {
  auto* audio_opt = cmd->add_option("--audio", audio,
                                    "Audio files or folders (instead of --data): features as the checkpoint's "
                                    "training data was built; " + rows)
                        ->type_name("FILE_OR_DIR")  // CLI11 adds " ..." for a list
                        ->excludes(cmd->get_option("--data"));
  cmd->add_option("--set", sets, "With --audio: frontend.KEY=VALUE (for checkpoints that do not record them)")
      ->type_name("KEY=VALUE")
      ->needs(audio_opt);
  cmd->add_flag("--pad", pad, "With --audio: pad files too short for the model's segments with silence")
      ->needs(audio_opt);
  cmd->add_option("--threads", threads, "With --audio: decode threads (0: one per core)")->capture_default_str();
}

}  // namespace mf::cli
