// melforge-bench: kernel and pipeline microbenchmarks, each validated against
// its reference before it is timed, printed beside the measured roofline.
#include <fmt/format.h>

#include <exception>

#include "bench/suites.hpp"
#include "dist/world.hpp"
#include "engine/device.hpp"
#include "engine/error.hpp"

namespace mf::bench {
Common& common() {
  static Common c;
  return c;
}
}  // namespace mf::bench

int main(int argc, char** argv) {
  CLI::App app{"melforge-bench: microbenchmarks of melforge's kernels and input pipeline"};
  app.require_subcommand(1);
  app.fallthrough();
  app.add_option("--out-dir", mf::bench::common().out_dir, "Where JSON results go")->capture_default_str();
  app.add_flag("--no-write", mf::bench::common().no_write, "Print only; write no JSON");
  mf::bench::register_ceilings(app);
  mf::bench::register_step(app);
  mf::bench::register_conv(app);
  mf::bench::register_reader(app);
  mf::bench::register_crops(app);
  mf::bench::register_verify(app);
  mf::bench::register_logmel(app);
  mf::bench::register_allreduce(app);
  try {
    mf::dist::World::get();  // started by mpirun as one of several processes: join the job
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    fmt::print(stderr, "melforge-bench: error: {}\n", e.what());
    mf::dist::end_job_after_error(1);
    return 1;
  }
  return 0;
}
