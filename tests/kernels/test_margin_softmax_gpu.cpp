// placeholder: replaced by the kernels/margin_softmax GPU suite
#include <doctest/doctest.h>
TEST_CASE("margin_softmax gpu: placeholder") { CHECK(1 + 1 == 2); }
