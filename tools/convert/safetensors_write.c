/* tools/convert/safetensors_write.c — writes a safetensors file: tensors are registered first (buffers or fill
 * callbacks), then st_writer_close writes header and data in one streaming pass to path.tmp and renames it. */
#include "tools/convert/safetensors_write.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/bytebuf.h"

/* Fill callbacks are handed chunks of this many bytes at most: big enough that write(2) and the callback's
 * per-call cost vanish, small enough to stay in L2/L3 on the way to the page cache. */
#define STW_CHUNK_BYTES (4u << 20)

typedef struct stw_tensor {
	char *name;                       /* owned */
	st_dtype dtype;
	int32_t n_dims;
	int64_t shape[ST_MAX_DIMS];
	uint64_t n_elems;
	uint64_t nbytes;
	const void *data;                 /* caller's buffer, or NULL when fill is set */
	st_fill_fn fill;
	void *ctx;
	uint64_t begin;                   /* offset inside the data section, set at close */
	int32_t order;                    /* position in the order of adding */
} stw_tensor;

struct st_writer {
	char *path;                       /* owned */
	char *err;                        /* caller's buffer */
	size_t err_len;
	stw_tensor *t;                    /* owned, n_t used of cap_t */
	int32_t n_t, cap_t;
	char **meta;                      /* owned: key, value, key, value, … (2 × n_meta) */
	int32_t n_meta;
	uint64_t data_bytes;
};

static void stw_fail(st_writer *w, const char *fmt, ...)
{
	if (!w->err || w->err_len == 0)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(w->err, w->err_len, fmt, ap);
	va_end(ap);
}

static size_t stw_dtype_bytes(st_dtype d)
{
	switch (d) {
	case ST_F32: return 4;
	case ST_F16: return 2;
	case ST_BF16: return 2;
	default: break;   /* the block types are never written to safetensors */
	}
	return 0;
}

static const char *stw_dtype_name(st_dtype d)
{
	switch (d) {
	case ST_F32: return "F32";
	case ST_F16: return "F16";
	case ST_BF16: return "BF16";
	default: break;
	}
	return "?";
}

st_writer *st_writer_open(const char *path, char *err, size_t err_len)
{
	if (!path || !*path) {
		if (err && err_len)
			snprintf(err, err_len, "safetensors writer: empty path");
		return NULL;
	}
	st_writer *w = calloc(1, sizeof(*w));
	if (!w || !(w->path = strdup(path))) {
		free(w);
		if (err && err_len)
			snprintf(err, err_len, "%s: out of memory", path);
		return NULL;
	}
	w->err = err;
	w->err_len = err_len;
	return w;
}

void st_writer_discard(st_writer *w)
{
	if (!w)
		return;
	for (int32_t i = 0; i < w->n_t; i++)
		free(w->t[i].name);
	free(w->t);
	for (int32_t i = 0; i < 2 * w->n_meta; i++)
		free(w->meta[i]);
	free(w->meta);
	free(w->path);
	free(w);
}

int st_writer_set_metadata(st_writer *w, const char *key, const char *value)
{
	for (int32_t i = 0; i < w->n_meta; i++) {
		if (strcmp(w->meta[2 * i], key) == 0) {
			char *v = strdup(value);
			if (!v)
				goto oom;
			free(w->meta[2 * i + 1]);
			w->meta[2 * i + 1] = v;
			return 0;
		}
	}
	char **m = realloc(w->meta, sizeof(*m) * 2 * (size_t)(w->n_meta + 1));
	if (!m)
		goto oom;
	w->meta = m;
	char *k = strdup(key), *v = strdup(value);
	if (!k || !v) {
		free(k);
		free(v);
		goto oom;
	}
	m[2 * w->n_meta] = k;
	m[2 * w->n_meta + 1] = v;
	w->n_meta++;
	return 0;
oom:
	stw_fail(w, "%s: out of memory", w->path);
	return -1;
}

static int stw_add(st_writer *w, const char *name, st_dtype dtype, int32_t n_dims, const int64_t *shape,
                   const void *data, st_fill_fn fill, void *ctx)
{
	size_t esize = stw_dtype_bytes(dtype);
	if (!name || !*name || strcmp(name, "__metadata__") == 0) {
		stw_fail(w, "%s: bad tensor name '%s'", w->path, name ? name : "(null)");
		return -1;
	}
	if (esize == 0) {
		stw_fail(w, "%s: tensor '%s': unknown dtype %d", w->path, name, (int)dtype);
		return -1;
	}
	if (n_dims < 0 || n_dims > ST_MAX_DIMS) {
		stw_fail(w, "%s: tensor '%s': %d dimensions (at most %d)", w->path, name, (int)n_dims, ST_MAX_DIMS);
		return -1;
	}
	uint64_t n_elems = 1;
	for (int32_t d = 0; d < n_dims; d++) {
		if (shape[d] < 0 || __builtin_mul_overflow(n_elems, (uint64_t)shape[d], &n_elems)) {
			stw_fail(w, "%s: tensor '%s': bad shape", w->path, name);
			return -1;
		}
	}
	uint64_t nbytes;
	if (__builtin_mul_overflow(n_elems, (uint64_t)esize, &nbytes) || nbytes > (uint64_t)INT64_MAX ||
	    w->data_bytes + nbytes < w->data_bytes) {
		stw_fail(w, "%s: tensor '%s': too large", w->path, name);
		return -1;
	}
	if (!data && !fill && nbytes > 0) {
		stw_fail(w, "%s: tensor '%s': no data", w->path, name);
		return -1;
	}
	if (w->n_t == w->cap_t) {
		int32_t cap = w->cap_t ? 2 * w->cap_t : 64;
		stw_tensor *t = realloc(w->t, sizeof(*t) * (size_t)cap);
		if (!t) {
			stw_fail(w, "%s: out of memory", w->path);
			return -1;
		}
		w->t = t;
		w->cap_t = cap;
	}
	stw_tensor *t = &w->t[w->n_t];
	memset(t, 0, sizeof(*t));
	if (!(t->name = strdup(name))) {
		stw_fail(w, "%s: out of memory", w->path);
		return -1;
	}
	t->dtype = dtype;
	t->n_dims = n_dims;
	for (int32_t d = 0; d < n_dims; d++)
		t->shape[d] = shape[d];
	t->n_elems = n_elems;
	t->nbytes = nbytes;
	t->data = data;
	t->fill = fill;
	t->ctx = ctx;
	t->order = w->n_t++;
	w->data_bytes += nbytes;
	return 0;
}

int st_writer_add(st_writer *w, const char *name, st_dtype dtype, int32_t n_dims, const int64_t *shape,
                  const void *data)
{
	return stw_add(w, name, dtype, n_dims, shape, data, NULL, NULL);
}

int st_writer_add_fill(st_writer *w, const char *name, st_dtype dtype, int32_t n_dims, const int64_t *shape,
                       st_fill_fn fill, void *ctx)
{
	if (!fill) {
		stw_fail(w, "%s: tensor '%s': no fill function", w->path, name ? name : "(null)");
		return -1;
	}
	return stw_add(w, name, dtype, n_dims, shape, NULL, fill, ctx);
}

uint64_t st_writer_data_bytes(const st_writer *w)
{
	return w->data_bytes;
}

static void stw_buf_printf(aah_bytebuf *b, const char *fmt, ...)
{
	char tmp[128];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
	va_end(ap);
	aah_bytebuf_put(b, tmp, (size_t)n);   /* only used for numbers: always fits */
}

/* A JSON string literal: quotes, backslashes and control characters escaped; other bytes (UTF-8) as they are. */
static void stw_buf_add_json_string(aah_bytebuf *b, const char *s)
{
	aah_bytebuf_put(b, "\"", 1);
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if (*p == '"' || *p == '\\') {
			char e[2] = {'\\', (char)*p};
			aah_bytebuf_put(b, e, 2);
		} else if (*p < 0x20) {
			stw_buf_printf(b, "\\u%04x", *p);
		} else {
			aah_bytebuf_put(b, (const char *)p, 1);
		}
	}
	aah_bytebuf_put(b, "\"", 1);
}

static int stw_cmp_name(const void *a, const void *b)
{
	const stw_tensor *x = *(const stw_tensor *const *)a, *y = *(const stw_tensor *const *)b;
	return strcmp(x->name, y->name);
}

/* Data order: wider elements first so that every tensor starts at a multiple of its element size
 * (the data section itself starts at a multiple of 8); within one width, the order of adding. */
static int stw_cmp_layout(const void *a, const void *b)
{
	const stw_tensor *x = *(const stw_tensor *const *)a, *y = *(const stw_tensor *const *)b;
	size_t ex = stw_dtype_bytes(x->dtype), ey = stw_dtype_bytes(y->dtype);
	if (ex != ey)
		return ex > ey ? -1 : 1;
	return (x->order > y->order) - (x->order < y->order);
}

static int stw_write_all(int fd, const void *buf, size_t n)
{
	const char *p = buf;
	while (n > 0) {
		ssize_t k = write(fd, p, n);
		if (k < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		p += k;
		n -= (size_t)k;
	}
	return 0;
}

/* Builds the header JSON, padded with spaces to a multiple of 8. by_name: the tensors sorted by name.
 * Returns 0 with *out malloc'd (the caller frees it), or -1. */
static int stw_build_header(st_writer *w, stw_tensor **by_name, aah_bytebuf *out)
{
	aah_bytebuf b = { 0 };
	aah_bytebuf_put(&b, "{", 1);
	bool first = true;
	if (w->n_meta > 0) {
		aah_bytebuf_put(&b, "\"__metadata__\":{", 16);
		for (int32_t i = 0; i < w->n_meta; i++) {
			if (i)
				aah_bytebuf_put(&b, ",", 1);
			stw_buf_add_json_string(&b, w->meta[2 * i]);
			aah_bytebuf_put(&b, ":", 1);
			stw_buf_add_json_string(&b, w->meta[2 * i + 1]);
		}
		aah_bytebuf_put(&b, "}", 1);
		first = false;
	}
	for (int32_t i = 0; i < w->n_t; i++) {
		const stw_tensor *t = by_name[i];
		if (!first)
			aah_bytebuf_put(&b, ",", 1);
		first = false;
		stw_buf_add_json_string(&b, t->name);
		stw_buf_printf(&b, ":{\"dtype\":\"%s\",\"shape\":[", stw_dtype_name(t->dtype));
		for (int32_t d = 0; d < t->n_dims; d++)
			stw_buf_printf(&b, d ? ",%lld" : "%lld", (long long)t->shape[d]);
		stw_buf_printf(&b, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)t->begin,
		               (unsigned long long)(t->begin + t->nbytes));
	}
	aah_bytebuf_put(&b, "}", 1);
	while (!b.oom && b.n % 8 != 0)
		aah_bytebuf_put(&b, " ", 1);
	if (b.oom) {
		aah_bytebuf_free(&b);
		stw_fail(w, "%s: out of memory", w->path);
		return -1;
	}
	if (b.n > ST_MAX_HEADER) {
		aah_bytebuf_free(&b);
		stw_fail(w, "%s: header of %zu bytes exceeds the %u-byte limit", w->path, b.n, ST_MAX_HEADER);
		return -1;
	}
	*out = b;
	return 0;
}

/* Streams one tensor's bytes to fd. chunk: STW_CHUNK_BYTES of scratch for fill callbacks. */
static int stw_write_tensor(st_writer *w, int fd, const stw_tensor *t, void *chunk, const char *tmp_path)
{
	if (t->data) {
		if (stw_write_all(fd, t->data, (size_t)t->nbytes) != 0) {
			stw_fail(w, "%s: write: %s", tmp_path, strerror(errno));
			return -1;
		}
		return 0;
	}
	size_t esize = stw_dtype_bytes(t->dtype);
	uint64_t per_chunk = STW_CHUNK_BYTES / esize;
	for (uint64_t first = 0; first < t->n_elems; first += per_chunk) {
		uint64_t n = t->n_elems - first < per_chunk ? t->n_elems - first : per_chunk;
		char msg[256] = "";
		if (t->fill(t->ctx, chunk, (int64_t)first, (int64_t)n, msg, sizeof(msg)) != 0) {
			stw_fail(w, "%s: tensor '%s': %s", w->path, t->name, msg[0] ? msg : "fill failed");
			return -1;
		}
		if (stw_write_all(fd, chunk, (size_t)(n * esize)) != 0) {
			stw_fail(w, "%s: write: %s", tmp_path, strerror(errno));
			return -1;
		}
	}
	return 0;
}

int st_writer_close(st_writer *w)
{
	if (!w)
		return -1;
	int rc = -1, fd = -1;
	char *tmp_path = NULL;
	void *chunk = NULL;
	aah_bytebuf header = { 0 };
	stw_tensor **by_name = malloc(sizeof(*by_name) * (size_t)(w->n_t ? w->n_t : 1));
	stw_tensor **by_layout = malloc(sizeof(*by_layout) * (size_t)(w->n_t ? w->n_t : 1));
	size_t tmp_len = strlen(w->path) + 5;
	tmp_path = malloc(tmp_len);
	chunk = malloc(STW_CHUNK_BYTES);
	if (!by_name || !by_layout || !tmp_path || !chunk) {
		stw_fail(w, "%s: out of memory", w->path);
		goto done;
	}
	snprintf(tmp_path, tmp_len, "%s.tmp", w->path);
	for (int32_t i = 0; i < w->n_t; i++)
		by_name[i] = by_layout[i] = &w->t[i];
	qsort(by_name, (size_t)w->n_t, sizeof(*by_name), stw_cmp_name);
	for (int32_t i = 1; i < w->n_t; i++) {
		if (strcmp(by_name[i - 1]->name, by_name[i]->name) == 0) {
			stw_fail(w, "%s: tensor '%s' added twice", w->path, by_name[i]->name);
			goto done;
		}
	}
	qsort(by_layout, (size_t)w->n_t, sizeof(*by_layout), stw_cmp_layout);
	uint64_t off = 0;
	for (int32_t i = 0; i < w->n_t; i++) {
		by_layout[i]->begin = off;
		off += by_layout[i]->nbytes;
	}
	if (stw_build_header(w, by_name, &header) != 0)
		goto done;

	fd = open(tmp_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		stw_fail(w, "%s: %s", tmp_path, strerror(errno));
		goto done;
	}
	unsigned char len_le[8];
	for (int i = 0; i < 8; i++)
		len_le[i] = (unsigned char)((uint64_t)header.n >> (8 * i));
	if (stw_write_all(fd, len_le, 8) != 0 || stw_write_all(fd, header.p, header.n) != 0) {
		stw_fail(w, "%s: write: %s", tmp_path, strerror(errno));
		goto done;
	}
	for (int32_t i = 0; i < w->n_t; i++)
		if (stw_write_tensor(w, fd, by_layout[i], chunk, tmp_path) != 0)
			goto done;
	/* fsync before rename: otherwise a power cut can leave the new name pointing at missing data. */
	if (fsync(fd) != 0) {
		stw_fail(w, "%s: fsync: %s", tmp_path, strerror(errno));
		goto done;
	}
	int cfd = fd;
	fd = -1;
	if (close(cfd) != 0) {
		stw_fail(w, "%s: close: %s", tmp_path, strerror(errno));
		goto done;
	}
	if (rename(tmp_path, w->path) != 0) {
		stw_fail(w, "%s: rename to %s: %s", tmp_path, w->path, strerror(errno));
		goto done;
	}
	rc = 0;
done:
	if (fd >= 0)
		close(fd);
	if (rc != 0 && tmp_path)
		unlink(tmp_path);
	aah_bytebuf_free(&header);
	free(chunk);
	free(tmp_path);
	free(by_name);
	free(by_layout);
	st_writer_discard(w);
	return rc;
}

/* The conversions live in static inline functions so that st_convert_f32's loops inline them (the exported
 * names are interposable under -fPIC, which stops GCC from inlining them). */
static inline uint16_t stw_f32_to_bf16(float x)
{
	uint32_t u;
	memcpy(&u, &x, sizeof(u));
	/* Round to nearest even: add 0x7fff plus the lowest kept bit, then truncate. Overflow carries into the
	 * exponent, which is exactly right (FLT_MAX → inf, mantissa overflow → next binade). */
	uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
	/* NaN: rounding could carry it into inf or the sign; keep the sign and payload top, force the quiet bit.
	 * A select rather than a branch, so that conversion loops vectorise. */
	uint32_t nan = (u >> 16) | 0x0040u;
	return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

static inline uint16_t stw_f32_to_f16(float x)
{
	uint32_t u;
	memcpy(&u, &x, sizeof(u));
	uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
	uint32_t a = u & 0x7fffffffu;
	if (a > 0x7f800000u)                         /* NaN: quiet, keep the top payload bits */
		return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
	if (a >= 0x477ff000u)                        /* ≥ 65520 (halfway 65504 … 65536, ties to even = inf) */
		return (uint16_t)(sign | 0x7c00u);
	if (a >= 0x38800000u) {                      /* ≥ 2^-14: normal f16 */
		uint32_t m = a - 0x38000000u;            /* exponent bias 127 → 15 */
		m += 0xfffu + ((m >> 13) & 1u);          /* round to nearest even at bit 13 */
		return (uint16_t)(sign | (m >> 13));
	}
	if (a <= 0x33000000u)                        /* ≤ 2^-25: halfway to the smallest subnormal or below → 0 */
		return sign;
	/* Subnormal f16: the value in units of 2^-24 is mant · 2^(e − 126), e the f32 biased exponent (102 … 112). */
	uint32_t e = a >> 23;
	uint32_t mant = (a & 0x7fffffu) | 0x800000u;
	uint32_t shift = 126 - e;                    /* 14 … 24 */
	uint32_t q = mant >> shift, rem = mant & ((1u << shift) - 1u), half = 1u << (shift - 1);
	if (rem > half || (rem == half && (q & 1u)))
		q++;                                      /* may reach 0x400: the smallest normal, correctly encoded */
	return (uint16_t)(sign | q);
}

uint16_t st_f32_to_bf16(float x)
{
	return stw_f32_to_bf16(x);
}

uint16_t st_f32_to_f16(float x)
{
	return stw_f32_to_f16(x);
}

/* Blocks of a fixed 16 elements: GCC's -O2 vectoriser only takes loops whose trip count needs no scalar
 * epilogue, and the bf16 conversion then runs ~4x faster. */
#define STW_CONVERT_BLOCK 16

void st_convert_f32(void *restrict dst, st_dtype dtype, const float *restrict src, size_t n)
{
	size_t blocked = n - n % STW_CONVERT_BLOCK;
	switch (dtype) {
	case ST_F32:
		memcpy(dst, src, n * sizeof(float));
		return;
	case ST_F16: {
		uint16_t *restrict o = dst;
		for (size_t i = 0; i < n; i++)
			o[i] = stw_f32_to_f16(src[i]);
		return;
	}
	case ST_BF16: {
		uint16_t *restrict o = dst;
		for (size_t b = 0; b < blocked; b += STW_CONVERT_BLOCK)
			for (size_t i = b; i < b + STW_CONVERT_BLOCK; i++)
				o[i] = stw_f32_to_bf16(src[i]);
		for (size_t i = blocked; i < n; i++)
			o[i] = stw_f32_to_bf16(src[i]);
		return;
	}
	default: return;   /* the block types: not a safetensors conversion */
	}
}
