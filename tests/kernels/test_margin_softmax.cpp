// placeholder: replaced by the kernels/margin_softmax suite
#include <doctest/doctest.h>
TEST_CASE("margin_softmax: placeholder") { CHECK(1 + 1 == 2); }
