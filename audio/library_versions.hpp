// The versions of the libraries the audio front-end links, as the copies
// loaded at run time report them (for `melforge --version`). Never throw.
#pragma once

#include <string>

namespace mf::audio {

std::string sndfile_version();  // libsndfile's sf_version_string(), e.g. "libsndfile-1.2.0"
std::string fftw_version();     // single-precision FFTW's fftwf_version, e.g. "fftw-3.3.10-sse2-avx"
std::string soxr_version();     // libsoxr's soxr_version(), e.g. "libsoxr-0.1.3"

}  // namespace mf::audio
