// placeholder: the helper building kernels/angleproto replaces this file
#pragma once
