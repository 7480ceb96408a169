// placeholder: replaced by the kernels/attentive_pool GPU suite
#include <doctest/doctest.h>
TEST_CASE("attentive_pool gpu: placeholder") { CHECK(1 + 1 == 2); }
