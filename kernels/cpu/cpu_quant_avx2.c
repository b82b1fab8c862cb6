/* kernels/cpu/cpu_quant_avx2.c — the AVX2 quantized dots (cpu_quant_simd.h): compiled with AVX2/FMA/F16C flags and
 * used only when the CPU has them. */
#define QSIMD_TABLE cpu_qkernels_avx2
#define QSIMD_ISA "avx2"
#include "kernels/cpu/cpu_quant_simd.h"
