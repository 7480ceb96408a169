// Decoding (libsndfile), the mono mix (numpy's mean over channels) and
// resampling (libsoxr), as librosa.load(path, sr=rate, mono=True) does with its
// defaults: soundfile reads float32, librosa.to_mono averages, librosa.resample
// calls soxr with quality 'soxr_hq' and fixes the length.
#include "audio/decode.hpp"

#include <fcntl.h>
#include <sndfile.h>
#include <soxr.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <mutex>
#include <string>
#include <system_error>

#include <fmt/format.h>

#include "engine/vec8.hpp"

namespace mf::audio {
namespace {

namespace fs = std::filesystem;

[[noreturn]] void fail(const fs::path& path, const std::string& why, const char* file, int line) {
  throw AudioError(fmt::format("audio file {}: {}", path.string(), why), detail::where(file, line));
}
#define MF_AUDIO_FAIL(path, ...) fail(path, fmt::format(__VA_ARGS__), __FILE__, __LINE__)

// Closes the handle on every path out of decode.
struct SndFile {
  SNDFILE* f = nullptr;
  ~SndFile() {
    if (f != nullptr) sf_close(f);
  }
};

// A regular file as libsndfile's virtual I/O sees it: its first kHeadBytes
// (the whole of a typical clip) read with one read() when opened, anything
// past them with pread() on demand. libsndfile's own file I/O reads a WAV
// header and data in ~16 reads and ~11 seeks (27 system calls for a one-second
// clip); this is open, fstat, one read, close. The head buffer is the calling
// thread's, reused from file to file.
class FileSource {
 public:
  static constexpr std::int64_t kHeadBytes = std::int64_t(1) << 20;

  // Opens path; false (errno set) when it cannot be opened or is not a
  // regular file (those go through sf_open, which reports them).
  bool open(const fs::path& path) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) return false;
    struct stat st {};
    if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) return false;
    size_ = std::int64_t(st.st_size);
    thread_local std::vector<char> head;
    head.resize(std::size_t(std::min(size_, kHeadBytes)));
    head_ = head.data();
    while (head_len_ < std::int64_t(head.size())) {  // one read unless interrupted or cut short
      const ssize_t got = ::read(fd_, head_ + head_len_, head.size() - std::size_t(head_len_));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) break;  // a read error or a file shrinking under us: libsndfile sees the bytes there are
      head_len_ += got;
    }
    return true;
  }
  ~FileSource() {
    if (fd_ >= 0) ::close(fd_);
  }
  std::int64_t size() const { return size_; }

  static SF_VIRTUAL_IO io() {
    SF_VIRTUAL_IO v{};
    v.get_filelen = [](void* self) -> sf_count_t { return static_cast<FileSource*>(self)->size_; };
    v.seek = [](sf_count_t offset, int whence, void* self) -> sf_count_t {
      auto& f = *static_cast<FileSource*>(self);
      const std::int64_t base = whence == SEEK_SET ? 0 : whence == SEEK_CUR ? f.pos_ : f.size_;
      // A damaged header can ask for any 64-bit offset: the sum saturates (a position past the
      // end reads nothing) instead of overflowing.
      std::int64_t to = 0;
      if (__builtin_add_overflow(base, std::int64_t(offset), &to))
        to = offset > 0 ? std::numeric_limits<std::int64_t>::max() : 0;
      f.pos_ = std::max<std::int64_t>(0, to);
      return f.pos_;
    };
    v.read = [](void* ptr, sf_count_t count, void* self) -> sf_count_t {
      return static_cast<FileSource*>(self)->read(static_cast<char*>(ptr), count);
    };
    v.write = [](const void*, sf_count_t, void*) -> sf_count_t { return 0; };
    v.tell = [](void* self) -> sf_count_t { return static_cast<FileSource*>(self)->pos_; };
    return v;
  }

 private:
  sf_count_t read(char* dst, sf_count_t count) {
    sf_count_t done = 0;
    if (count <= 0 || pos_ >= size_) return 0;  // nothing asked, or at/after the end (no pos_ + count overflow)
    if (pos_ < head_len_) {  // from the head
      done = std::min<sf_count_t>(count, head_len_ - pos_);
      std::memcpy(dst, head_ + pos_, std::size_t(done));
    }
    while (done < count) {  // past the head
      const ssize_t got = ::pread(fd_, dst + done, std::size_t(count - done), off_t(pos_ + done));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) break;
      done += got;
    }
    pos_ += done;
    return done;
  }

  int fd_ = -1;
  std::int64_t size_ = 0, pos_ = 0, head_len_ = 0;
  char* head_ = nullptr;
};

// Bytes per sample of the sample encodings whose size is fixed (0 otherwise).
int fixed_sample_bytes(int subtype) {
  switch (subtype) {
    case SF_FORMAT_PCM_S8:
    case SF_FORMAT_PCM_U8:
    case SF_FORMAT_ULAW:
    case SF_FORMAT_ALAW: return 1;
    case SF_FORMAT_PCM_16: return 2;
    case SF_FORMAT_PCM_24: return 3;
    case SF_FORMAT_PCM_32:
    case SF_FORMAT_FLOAT: return 4;
    case SF_FORMAT_DOUBLE: return 8;
    default: return 0;
  }
}

// "WAV PCM 16-bit", "FLAC PCM 24-bit", "OGG Vorbis"; libsndfile's own names
// for the formats this table does not list.
std::string format_description(int format) {
  const int major = format & SF_FORMAT_TYPEMASK, subtype = format & SF_FORMAT_SUBMASK;
  std::string major_name, subtype_name;
  switch (major) {
    case SF_FORMAT_WAV:
    case SF_FORMAT_WAVEX: major_name = "WAV"; break;
    case SF_FORMAT_RF64: major_name = "RF64"; break;
    case SF_FORMAT_W64: major_name = "W64"; break;
    case SF_FORMAT_AIFF: major_name = "AIFF"; break;
    case SF_FORMAT_FLAC: major_name = "FLAC"; break;
    case SF_FORMAT_OGG: major_name = "OGG"; break;
    default: {
      SF_FORMAT_INFO info{};
      info.format = major;
      major_name = sf_command(nullptr, SFC_GET_FORMAT_INFO, &info, sizeof info) == 0 ? info.name : "unknown";
    }
  }
  switch (subtype) {
    case SF_FORMAT_PCM_S8: subtype_name = "PCM 8-bit"; break;
    case SF_FORMAT_PCM_U8: subtype_name = "PCM 8-bit unsigned"; break;
    case SF_FORMAT_PCM_16: subtype_name = "PCM 16-bit"; break;
    case SF_FORMAT_PCM_24: subtype_name = "PCM 24-bit"; break;
    case SF_FORMAT_PCM_32: subtype_name = "PCM 32-bit"; break;
    case SF_FORMAT_FLOAT: subtype_name = "float 32-bit"; break;
    case SF_FORMAT_DOUBLE: subtype_name = "float 64-bit"; break;
    case SF_FORMAT_VORBIS: subtype_name = "Vorbis"; break;
    case SF_FORMAT_OPUS: subtype_name = "Opus"; break;
    default: {
      SF_FORMAT_INFO info{};
      info.format = subtype;
      subtype_name = sf_command(nullptr, SFC_GET_FORMAT_INFO, &info, sizeof info) == 0 ? info.name : "unknown";
    }
  }
  return major_name + " " + subtype_name;
}

// libsndfile reads a WAV whose data chunk runs past the end of the file (a
// copy cut short) as the frames present, silently, and so does soundfile
// (librosa.load returns the part). We refuse it: the data chunk's size as
// stored in the header (sf_get_chunk_size reports it unchanged) against the
// frames libsndfile found. A size of 0 or 0xFFFFFFFF is a streaming writer's
// "unknown" and is not checked; other containers rely on the read count below.
void check_wav_not_truncated(const fs::path& path, SNDFILE* f, const SF_INFO& info) {
  const int major = info.format & SF_FORMAT_TYPEMASK;
  const int bytes = fixed_sample_bytes(info.format & SF_FORMAT_SUBMASK);
  if ((major != SF_FORMAT_WAV && major != SF_FORMAT_WAVEX) || bytes == 0) return;
  SF_CHUNK_INFO want{};
  std::snprintf(want.id, sizeof want.id, "data");
  want.id_size = 4;
  SF_CHUNK_ITERATOR* it = sf_get_chunk_iterator(f, &want);
  if (it == nullptr) return;
  SF_CHUNK_INFO found{};
  if (sf_get_chunk_size(it, &found) != SF_ERR_NO_ERROR) return;
  if (found.datalen == 0 || found.datalen == 0xFFFFFFFFu) return;
  const std::int64_t declared = std::int64_t(found.datalen) / (std::int64_t(bytes) * info.channels);
  if (declared > info.frames)
    MF_AUDIO_FAIL(path, "truncated: its WAV header declares {} frames ({} data bytes), the file holds only {}",
                  declared, found.datalen, info.frames);
}

// numpy's float32 sum of one frame's channels (np.mean over the channel axis
// of soundfile's frames x channels array sums each frame's contiguous channels
// with pairwise_sum: a plain loop from 0 below 8 values, eight interleaved
// partial sums up to 128, halves above), so the mix is bit-equal to
// librosa.to_mono for any channel count.
float numpy_pairwise_sum(const float* a, std::int64_t n) {
  if (n < 8) {
    float res = 0.0f;
    for (std::int64_t i = 0; i < n; ++i) res += a[i];
    return res;
  }
  if (n <= 128) {
    float r[8];
    for (int j = 0; j < 8; ++j) r[j] = a[j];
    std::int64_t i = 8;
    for (; i < n - n % 8; i += 8)
      for (int j = 0; j < 8; ++j) r[j] += a[i + j];
    float res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; i < n; ++i) res += a[i];
    return res;
  }
  std::int64_t n2 = n / 2;
  n2 -= n2 % 8;
  return numpy_pairwise_sum(a, n2) + numpy_pairwise_sum(a + n2, n - n2);
}

// The largest sample magnitude accepted. Integer formats decode to [-1, 1] and
// float files normally hold the same, but some tools write float samples
// scaled to an integer range (up to 2^31); a float32 sample past 2^32 is not
// audio, and it makes the resampler's output (soxr rings past its input's
// peak) or the logmel op's float32 power spectrum (|X|^2, X a sum of n_fft
// samples under a window that sums to n_fft / 2) overflow to inf. Bounding it
// also bounds the mono mix, which finite samples near float32's range would
// overflow.
constexpr float kMaxAbsSample = 4294967296.0f;  // 2^32

// Reads `frames` frames in blocks, rejects non-finite samples and samples past
// kMaxAbsSample, and mixes each frame to mono. `frames` is what the header
// declares (a FLAC's STREAMINFO can say 2^36 - 1 frames in a file of a
// hundred bytes), so nothing is sized from it up front: the output grows by
// the frames actually read (reserved up to one per byte of the file, at least
// what any uncompressed format holds) and the read buffer holds at most
// kBlockSamples samples whatever the channel count.
// Whether every sample is finite and at most kMaxAbsSample in magnitude: one
// pass the compiler vectorizes (no early exit), the common case. On the
// magnitude's bits, which order like the values for non-negative floats, and
// Inf/NaN (exponent all ones) lie above every finite one.
MF_SIMD_CLONES bool all_samples_ok(const float* x, std::int64_t n) {
  std::uint32_t worst = 0;
  for (std::int64_t i = 0; i < n; ++i) worst = std::max(worst, std::bit_cast<std::uint32_t>(x[i]) & 0x7fffffffu);
  return worst <= std::bit_cast<std::uint32_t>(kMaxAbsSample);
}

// The first bad sample of a block that all_samples_ok refused, as an error
// naming its frame (first_frame + i) and channel.
[[noreturn]] void find_bad_sample(const fs::path& path, const float* buf, std::int64_t frames, int channels,
                                  std::int64_t first_frame) {
  for (std::int64_t i = 0; i < frames; ++i) {
    const float* frame = buf + i * channels;
    for (int c = 0; c < channels; ++c) {
      if (std::abs(frame[c]) <= kMaxAbsSample) continue;
      if (!std::isfinite(frame[c]))
        MF_AUDIO_FAIL(path, "a non-finite sample ({}) at frame {}, channel {}", frame[c], first_frame + i, c);
      MF_AUDIO_FAIL(path,
                    "a sample of {} at frame {}, channel {}: expected audio, at most 2^32 in magnitude (larger "
                    "values overflow float32 in resampling and in the power spectrum)",
                    frame[c], first_frame + i, c);
    }
  }
  MF_THROW("audio file {}: a block was refused but no bad sample found in it", path.string());
}

// file_bytes: the file's size, or -1 when unknown. A mono file is read
// straight into the output; several channels through a block buffer kept
// per thread.
std::vector<float> read_mono(const fs::path& path, SNDFILE* f, const SF_INFO& info, std::int64_t frames,
                             std::int64_t file_bytes) {
  constexpr std::int64_t kBlockSamples = 1 << 16;
  const int channels = info.channels;
  const std::int64_t block = std::max<std::int64_t>(1, kBlockSamples / channels);
  std::vector<float> out;
  out.reserve(std::size_t(std::min(frames, file_bytes < 0 ? block : file_bytes)));
  thread_local std::vector<float> block_buffer;
  if (channels > 1) block_buffer.resize(std::size_t(std::min(frames, block)) * std::size_t(channels));
  for (std::int64_t start = 0; start < frames; start += block) {
    const std::int64_t want = std::min(block, frames - start);
    out.resize(std::size_t(start + want));
    float* const buf = channels == 1 ? out.data() + start : block_buffer.data();
    const sf_count_t got = sf_readf_float(f, buf, want);
    if (got != want)
      MF_AUDIO_FAIL(path, "truncated or unreadable: read {} of the {} frames its header declares ({})",
                    start + std::max<sf_count_t>(got, 0), info.frames, sf_strerror(f));
    if (!all_samples_ok(buf, want * channels)) find_bad_sample(path, buf, want, channels, start);
    if (channels == 1) continue;
    for (std::int64_t i = 0; i < want; ++i)
      out[std::size_t(start + i)] = numpy_pairwise_sum(buf + i * channels, channels) / float(channels);
  }
  return out;
}

// decode_mono with the prefix chosen once the file's rate is known:
// max_frames_for(native_rate) >= 0 reads at most that many frames.
template <class MaxFrames>
MonoAudio decode(const fs::path& path, MaxFrames max_frames_for) {
  SF_INFO info{};
  FileSource source;  // outlives the SNDFILE reading through it (destroyed after `file`)
  SndFile file;
  const bool regular = source.open(path);
  {
    // libsndfile keeps the reason an open failed in one process-wide slot
    // (sf_error(NULL)): opens are serialized so that each failure reads its own.
    static std::mutex open_mutex;
    const std::lock_guard<std::mutex> lock(open_mutex);
    if (regular) {
      SF_VIRTUAL_IO io = FileSource::io();
      file.f = sf_open_virtual(&io, SFM_READ, &info, &source);
    } else {  // missing, unreadable or not a regular file: libsndfile's own open says why
      file.f = sf_open(path.c_str(), SFM_READ, &info);
    }
    if (file.f == nullptr) {
      if (sf_error(nullptr) == SF_ERR_UNRECOGNISED_FORMAT)
        MF_AUDIO_FAIL(path, "not an audio format libsndfile reads ({})", sf_strerror(nullptr));
      MF_AUDIO_FAIL(path, "cannot open: {}", sf_strerror(nullptr));
    }
  }
  if (info.channels < 1 || info.samplerate < 1)
    MF_AUDIO_FAIL(path, "expected at least 1 channel and a positive sample rate, found {} channels at {} Hz",
                  info.channels, info.samplerate);
  if (info.frames <= 0 || info.frames == SF_COUNT_MAX)
    MF_AUDIO_FAIL(path, "no samples: expected at least 1 frame, found {}",
                  info.frames == SF_COUNT_MAX ? std::string("an unknown length") : std::to_string(info.frames));
  check_wav_not_truncated(path, file.f, info);

  const std::int64_t limit = max_frames_for(std::int64_t(info.samplerate));
  const std::int64_t frames = limit >= 0 ? std::min<std::int64_t>(limit, info.frames) : info.frames;
  MonoAudio a;
  a.samples = read_mono(path, file.f, info, frames, regular ? source.size() : -1);
  a.sample_rate = info.samplerate;
  a.channels = info.channels;
  a.file_frames = info.frames;
  a.format = format_description(info.format);
  return a;
}

}  // namespace

MonoAudio decode_mono(const std::filesystem::path& path, std::int64_t max_frames) {
  return decode(path, [&](std::int64_t) { return max_frames; });
}

// One soxr_oneshot call over the whole signal, float32 in and out, quality
// SOXR_HQ with no flags: python-soxr's resample(x, from, to, 'HQ') makes the
// same resampler (soxr_quality_spec(HQ, 0), default runtime) and feeds it in
// chunks, which gives the same samples (checked against it in
// test_audio_decode). soxr emits about round(n * to / from) samples;
// librosa.resample then fixes the length to ceil(n * (to / from)) (that
// expression, in double), padding with zeros, so the samples past soxr's
// output stay 0 here.
std::vector<float> resample(std::span<const float> x, double from_rate, double to_rate) {
  MF_CHECK(std::isfinite(from_rate) && std::isfinite(to_rate) && from_rate > 0 && to_rate > 0,
           "resample: expected positive sample rates, found {} Hz -> {} Hz", from_rate, to_rate);
  if (from_rate == to_rate) return {x.begin(), x.end()};
  const double out_len = std::ceil(double(x.size()) * (to_rate / from_rate));
  std::vector<float> y(std::size_t(out_len), 0.0f);
  if (x.empty() || y.empty()) return y;
  const soxr_io_spec_t io = soxr_io_spec(SOXR_FLOAT32_I, SOXR_FLOAT32_I);
  const soxr_quality_spec_t quality = soxr_quality_spec(SOXR_HQ, 0);
  std::size_t done = 0;
  const soxr_error_t err = soxr_oneshot(from_rate, to_rate, 1, x.data(), x.size(), nullptr, y.data(), y.size(),
                                        &done, &io, &quality, nullptr);
  MF_CHECK(err == nullptr, "resample {} Hz -> {} Hz of {} samples: libsoxr failed: {}", from_rate, to_rate,
           x.size(), err);
  return y;
}

// With rates equal and a limit, only that prefix is read. When resampling, the
// whole file is read: every output sample of soxr depends on input well past
// it (the filter's delay), and the samples must equal whole-file resampling
// as librosa.load produces them.
MonoAudio decode_mono_for(const std::filesystem::path& path, std::int64_t rate, std::int64_t max_frames_at_rate) {
  return decode(path, [&](std::int64_t native) { return native == rate ? max_frames_at_rate : -1; });
}

MonoAudio load_mono(const std::filesystem::path& path, std::int64_t rate, std::int64_t max_frames_at_rate) {
  MF_CHECK(rate > 0, "load_mono: expected a positive sample rate, found {}", rate);
  MonoAudio a = decode_mono_for(path, rate, max_frames_at_rate);
  if (a.sample_rate != rate) {
    a.samples = resample(a.samples, double(a.sample_rate), double(rate));
    a.sample_rate = rate;
  }
  return a;
}

}  // namespace mf::audio
