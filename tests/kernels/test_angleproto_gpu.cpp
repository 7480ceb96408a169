// placeholder: replaced by the kernels/angleproto GPU suite
#include <doctest/doctest.h>
TEST_CASE("angleproto gpu: placeholder") { CHECK(1 + 1 == 2); }
