/* kernels/cpu/cpu_peak.h — this CPU's dot-product peaks: for each instruction the CPU backend's products may use
 * (aah_cpu_product, kernels/backend.h), a register-only loop timed on every thread at once, in operations per second.
 *
 * An operation is half a multiply-add (a multiply-add counts 2, as FLOP/s and TOP/s are counted): vfmadd231ps zmm is 16
 * multiply-adds, vpdpbusd zmm 64 (16 lanes × 4 u8·s8 products), vdpbf16ps zmm 32 (16 lanes × 2 bf16 products), AMX's
 * tdpbusd on full tiles 16·16·64 = 16384, tdpbf16ps 16·16·32 = 8192. The loops hold CPU_PEAK_ACC independent
 * accumulators (or 4 C tiles), enough to cover each instruction's latency at its throughput, and touch no memory. */
#ifndef AAH_CPU_PEAK_H
#define AAH_CPU_PEAK_H

#include <stdbool.h>
#include <stdint.h>

#include "kernels/backend.h"
#include "kernels/cpu/threadpool.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Independent accumulators of the vector loops: 12 covers a latency of 6 cycles at 2 a cycle (vfmadd231ps on two
 * ports), the worst case among these instructions; 12 + 2 operands also fit AVX2's 16 ymm registers. */
#define CPU_PEAK_ACC 12

/* One loop: `iters` passes, each of the variant's independent multiply-add instructions (CPU_PEAK_ACC vectors or 4
 * tiles) on operands that are all v (u8, f32 or bf16) times 1, from zeroed accumulators. Returns the sum of every
 * accumulator lane, which is exactly v · iters · cpu_peak_macs_per_iter(p) while each lane stays exact (f32 lanes below
 * 2^24, int32 below 2^31): the check suite (tests/kernels/check_peak.c) holds the loops to the count they claim. */
typedef double (*cpu_peak_fn)(int64_t iters, int32_t v);

/* The loop of product path p where this CPU (and for AMX the kernel's grant of the tile state) can run it, else NULL
 * (and always NULL for AAH_CPU_PRODUCT_OTHER). */
cpu_peak_fn cpu_peak_loop(aah_cpu_product p);
/* Multiply-adds one pass of p's loop does (all its instructions together). */
double cpu_peak_macs_per_iter(aah_cpu_product p);
/* The instruction in words: "vfmadd231ps zmm", "vpdpbusd ymm", "AMX tdpbusd", …; "no peak loop" for OTHER. */
const char *cpu_peak_name(aah_cpu_product p);
/* "FLOP/s" for the float instructions, "OP/s" for the integer ones. */
const char *cpu_peak_unit(aah_cpu_product p);

/* p's loop on every worker of tp at once: 2 · multiply-adds per second, summed over the workers; the best of 5 runs of
 * at least 20 ms each (a shared machine only ever slows a run). 0 where cpu_peak_loop(p) is NULL. */
double cpu_peak_measure(aah_cpu_product p, threadpool *tp);

/* The variants' loops (cpu_peak_<suffix>.c, compiled with that variant's flags): only through cpu_peak_loop. */
double cpu_peak_fma_ymm(int64_t iters, int32_t v);          /* _avx2 */
double cpu_peak_dpbusd_ymm_vex(int64_t iters, int32_t v);   /* _avxvnni */
double cpu_peak_fma_zmm(int64_t iters, int32_t v);          /* _avx512 */
double cpu_peak_dpbusd_zmm(int64_t iters, int32_t v);       /* _avx512vnni */
double cpu_peak_dpbusd_ymm_evex(int64_t iters, int32_t v);  /* _avx512vnni: the 256-bit form of AVX-512 VNNI */
double cpu_peak_dpbf16_zmm(int64_t iters, int32_t v);       /* _avx512bf16 */
double cpu_peak_amx_int8(int64_t iters, int32_t v);         /* _amx */
double cpu_peak_amx_bf16(int64_t iters, int32_t v);         /* _amx */

#ifdef __cplusplus
}
#endif

#endif
