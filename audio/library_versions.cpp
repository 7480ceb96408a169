#include "audio/library_versions.hpp"

#include <fftw3.h>
#include <sndfile.h>
#include <soxr.h>

namespace mf::audio {

std::string sndfile_version() { return sf_version_string(); }
std::string fftw_version() { return fftwf_version; }
std::string soxr_version() { return ::soxr_version(); }

}  // namespace mf::audio
