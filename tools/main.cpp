// melforge: train small CNNs on mel-spectrogram HDF5 datasets.
#include <cstdio>
#include <exception>

#include "dist/world.hpp"
#include "engine/error.hpp"
#include "engine/log.hpp"
#include "tools/commands.hpp"
#include "tools/version_report.hpp"

int main(int argc, char** argv) {
  CLI::App app{"melforge: trains small convolutional networks on mel-spectrogram HDF5 datasets\n"
               "with hand-written CUDA kernels (or the CPU when no GPU is present)."};
  app.require_subcommand(1);
  app.fallthrough();
  // Computed only when asked: it loads and queries libraries (tools/version_report.hpp).
  app.set_version_flag("--version", [] { return mf::cli::version_report(); },
                       "Print the version, the build and the libraries found at run time, then exit");
  // Room for `--option TYPE=DEFAULT` before the description (subcommands share this formatter).
  app.get_formatter()->column_width(36);
  mf::cli::register_info(app);
  mf::cli::register_smoke(app);
  mf::cli::register_data(app);
  mf::cli::register_trainer(app);
  mf::cli::register_export(app);
  mf::cli::register_verification(app);
  bool verbose = false;
  app.add_flag("--verbose", verbose,
               "Errors also name the source line that raised them (so do MELFORGE_LOG=debug and debug builds)");
  try {
    // Started by mpirun/srun as one of several processes: join the job first
    // (dist/world.hpp); otherwise this does nothing.
    mf::dist::World::get();
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    if (code != 0) mf::dist::end_job_after_error(code);
    return code;
  } catch (const mf::Error& e) {
    // A user's message names files, keys and values; where in melforge it was
    // raised is for whoever debugs melforge.
#ifdef NDEBUG
    const bool where = verbose || mf::log_level() <= mf::LogLevel::debug;
#else
    const bool where = true;
#endif
    const std::string suffix = where ? " [" + e.where() + "]" : "";
    std::fprintf(stderr, "melforge: error: %s%s\n", e.message().c_str(), suffix.c_str());
    std::fflush(stderr);
    mf::dist::end_job_after_error(1);  // a job's other processes must not wait for this one
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "melforge: error: %s\n", e.what());
    std::fflush(stderr);
    mf::dist::end_job_after_error(1);
    return 1;
  }
  return 0;
}
