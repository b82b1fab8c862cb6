/* kernels/cpu/cpu_peak_loop.h — the loop every vector peak (cpu_peak_*.c) shares: CPU_PEAK_ACC accumulators, each
 * updated by one instruction a pass. Internal to those files; included after the intrinsics they use. */
#ifndef AAH_CPU_PEAK_LOOP_H
#define AAH_CPU_PEAK_LOOP_H

#include "kernels/cpu/cpu_peak.h"

/* The accumulators are 12 named variables, not an array: GCC kept an array in memory and stored all 12 each pass
 * (seen in objdump), which put 12 stores beside the 12 multiply-adds. */
#define CPU_PEAK_DECLARE(T, ZERO)                                                                                     \
	T a0 = ZERO, a1 = ZERO, a2 = ZERO, a3 = ZERO, a4 = ZERO, a5 = ZERO, a6 = ZERO, a7 = ZERO, a8 = ZERO, a9 = ZERO,     \
	  a10 = ZERO, a11 = ZERO

/* a_j = STEP(a_j) for each accumulator, iters times, written out so no unrolling is left to chance. After each pass
 * an empty asm claims to read and change every accumulator: the compiler can neither fold passes together nor drop
 * one (integer multiply-adds of constants could otherwise be computed in closed form), and it costs no instruction.
 * "v": any vector register, zmm16–31 included. */
#define CPU_PEAK_KEEP(a) __asm__ volatile("" : "+v"(a))
#define CPU_PEAK_LOOP(iters, STEP)                                                                                     \
	for (int64_t it_ = 0; it_ < (iters); it_++) {                                                                     \
		a0 = STEP(a0);                                                                                                \
		a1 = STEP(a1);                                                                                                \
		a2 = STEP(a2);                                                                                                \
		a3 = STEP(a3);                                                                                                \
		a4 = STEP(a4);                                                                                                \
		a5 = STEP(a5);                                                                                                \
		a6 = STEP(a6);                                                                                                \
		a7 = STEP(a7);                                                                                                \
		a8 = STEP(a8);                                                                                                \
		a9 = STEP(a9);                                                                                                \
		a10 = STEP(a10);                                                                                              \
		a11 = STEP(a11);                                                                                              \
		CPU_PEAK_KEEP(a0);                                                                                            \
		CPU_PEAK_KEEP(a1);                                                                                            \
		CPU_PEAK_KEEP(a2);                                                                                            \
		CPU_PEAK_KEEP(a3);                                                                                            \
		CPU_PEAK_KEEP(a4);                                                                                            \
		CPU_PEAK_KEEP(a5);                                                                                            \
		CPU_PEAK_KEEP(a6);                                                                                            \
		CPU_PEAK_KEEP(a7);                                                                                            \
		CPU_PEAK_KEEP(a8);                                                                                            \
		CPU_PEAK_KEEP(a9);                                                                                            \
		CPU_PEAK_KEEP(a10);                                                                                           \
		CPU_PEAK_KEEP(a11);                                                                                           \
	}

_Static_assert(CPU_PEAK_ACC == 12, "CPU_PEAK_DECLARE and CPU_PEAK_LOOP name 12 accumulators");

/* The sum of every lane of the 12 accumulators (`lanes` values of type T each, written out by STORE), in double. */
#define CPU_PEAK_SUM(T, lanes, STORE)                                                                                  \
	({                                                                                                                \
		T l_[CPU_PEAK_ACC][lanes] __attribute__((aligned(64)));                                                       \
		STORE(l_[0], a0);                                                                                             \
		STORE(l_[1], a1);                                                                                             \
		STORE(l_[2], a2);                                                                                             \
		STORE(l_[3], a3);                                                                                             \
		STORE(l_[4], a4);                                                                                             \
		STORE(l_[5], a5);                                                                                             \
		STORE(l_[6], a6);                                                                                             \
		STORE(l_[7], a7);                                                                                             \
		STORE(l_[8], a8);                                                                                             \
		STORE(l_[9], a9);                                                                                             \
		STORE(l_[10], a10);                                                                                           \
		STORE(l_[11], a11);                                                                                           \
		double s_ = 0;                                                                                                \
		for (int j_ = 0; j_ < CPU_PEAK_ACC; j_++)                                                                     \
			for (int i_ = 0; i_ < (lanes); i_++)                                                                      \
				s_ += (double)l_[j_][i_];                                                                             \
		s_;                                                                                                           \
	})

#endif
