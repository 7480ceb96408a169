// placeholder: replaced by the kernels/batch_norm suite
#include <doctest/doctest.h>
TEST_CASE("batch_norm: placeholder") { CHECK(1 + 1 == 2); }
