/* kernels/cpu/cpu_quant_avx512vnni.c — the AVX-512 VNNI quantized dots (cpu_quant_simd.h): the 256-bit forms of
 * vpdpbusd / vpdpwssd (AVX-512 VL + VNNI), used only when the CPU has VNNI (cpu_qkernels_for). */
#define QSIMD_VNNI 1
#define QSIMD_TABLE cpu_qkernels_avx512
#define QSIMD_ISA "avx512"
#include "kernels/cpu/cpu_quant_simd.h"
