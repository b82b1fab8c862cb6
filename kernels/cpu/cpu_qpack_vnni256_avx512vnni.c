/* kernels/cpu/cpu_qpack_vnni256_avx512vnni.c — cpu_qpack_avx2.c's kernels with the EVEX 256-bit vpdpbusd of AVX-512 VNNI:
 * the AVX-VNNI kernels (cpu_qpack_avxvnni.c) instruction for instruction, on the CPUs this project's tests run
 * on. The backend uses it only when asked (AAH_CPU_QPACK=vnni256): those CPUs have the 512-bit kernels. */
#define QP_VNNI 1
#define QP_DPBUSD _mm256_dpbusd_epi32
#define QP_NAME cpu_qpack_kernel_vnni256
#include "kernels/cpu/cpu_qpack_avx2.c"
