/* kernels/cpu/cpu_peak_amx.c — the AMX peaks: tdpbusd (int8, 16·16·64 multiply-adds a tile product, the instruction
 * family of cpu_amx.c's packed products) and tdpbf16ps (bf16, 16·16·32) on full tiles. Compiled with the AMX flags
 * (Makefile); run only where cpu_amx_available() (cpu_amx_bf16_available()): the kernel's grant comes from there.
 *
 * Four C tiles (tmm0 … tmm3) from two A (tmm4, tmm5) and two B (tmm6, tmm7), the 2 × 2 block AMX kernels use: four
 * independent products a pass, enough to cover a tile product's latency. The operands are loaded once, before the
 * loop; the tile configuration is cpu_amx.c's (cpu_amx_tiles_full), which keeps its per-thread record right. */
#include <immintrin.h>
#include <string.h>

#include "kernels/cpu/cpu_amx.h"
#include "kernels/cpu/cpu_peak.h"

/* The 4 C tiles (16 × 16 lanes of 4 bytes each) stored and summed. */
#define TILE_LANES (16 * 16)

static double sum_i32(const int32_t *c, int n)
{
	double s = 0;
	for (int i = 0; i < n; i++)
		s += c[i];
	return s;
}

static double sum_f32(const float *c, int n)
{
	double s = 0;
	for (int i = 0; i < n; i++)
		s += c[i];
	return s;
}

/* Both loops: four accumulator tiles (0-3), each updated by one tile product a pass from A tiles 4, 5 and B tiles
 * 6, 7 (loaded from a and b), then stored to c. A macro because the tile numbers must be immediates. */
#define AMX_PEAK_RUN(DP)                                                                                               \
	do {                                                                                                               \
		cpu_amx_tiles_full();                                                                                          \
		_tile_zero(0);                                                                                                 \
		_tile_zero(1);                                                                                                 \
		_tile_zero(2);                                                                                                 \
		_tile_zero(3);                                                                                                 \
		_tile_loadd(4, a, 64);                                                                                         \
		_tile_loadd(5, a, 64);                                                                                         \
		_tile_loadd(6, b, 64);                                                                                         \
		_tile_loadd(7, b, 64);                                                                                         \
		for (int64_t it = 0; it < iters; it++) {                                                                       \
			DP(0, 4, 6);                                                                                               \
			DP(1, 4, 7);                                                                                               \
			DP(2, 5, 6);                                                                                               \
			DP(3, 5, 7);                                                                                               \
		}                                                                                                              \
		_tile_stored(0, c, 64);                                                                                        \
		_tile_stored(1, c + TILE_LANES, 64);                                                                           \
		_tile_stored(2, c + 2 * TILE_LANES, 64);                                                                       \
		_tile_stored(3, c + 3 * TILE_LANES, 64);                                                                       \
	} while (0)

double cpu_peak_amx_int8(int64_t iters, int32_t v)
{
	_Alignas(64) uint8_t a[16 * 64];
	_Alignas(64) int8_t b[16 * 64];
	_Alignas(64) int32_t c[4 * TILE_LANES];
	memset(a, v, sizeof a);
	memset(b, 1, sizeof b);
	AMX_PEAK_RUN(_tile_dpbusd);
	return sum_i32(c, 4 * TILE_LANES);
}

double cpu_peak_amx_bf16(int64_t iters, int32_t v)
{
	_Alignas(64) uint16_t a[16 * 32], b[16 * 32];
	_Alignas(64) float c[4 * TILE_LANES];
	const float fv = (float)v, f1 = 1.0f;
	uint32_t bv, b1;
	memcpy(&bv, &fv, 4);   /* a small integer's bf16 is its f32's upper half, exactly */
	memcpy(&b1, &f1, 4);
	for (int i = 0; i < 16 * 32; i++) {
		a[i] = (uint16_t)(bv >> 16);
		b[i] = (uint16_t)(b1 >> 16);
	}
	AMX_PEAK_RUN(_tile_dpbf16ps);
	return sum_f32(c, 4 * TILE_LANES);
}
