// Dumps what melforge computes for whole-utterance crops, for
// bench/check_crop_rule.py to compare with bench/crop_rule.py (the Python port):
//   dump_crops grid                      : "seed epoch utt len crop start" lines of io::random_crop_start
//                                          and "eval k K len crop start" lines of io::eval_crop_start
//   dump_crops reader FILE.h5 N SEED EPOCHS OUT.bin : the training reader's crops (io::BatchReader,
//                                          random_crops, batch 8): per real row int64 epoch, int64
//                                          utterance, then mels*N float32 ([mels, N])
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "io/crops.hpp"
#include "io/dataset.hpp"
#include "io/reader.hpp"

using namespace mf;

int main(int argc, char** argv) {
  if (argc >= 2 && std::string(argv[1]) == "grid") {
    const std::uint64_t seeds[] = {0, 1, 2, 7, 42, 0xffffffffffffffffull, 0x8000000000000000ull, 123456789012345ull};
    const std::int64_t lens[] = {1, 150, 199, 200, 201, 257, 450, 800, 100000, 5000000000ll, 9000000000000ll};
    const std::int64_t crops[] = {1, 200, 37};
    for (auto s : seeds)
      for (std::int64_t e : {0, 1, 5, 99})
        for (std::int64_t u : {0, 3, 191, 1000003})
          for (auto L : lens)
            for (auto N : crops)
              std::printf("rand %llu %lld %lld %lld %lld %lld\n", (unsigned long long)s, (long long)e, (long long)u,
                          (long long)L, (long long)N, (long long)io::random_crop_start(s, e, u, L, N));
    for (std::int64_t K : {1, 2, 5, 10})
      for (std::int64_t k = 0; k < K; ++k)
        for (auto L : lens)
          for (auto N : crops)
            std::printf("eval %lld %lld %lld %lld %lld\n", (long long)k, (long long)K, (long long)L, (long long)N,
                        (long long)io::eval_crop_start(k, K, L, N));
    return 0;
  }
  if (argc == 7 && std::string(argv[1]) == "reader") {
    io::DatasetNames names;
    names.crop_frames = std::atoll(argv[3]);
    const auto ds = io::Dataset::open(argv[2], names);
    io::ReaderConfig rc;
    rc.batch_size = 8;
    rc.seed = std::strtoull(argv[4], nullptr, 10);
    rc.threads = 1;
    rc.random_crops = true;
    rc.last_batch = io::LastBatch::pad;
    io::BatchReader reader(ds, rc);
    const std::int64_t epochs = std::atoll(argv[5]);
    std::FILE* out = std::fopen(argv[6], "wb");
    std::int64_t rows = 0;
    for (std::int64_t b = 0; b < epochs * reader.batches_per_epoch(); ++b) {
      const io::Batch batch = reader.next();
      const std::vector<float> x = batch.x.to_floats();
      const auto idx = batch.index.to_floats();
      const std::size_t per = x.size() / std::size_t(rc.batch_size);
      for (std::int64_t r = 0; r < batch.valid; ++r) {
        const std::int64_t meta[2] = {batch.epoch, std::int64_t(idx[std::size_t(r)])};
        std::fwrite(meta, sizeof meta, 1, out);
        std::fwrite(x.data() + std::size_t(r) * per, sizeof(float), per, out);
        ++rows;
      }
    }
    std::fclose(out);
    std::printf("%lld rows, %lld floats each\n", (long long)rows, (long long)(ds->info().num_segments ? 0 : 0));
    return 0;
  }
  std::fprintf(stderr, "usage: dump_crops grid | reader FILE.h5 N SEED EPOCHS OUT.bin\n");
  return 2;
}
