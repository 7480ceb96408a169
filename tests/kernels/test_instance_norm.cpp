// placeholder: replaced by the kernels/instance_norm suite
#include <doctest/doctest.h>
TEST_CASE("instance_norm: placeholder") { CHECK(1 + 1 == 2); }
