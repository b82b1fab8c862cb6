/* kernels/cpu/cpu_peak.c — which peak loops this CPU may run (CPUID, and for AMX and AVX-512 BF16 cpu_features.c's
 * answers), their names and counts, and the timing of one on every thread at once. Portable C: it runs anywhere. */
#include <time.h>

#include "kernels/cpu/cpu_amx.h"
#include "kernels/cpu/cpu_bf16dot.h"
#include "kernels/cpu/cpu_peak.h"

#define MAX_WORKERS 256

cpu_peak_fn cpu_peak_loop(aah_cpu_product p)
{
#if defined(__x86_64__)
	__builtin_cpu_init();
	const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"),
	           avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
	                    __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
	                    __builtin_cpu_supports("fma");
	switch (p) {
	case AAH_CPU_PRODUCT_FMA_YMM: return avx2 ? cpu_peak_fma_ymm : NULL;
	case AAH_CPU_PRODUCT_FMA_ZMM: return avx512 ? cpu_peak_fma_zmm : NULL;
	case AAH_CPU_PRODUCT_DPBUSD_YMM:   /* the VEX form where the CPU has it, else AVX-512 VNNI's: the same work */
		return avx2 && __builtin_cpu_supports("avxvnni")          ? cpu_peak_dpbusd_ymm_vex
		       : avx512 && __builtin_cpu_supports("avx512vnni") ? cpu_peak_dpbusd_ymm_evex
		                                                          : NULL;
	case AAH_CPU_PRODUCT_DPBUSD_ZMM: return avx512 && __builtin_cpu_supports("avx512vnni") ? cpu_peak_dpbusd_zmm : NULL;
	case AAH_CPU_PRODUCT_DPBF16_ZMM: return cpu_bf16dot_available() ? cpu_peak_dpbf16_zmm : NULL;
	/* the AMX file is compiled with AVX-512 VNNI too (Makefile), which every AMX CPU has */
	case AAH_CPU_PRODUCT_AMX_INT8: return avx512 && cpu_amx_available() ? cpu_peak_amx_int8 : NULL;
	case AAH_CPU_PRODUCT_AMX_BF16: return avx512 && cpu_amx_bf16_available() ? cpu_peak_amx_bf16 : NULL;
	default: return NULL;
	}
#else
	(void)p;
	return NULL;
#endif
}

double cpu_peak_macs_per_iter(aah_cpu_product p)
{
	switch (p) {
	case AAH_CPU_PRODUCT_FMA_YMM: return CPU_PEAK_ACC * 8.0;
	case AAH_CPU_PRODUCT_FMA_ZMM: return CPU_PEAK_ACC * 16.0;
	case AAH_CPU_PRODUCT_DPBUSD_YMM: return CPU_PEAK_ACC * 8.0 * 4;
	case AAH_CPU_PRODUCT_DPBUSD_ZMM: return CPU_PEAK_ACC * 16.0 * 4;
	case AAH_CPU_PRODUCT_DPBF16_ZMM: return CPU_PEAK_ACC * 16.0 * 2;
	case AAH_CPU_PRODUCT_AMX_INT8: return 4 * 16.0 * 16 * 64;   /* 4 tile products of 16 × 16 × 64 */
	case AAH_CPU_PRODUCT_AMX_BF16: return 4 * 16.0 * 16 * 32;
	default: return 0;
	}
}

const char *cpu_peak_name(aah_cpu_product p)
{
	switch (p) {
	case AAH_CPU_PRODUCT_FMA_YMM: return "vfmadd231ps ymm";
	case AAH_CPU_PRODUCT_FMA_ZMM: return "vfmadd231ps zmm";
	case AAH_CPU_PRODUCT_DPBUSD_YMM: return "vpdpbusd ymm";
	case AAH_CPU_PRODUCT_DPBUSD_ZMM: return "vpdpbusd zmm";
	case AAH_CPU_PRODUCT_DPBF16_ZMM: return "vdpbf16ps zmm";
	case AAH_CPU_PRODUCT_AMX_INT8: return "AMX tdpbusd";
	case AAH_CPU_PRODUCT_AMX_BF16: return "AMX tdpbf16ps";
	default: return "no peak loop";
	}
}

const char *cpu_peak_unit(aah_cpu_product p)
{
	return p == AAH_CPU_PRODUCT_DPBUSD_YMM || p == AAH_CPU_PRODUCT_DPBUSD_ZMM || p == AAH_CPU_PRODUCT_AMX_INT8 ? "OP/s"
	                                                                                                         : "FLOP/s";
}

typedef struct peak_job {
	cpu_peak_fn fn;
	int64_t iters;
	double sink[MAX_WORKERS];   /* each worker's sum, kept so the call is not discarded */
} peak_job;

static void peak_worker(void *p, int32_t i, int32_t n)
{
	peak_job *j = p;
	j->sink[i % MAX_WORKERS] = j->fn(j->iters, 1);
}

static double mono_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double peak_run(threadpool *tp, peak_job *j)
{
	const double t0 = mono_s();
	threadpool_run(tp, peak_worker, j);
	return mono_s() - t0;
}

double cpu_peak_measure(aah_cpu_product p, threadpool *tp)
{
	peak_job j = { cpu_peak_loop(p), 256, { 0 } };
	if (!j.fn)
		return 0;
	/* long enough that waking the workers and the first pass's frequency change are noise: 20 ms a run */
	double dt = peak_run(tp, &j);
	while (dt < 0.02 && j.iters < ((int64_t)1 << 40)) {
		j.iters *= dt < 0.002 ? 8 : 2;
		dt = peak_run(tp, &j);
	}
	double best = dt;
	for (int r = 0; r < 5; r++) {
		dt = peak_run(tp, &j);
		best = dt < best ? dt : best;
	}
	return 2.0 * cpu_peak_macs_per_iter(p) * (double)j.iters * threadpool_size(tp) / best;
}
