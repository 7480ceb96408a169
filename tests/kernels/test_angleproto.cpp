// placeholder: replaced by the kernels/angleproto suite
#include <doctest/doctest.h>
TEST_CASE("angleproto: placeholder") { CHECK(1 + 1 == 2); }
