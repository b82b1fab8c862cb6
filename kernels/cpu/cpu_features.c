/* kernels/cpu/cpu_features.c — whether AMX-INT8 tiles (cpu_amx.h: CPUID, then the kernel's grant of the tile data
 * state) and AVX-512 BF16 (cpu_bf16dot.h) may be used here. Portable C (no ISA flags): it runs anywhere to say no. */
#include "kernels/cpu/cpu_amx.h"
#include "kernels/cpu/cpu_bf16dot.h"

#if defined(__x86_64__) && defined(__linux__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#define ARCH_GET_XCOMP_PERM 0x1022
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

static bool amx_probe(void)
{
	unsigned a, b, c, d;
	if (!__get_cpuid_count(7, 0, &a, &b, &c, &d))
		return false;
	const bool tile = (d >> 24) & 1, int8 = (d >> 25) & 1;
	if (!tile || !int8)
		return false;
	/* Linux 5.16+: the 8 KiB of tile data are an opt-in part of the thread state; without the grant the first tile
	 * instruction dies on SIGILL. The grant is for the whole process, its threads present and future. */
	if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) != 0)
		return false;
	unsigned long perm = 0;
	if (syscall(SYS_arch_prctl, ARCH_GET_XCOMP_PERM, &perm) != 0)
		return false;
	return (perm >> XFEATURE_XTILEDATA) & 1;
}

bool cpu_amx_bf16_available(void)
{
	unsigned a, b, c, d;
	return cpu_amx_available() && __get_cpuid_count(7, 0, &a, &b, &c, &d) && ((d >> 22) & 1);
}

bool cpu_amx_available(void)
{
	static int state = -1;   /* -1: not asked yet; asking twice is harmless, so no lock */
	int s = __atomic_load_n(&state, __ATOMIC_ACQUIRE);
	if (s < 0) {
		s = amx_probe();
		__atomic_store_n(&state, s, __ATOMIC_RELEASE);
	}
	return s;
}

bool cpu_bf16dot_available(void)
{
	__builtin_cpu_init();
	return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
	       __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
	       __builtin_cpu_supports("avx512bf16");
}
#else
bool cpu_amx_available(void)
{
	return false;
}

bool cpu_amx_bf16_available(void)
{
	return false;
}

bool cpu_bf16dot_available(void)
{
	return false;
}
#endif
