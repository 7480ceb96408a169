// placeholder: replaced by the kernels/instance_norm GPU suite
#include <doctest/doctest.h>
TEST_CASE("instance_norm gpu: placeholder") { CHECK(1 + 1 == 2); }
