// placeholder: replaced by the kernels/batch_norm GPU suite
#include <doctest/doctest.h>
TEST_CASE("batch_norm gpu: placeholder") { CHECK(1 + 1 == 2); }
