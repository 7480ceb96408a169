// placeholder: the helper building kernels/attentive_pool replaces this file (dispatch: kernels/ops.hpp)
