/* kernels/cpu/cpu_qpack.c — the 16-row packed layout of cpu_qpack.h: packing a group, unpacking a row back (the
 * quantized embedding's get_rows, and the tests' round trip), and the activation rows its kernels read. Portable C;
 * the kernels are in cpu_qpack_avx512vnni.c. */
#include "kernels/cpu/cpu_qpack.h"

#include <string.h>

#include "kernels/cpu/cpu_quant.h"

#define R CPU_QPACK_ROWS

bool cpu_qpack_has(aah_dtype t)
{
	return t == AAH_DTYPE_Q8_0 || t == AAH_DTYPE_Q4_0 || t == AAH_DTYPE_Q4_K || t == AAH_DTYPE_Q5_K ||
	       t == AAH_DTYPE_Q6_K;
}

size_t cpu_qpack_block_bytes(aah_dtype t)
{
	switch (t) {
	case AAH_DTYPE_Q8_0: return 544;
	case AAH_DTYPE_Q4_0: return 288;
	case AAH_DTYPE_Q4_K: return 2368;
	case AAH_DTYPE_Q5_K: return 2880;
	case AAH_DTYPE_Q6_K: return 3360;
	default: return 0;
	}
}

size_t cpu_qpack_group_bytes(aah_dtype t, int64_t cols)
{
	return cpu_qpack_block_bytes(t) * (size_t)(cols / aah_dtype_block_len(t));
}

/* Byte t of dword column i of row r, in a run of dword columns starting at base. */
static inline uint8_t *col_byte(uint8_t *base, int i, int r, int t)
{
	return base + ((size_t)i * R + (size_t)r) * 4 + (size_t)t;
}

/* The 12 scale bytes of a Q4_K / Q5_K block from its 8 six-bit scales and mins: the inverse of
 * cpu_unpack_scales_k4 (every bit of the 12 bytes is one of theirs, so the round trip is exact). */
static void pack_scales_k4(uint8_t q[12], const uint8_t sc[8], const uint8_t m[8])
{
	for (int j = 0; j < 4; j++) {
		q[j] = (uint8_t)(sc[j] | ((sc[j + 4] >> 4) << 6));
		q[j + 4] = (uint8_t)(m[j] | ((m[j + 4] >> 4) << 6));
		q[j + 8] = (uint8_t)((sc[j + 4] & 0xF) | ((m[j + 4] & 0xF) << 4));
	}
}

/* Moves one block of row r between its GGUF form (blk) and group-block gb; pack = true packs, false unpacks. */
static void move_block(aah_dtype t, uint8_t *gb, void *blk, int r, bool pack)
{
#define MOVE(packed, plain) do { if (pack) (packed) = (plain); else (plain) = (packed); } while (0)
	switch (t) {
	case AAH_DTYPE_Q8_0: {
		aah_block_q8_0 *b = blk;
		aah_half *d = (aah_half *)(void *)gb;
		MOVE(d[r], b->d);
		for (int i = 0; i < 8; i++)
			for (int k = 0; k < 4; k++) {
				uint8_t *p = col_byte(gb + 32, i, r, k);
				if (pack)
					*p = (uint8_t)b->qs[4 * i + k] ^ 0x80;
				else
					b->qs[4 * i + k] = (int8_t)(*p ^ 0x80);
			}
		break;
	}
	case AAH_DTYPE_Q4_0: {
		aah_block_q4_0 *b = blk;
		MOVE(((aah_half *)(void *)gb)[r], b->d);
		for (int i = 0; i < 4; i++)
			for (int k = 0; k < 4; k++)
				MOVE(*col_byte(gb + 32, i, r, k), b->qs[4 * i + k]);
		break;
	}
	case AAH_DTYPE_Q4_K:
	case AAH_DTYPE_Q5_K: {
		aah_block_q4_K *b4 = blk;
		aah_block_q5_K *b5 = blk;
		const bool q5 = t == AAH_DTYPE_Q5_K;
		aah_half *d = (aah_half *)(void *)gb;
		aah_half *bd = q5 ? &b5->d : &b4->d, *bm = q5 ? &b5->dmin : &b4->dmin;
		MOVE(d[r], *bd);
		MOVE(d[R + r], *bm);
		uint8_t *scales = q5 ? b5->scales : b4->scales, *qs = q5 ? b5->qs : b4->qs;
		uint8_t sc[8], m[8];
		if (pack)
			cpu_unpack_scales_k4(scales, sc, m);
		for (int j = 0; j < 8; j++) {
			MOVE(gb[64 + j * R + r], sc[j]);
			MOVE(gb[192 + ((j / 2) * R + r) * 2 + j % 2], m[j]);
		}
		if (!pack)
			pack_scales_k4(scales, sc, m);
		for (int p = 0; p < 4; p++)
			for (int i = 0; i < 8; i++)
				for (int k = 0; k < 4; k++)
					MOVE(*col_byte(gb + 320, p * 8 + i, r, k), qs[32 * p + 4 * i + k]);
		if (q5)
			for (int i = 0; i < 8; i++)
				for (int k = 0; k < 4; k++)
					MOVE(*col_byte(gb + 2368, i, r, k), b5->qh[4 * i + k]);
		break;
	}
	case AAH_DTYPE_Q6_K: {
		aah_block_q6_K *b = blk;
		MOVE(((aah_half *)(void *)gb)[r], b->d);
		for (int j = 0; j < 16; j++)
			MOVE(((int8_t *)gb)[32 + j * R + r], b->scales[j]);
		for (int n = 0; n < 2; n++) {
			for (int i = 0; i < 16; i++)
				for (int k = 0; k < 4; k++)
					MOVE(*col_byte(gb + 288, n * 16 + i, r, k), b->ql[64 * n + 4 * i + k]);
			for (int i = 0; i < 8; i++)
				for (int k = 0; k < 4; k++)
					MOVE(*col_byte(gb + 2336, n * 8 + i, r, k), b->qh[32 * n + 4 * i + k]);
		}
		break;
	}
	default:
		break;
	}
#undef MOVE
}

void cpu_qpack_group(aah_dtype t, void *dst, const void *src, size_t row_bytes, int n, int64_t cols)
{
	const size_t gbb = cpu_qpack_block_bytes(t), bb = aah_dtype_block_bytes(t);
	const int64_t nb = cols / aah_dtype_block_len(t);
	memset(dst, 0, gbb * (size_t)nb);
	for (int r = 0; r < n; r++)
		for (int64_t b = 0; b < nb; b++) {
			uint8_t blk[sizeof(aah_block_q6_K) > sizeof(aah_block_q5_K) ? sizeof(aah_block_q6_K) : sizeof(aah_block_q5_K)];
			memcpy(blk, (const char *)src + (size_t)r * row_bytes + (size_t)b * bb, bb);
			move_block(t, (uint8_t *)dst + (size_t)b * gbb, blk, r, true);
		}
}

void cpu_qpack_unpack_row(aah_dtype t, void *dst, const void *group, int r, int64_t cols)
{
	const size_t gbb = cpu_qpack_block_bytes(t), bb = aah_dtype_block_bytes(t);
	const int64_t nb = cols / aah_dtype_block_len(t);
	for (int64_t b = 0; b < nb; b++) {
		uint8_t blk[sizeof(aah_block_q6_K) > sizeof(aah_block_q5_K) ? sizeof(aah_block_q6_K) : sizeof(aah_block_q5_K)];
		move_block(t, (uint8_t *)(uintptr_t)group + (size_t)b * gbb, blk, r, false);
		memcpy((char *)dst + (size_t)b * bb, blk, bb);
	}
}

size_t cpu_qpack_act_row_bytes(aah_dtype t, int64_t n)
{
	return t == AAH_DTYPE_Q8_0 || t == AAH_DTYPE_Q4_0 ? sizeof(cpu_qa8) * (size_t)(n / 32)
	                                                  : sizeof(cpu_qak) * (size_t)(n / 256);
}

void cpu_qpack_quantize_act(aah_dtype t, void *dst, const float *x, int64_t n)
{
	if (t == AAH_DTYPE_Q8_0 || t == AAH_DTYPE_Q4_0) {
		const int32_t off = t == AAH_DTYPE_Q8_0 ? 128 : 8;
		cpu_qa8 *y = dst;
		for (int64_t b = 0; b < n / 32; b++) {
			aah_block_q8_0 q;
			cpu_quantize_act(AAH_DTYPE_Q8_0, &q, x + b * 32, 32);   /* blocks are quantized independently */
			int32_t sum = 0;
			for (int k = 0; k < 32; k++)
				sum += q.qs[k];
			y[b].d = aah_half_to_float(q.d);
			y[b].bias = -off * sum;
			memcpy(y[b].qs, q.qs, 32);
		}
		return;
	}
	cpu_qak *y = dst;
	for (int64_t b = 0; b < n / 256; b++) {
		aah_block_q8_K q;
		cpu_quantize_act(AAH_DTYPE_Q8_K, &q, x + b * 256, 256);
		memcpy(y[b].qs, q.qs, 256);
		for (int j = 0; j < 16; j++)
			y[b].b32[j] = -32 * q.bsums[j];
		for (int j = 0; j < 8; j++)
			y[b].bs32[j] = (int16_t)(q.bsums[2 * j] + q.bsums[2 * j + 1]);
		y[b].d = q.d;
	}
}
