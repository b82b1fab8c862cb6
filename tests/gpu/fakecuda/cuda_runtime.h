/* tests/gpu/fakecuda/cuda_runtime.h — stands in for the CUDA toolkit's header in the CPU emulation (see fakecuda.h). */
#include "fakecuda.h"
