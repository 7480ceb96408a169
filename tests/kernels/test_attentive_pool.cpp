// placeholder: replaced by the kernels/attentive_pool suite
#include <doctest/doctest.h>
TEST_CASE("attentive_pool: placeholder") { CHECK(1 + 1 == 2); }
