// The audio files a dataset is built from, with their labels: one sub-folder
// per class (ROOT/<class>/**/*.wav; class names are the folder names, sorted)
// or a labels CSV (path,label[,leak], paths relative to ROOT).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace mf::audio {

struct SourceFile {
  std::string path;         // relative to the root, '/'-separated: what /files holds
  std::int64_t label = 0;   // index into class_names
  int leak = -1;            // 0/1 from a labels CSV's leak column; -1: none
};

struct SourceList {
  std::vector<SourceFile> files;        // sorted by path
  std::vector<std::string> class_names;
  bool has_leak = false;                // every file has a leak value (the CSV had the column)
  std::vector<std::string> ignored;     // files passed over: not an audio extension, or outside a class folder
};

// Extensions read as audio (case-insensitive): wav wave flac ogg oga opus aif
// aiff aifc au snd caf w64 rf64 mp3. Anything else is listed as ignored.
bool has_audio_extension(const std::filesystem::path& p);

// ROOT/<class>/...: every audio file below each top-level folder (recursively,
// symbolic links followed, hidden names skipped). Throws when ROOT is not a
// folder or holds no class folder with audio.
SourceList find_sources_by_folder(const std::filesystem::path& root);

// A CSV of path,label[,leak] rows (a first row "path,label[,leak]" is a
// header). Labels are class names (any text); class_names are the distinct
// labels sorted (numerically when all are integers). Throws naming the line
// for a missing column, a duplicate path, or a leak value other than 0/1.
// Files are not opened here (a missing one is reported when it is decoded).
SourceList read_sources_csv(const std::filesystem::path& csv);

}  // namespace mf::audio
