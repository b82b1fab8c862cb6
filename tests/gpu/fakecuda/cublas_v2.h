/* tests/gpu/fakecuda/cublas_v2.h — stands in for the CUDA toolkit's header in the CPU emulation (see fakecuda.h). */
#include "fakecuda.h"
