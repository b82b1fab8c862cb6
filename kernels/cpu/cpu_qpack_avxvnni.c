/* kernels/cpu/cpu_qpack_avxvnni.c — the AVX2 packed products with AVX-VNNI's vpdpbusd (the VEX form: CPUs with
 * AVX-VNNI but no AVX-512, as Intel's Alder Lake): one instruction a 4-product step where AVX2 takes three. The
 * source is cpu_qpack_avx2.c's; no machine here has AVX-VNNI, so its EVEX twin (cpu_qpack_vnni256_avx512vnni.c, the
 * same source and instruction) is what the tests run. */
#define QP_VNNI 1
#define QP_DPBUSD _mm256_dpbusd_avx_epi32
#define QP_NAME cpu_qpack_kernel_avxvnni
#include "kernels/cpu/cpu_qpack_avx2.c"
