/* models/gguf.c — the GGUF reader of models/gguf.h: a cursor over the buffer that refuses to read past its end, then
 * the tensor directory checked against the data section (types, sizes, alignment, bounds, overlaps). */
#include "gguf.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/quant.h"
#include "models/errf.h"

typedef struct gguf_cursor {
	const uint8_t *p;
	size_t len, at;
	char *err;
	size_t err_len;
} gguf_cursor;

static int cur_need(gguf_cursor *c, uint64_t n, const char *what)
{
	if (n > c->len - c->at) {
		aah_errf(c->err, c->err_len, "truncated at byte %zu: %s needs %llu bytes, %zu left", c->at, what,
		         (unsigned long long)n, c->len - c->at);
		return -1;
	}
	return 0;
}

static uint64_t rd_le(const uint8_t *p, int n)
{
	uint64_t v = 0;
	for (int i = n - 1; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static int cur_u32(gguf_cursor *c, uint32_t *out, const char *what)
{
	if (cur_need(c, 4, what))
		return -1;
	*out = (uint32_t)rd_le(c->p + c->at, 4);
	c->at += 4;
	return 0;
}

static int cur_u64(gguf_cursor *c, uint64_t *out, const char *what)
{
	if (cur_need(c, 8, what))
		return -1;
	*out = rd_le(c->p + c->at, 8);
	c->at += 8;
	return 0;
}

static int cur_str(gguf_cursor *c, gguf_str *out, const char *what)
{
	uint64_t n;
	if (cur_u64(c, &n, what))
		return -1;
	if (n > GGUF_MAX_STRING) {
		aah_errf(c->err, c->err_len, "%s: string length %llu exceeds the 64 MiB limit", what, (unsigned long long)n);
		return -1;
	}
	if (cur_need(c, n, what))
		return -1;
	out->s = (const char *)c->p + c->at;
	out->len = n;
	c->at += (size_t)n;
	return 0;
}

/* Bytes of one scalar of type t; 0 for STRING/ARRAY/unknown. */
static size_t gguf_scalar_size(uint32_t t)
{
	switch (t) {
	case GGUF_TYPE_UINT8: case GGUF_TYPE_INT8: case GGUF_TYPE_BOOL: return 1;
	case GGUF_TYPE_UINT16: case GGUF_TYPE_INT16: return 2;
	case GGUF_TYPE_UINT32: case GGUF_TYPE_INT32: case GGUF_TYPE_FLOAT32: return 4;
	case GGUF_TYPE_UINT64: case GGUF_TYPE_INT64: case GGUF_TYPE_FLOAT64: return 8;
	}
	return 0;
}

const char *gguf_ggml_type_name(uint32_t type)
{
	switch (type) {
	case GGML_TYPE_F32: return "F32";
	case GGML_TYPE_F16: return "F16";
	case GGML_TYPE_BF16: return "BF16";
	case GGML_TYPE_Q8_0: return "Q8_0";
	case GGML_TYPE_Q4_0: return "Q4_0";
	case GGML_TYPE_Q4_K: return "Q4_K";
	case GGML_TYPE_Q5_K: return "Q5_K";
	case GGML_TYPE_Q6_K: return "Q6_K";
	}
	return NULL;
}

int gguf_ggml_to_aah(uint32_t type)
{
	switch (type) {
	case GGML_TYPE_F32: return AAH_DTYPE_F32;
	case GGML_TYPE_F16: return AAH_DTYPE_F16;
	case GGML_TYPE_BF16: return AAH_DTYPE_BF16;
	case GGML_TYPE_Q8_0: return AAH_DTYPE_Q8_0;
	case GGML_TYPE_Q4_0: return AAH_DTYPE_Q4_0;
	case GGML_TYPE_Q4_K: return AAH_DTYPE_Q4_K;
	case GGML_TYPE_Q5_K: return AAH_DTYPE_Q5_K;
	case GGML_TYPE_Q6_K: return AAH_DTYPE_Q6_K;
	}
	return -1;
}

int gguf_aah_to_ggml(int t)
{
	switch (t) {
	case AAH_DTYPE_F32: return GGML_TYPE_F32;
	case AAH_DTYPE_F16: return GGML_TYPE_F16;
	case AAH_DTYPE_BF16: return GGML_TYPE_BF16;
	case AAH_DTYPE_Q8_0: return GGML_TYPE_Q8_0;
	case AAH_DTYPE_Q4_0: return GGML_TYPE_Q4_0;
	case AAH_DTYPE_Q4_K: return GGML_TYPE_Q4_K;
	case AAH_DTYPE_Q5_K: return GGML_TYPE_Q5_K;
	case AAH_DTYPE_Q6_K: return GGML_TYPE_Q6_K;
	}
	return -1;
}

static int gguf_read_kv(gguf_cursor *c, gguf_kv *kv, int64_t i)
{
	char what[64];
	snprintf(what, sizeof what, "key %lld", (long long)i);
	if (cur_str(c, &kv->key, what))
		return -1;
	if (kv->key.len == 0) {
		aah_errf(c->err, c->err_len, "key %lld is empty", (long long)i);
		return -1;
	}
	int kl = kv->key.len > 200 ? 200 : (int)kv->key.len;
	uint32_t t;
	if (cur_u32(c, &t, "a key's type"))
		return -1;
	kv->type = (gguf_type)t;
	kv->n = 1;
	if (t == GGUF_TYPE_STRING)
		return cur_str(c, &kv->str, "a string value");
	if (t == GGUF_TYPE_ARRAY) {
		uint32_t et;
		uint64_t n;
		if (cur_u32(c, &et, "an array's element type") || cur_u64(c, &n, "an array's length"))
			return -1;
		kv->arr_type = (gguf_type)et;
		kv->n = n;
		if (et == GGUF_TYPE_STRING) {
			/* each string is at least its 8-byte length: a count beyond that is a lie, refused before allocating */
			if (n > (c->len - c->at) / 8) {
				aah_errf(c->err, c->err_len, "key '%.*s': %llu strings cannot fit in the %zu bytes left", kl,
				         kv->key.s, (unsigned long long)n, c->len - c->at);
				return -1;
			}
			kv->strs = malloc((size_t)(n ? n : 1) * sizeof *kv->strs);
			if (!kv->strs) {
				aah_errf(c->err, c->err_len, "key '%.*s': out of memory", kl, kv->key.s);
				return -1;
			}
			for (uint64_t j = 0; j < n; j++)
				if (cur_str(c, &kv->strs[j], "an array's string"))
					return -1;
			return 0;
		}
		size_t es = gguf_scalar_size(et);
		if (!es) {
			aah_errf(c->err, c->err_len, "key '%.*s': array element type %u is not supported", kl, kv->key.s, et);
			return -1;
		}
		if (n > (c->len - c->at) / es) {
			aah_errf(c->err, c->err_len, "key '%.*s': an array of %llu elements runs past the end of the file", kl,
			         kv->key.s, (unsigned long long)n);
			return -1;
		}
		kv->data = c->p + c->at;
		c->at += (size_t)n * es;
		return 0;
	}
	size_t es = gguf_scalar_size(t);
	if (!es) {
		aah_errf(c->err, c->err_len, "key '%.*s': value type %u is not a GGUF type", kl, kv->key.s, t);
		return -1;
	}
	if (cur_need(c, es, "a value"))
		return -1;
	kv->data = c->p + c->at;
	c->at += es;
	return 0;
}

static int str_eq(gguf_str a, gguf_str b)
{
	return a.len == b.len && !memcmp(a.s, b.s, (size_t)a.len);
}

static int str_cmp(gguf_str a, gguf_str b)
{
	size_t n = (size_t)(a.len < b.len ? a.len : b.len);
	int c = memcmp(a.s, b.s, n);
	return c ? c : (a.len > b.len) - (a.len < b.len);
}

static int cmp_name(const void *a, const void *b)
{
	return str_cmp((*(const gguf_tensor_info *const *)a)->name, (*(const gguf_tensor_info *const *)b)->name);
}

static int cmp_key(const void *a, const void *b)
{
	return str_cmp((*(const gguf_kv *const *)a)->key, (*(const gguf_kv *const *)b)->key);
}

static int cmp_offset(const void *a, const void *b)
{
	uint64_t x = (*(const gguf_tensor_info *const *)a)->offset, y = (*(const gguf_tensor_info *const *)b)->offset;
	return (x > y) - (x < y);
}

static int gguf_read_tensor(gguf_cursor *c, gguf_tensor_info *t, int64_t i)
{
	char what[64];
	snprintf(what, sizeof what, "tensor %lld's name", (long long)i);
	if (cur_str(c, &t->name, what))
		return -1;
	int nl = t->name.len > 200 ? 200 : (int)t->name.len;
	if (t->name.len == 0) {
		aah_errf(c->err, c->err_len, "tensor %lld has an empty name", (long long)i);
		return -1;
	}
	if (cur_u32(c, &t->n_dims, "a tensor's dimension count"))
		return -1;
	if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS) {
		aah_errf(c->err, c->err_len, "tensor '%.*s': %u dimensions (1 to 4 supported)", nl, t->name.s, t->n_dims);
		return -1;
	}
	uint64_t elems = 1;
	for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) {
		uint64_t ne = 1;
		if (d < t->n_dims && cur_u64(c, &ne, "a tensor's dimension"))
			return -1;
		if (ne < 1 || ne > (uint64_t)INT64_MAX / elems) {
			aah_errf(c->err, c->err_len, "tensor '%.*s': dimension %u is %llu (must be ≥ 1, product < 2^63)", nl,
			         t->name.s, d, (unsigned long long)ne);
			return -1;
		}
		elems *= ne;
		t->ne[d] = (int64_t)ne;
	}
	if (cur_u32(c, &t->type, "a tensor's type") || cur_u64(c, &t->offset, "a tensor's offset"))
		return -1;
	int at = gguf_ggml_to_aah(t->type);
	if (at < 0) {
		aah_errf(c->err, c->err_len, "tensor '%.*s': ggml type %u is not supported (F32, F16, BF16, Q8_0, Q4_0, "
		         "Q4_K, Q5_K, Q6_K)", nl, t->name.s, t->type);
		return -1;
	}
	int64_t bl = aah_dtype_block_len((aah_dtype)at);
	if (t->ne[0] % bl) {
		aah_errf(c->err, c->err_len, "tensor '%.*s': %s rows of %lld values are not whole blocks of %lld", nl,
		         t->name.s, gguf_ggml_type_name(t->type), (long long)t->ne[0], (long long)bl);
		return -1;
	}
	uint64_t row = aah_dtype_row_bytes((aah_dtype)at, t->ne[0]), rows = elems / (uint64_t)t->ne[0];
	if (row && rows > UINT64_MAX / row) {
		aah_errf(c->err, c->err_len, "tensor '%.*s': its size overflows", nl, t->name.s);
		return -1;
	}
	t->nbytes = row * rows;
	return 0;
}

int gguf_parse(gguf_file *g, const void *buf, size_t len, char *err, size_t err_len)
{
	memset(g, 0, sizeof *g);
	gguf_cursor c = { buf, len, 0, err, err_len };
	const gguf_tensor_info **order = NULL;
	const gguf_kv **korder = NULL;
	uint32_t magic;
	uint64_t n_tensors, n_kv;
	if (cur_u32(&c, &magic, "the magic"))
		goto fail;
	if (magic != 0x46554747u) {   /* "GGUF" little-endian */
		aah_errf(err, err_len, "not a GGUF file (no GGUF magic)");
		goto fail;
	}
	if (cur_u32(&c, &g->version, "the version"))
		goto fail;
	if (g->version != 2 && g->version != 3) {
		aah_errf(err, err_len, "GGUF version %u is not supported (2 and 3 are)", g->version);
		goto fail;
	}
	if (cur_u64(&c, &n_tensors, "the tensor count") || cur_u64(&c, &n_kv, "the key count"))
		goto fail;
	/* a key is at least 8 + 1 + 4 + 1 bytes, a tensor 8 + 1 + 4 + 8 + 4 + 8: bound the counts by what can fit */
	if (n_kv > (len - c.at) / 14 || n_tensors > (len - c.at) / 33) {
		aah_errf(err, err_len, "%llu keys and %llu tensors cannot fit in a file of %zu bytes",
		         (unsigned long long)n_kv, (unsigned long long)n_tensors, len);
		goto fail;
	}
	g->kv = calloc((size_t)(n_kv ? n_kv : 1), sizeof *g->kv);
	g->tensors = calloc((size_t)(n_tensors ? n_tensors : 1), sizeof *g->tensors);
	if (!g->kv || !g->tensors) {
		aah_errf(err, err_len, "out of memory");
		goto fail;
	}
	for (uint64_t i = 0; i < n_kv; i++) {
		g->n_kv = (int64_t)i + 1;   /* counted before reading, so that gguf_free releases a half-read key */
		if (gguf_read_kv(&c, &g->kv[i], (int64_t)i))
			goto fail;
	}
	korder = malloc((size_t)(n_kv ? n_kv : 1) * sizeof *korder);
	if (!korder) {
		aah_errf(err, err_len, "out of memory");
		goto fail;
	}
	for (int64_t i = 0; i < g->n_kv; i++)
		korder[i] = &g->kv[i];
	qsort(korder, (size_t)g->n_kv, sizeof *korder, cmp_key);
	for (int64_t i = 1; i < g->n_kv; i++)
		if (str_eq(korder[i]->key, korder[i - 1]->key)) {
			aah_errf(err, err_len, "key '%.*s' appears twice", (int)(korder[i]->key.len > 200 ? 200 : korder[i]->key.len),
			         korder[i]->key.s);
			goto fail;
		}
	g->alignment = GGUF_DEFAULT_ALIGNMENT;
	const gguf_kv *al = gguf_find_kv(g, "general.alignment");
	if (al) {
		uint32_t a = al->type == GGUF_TYPE_UINT32 ? (uint32_t)rd_le(al->data, 4) : 0;
		if (!a || (a & (a - 1))) {
			aah_errf(err, err_len, "key 'general.alignment' must be a u32 power of two");
			goto fail;
		}
		g->alignment = a;
	}
	for (uint64_t i = 0; i < n_tensors; i++) {
		g->n_tensors = (int64_t)i + 1;
		if (gguf_read_tensor(&c, &g->tensors[i], (int64_t)i))
			goto fail;
	}
	size_t data = (c.at + g->alignment - 1) / g->alignment * g->alignment;
	if (g->n_tensors && data > len) {
		aah_errf(err, err_len, "truncated: the data section would start at byte %zu of %zu", data, len);
		goto fail;
	}
	g->data_offset = data;
	size_t data_len = data <= len ? len - data : 0;
	order = malloc((size_t)(n_tensors ? n_tensors : 1) * sizeof *order);
	if (!order) {
		aah_errf(err, err_len, "out of memory");
		goto fail;
	}
	for (int64_t i = 0; i < g->n_tensors; i++) {
		gguf_tensor_info *t = &g->tensors[i];
		int nl = t->name.len > 200 ? 200 : (int)t->name.len;
		if (t->offset % g->alignment) {
			aah_errf(err, err_len, "tensor '%.*s': offset %llu is not a multiple of the alignment %u", nl, t->name.s,
			         (unsigned long long)t->offset, g->alignment);
			goto fail;
		}
		if (t->offset > data_len || t->nbytes > data_len - t->offset) {
			aah_errf(err, err_len, "tensor '%.*s': bytes %llu to %llu run past the end of the data section (%zu "
			         "bytes; the file is truncated or lies)", nl, t->name.s, (unsigned long long)t->offset,
			         (unsigned long long)(t->offset + t->nbytes), data_len);
			goto fail;
		}
		t->data = (const uint8_t *)buf + data + t->offset;
		order[i] = t;
	}
	qsort(order, (size_t)g->n_tensors, sizeof *order, cmp_name);
	for (int64_t i = 1; i < g->n_tensors; i++)
		if (str_eq(order[i]->name, order[i - 1]->name)) {
			aah_errf(err, err_len, "tensor '%.*s' appears twice", (int)(order[i]->name.len > 200 ? 200 : order[i]->name.len),
			         order[i]->name.s);
			goto fail;
		}
	qsort(order, (size_t)g->n_tensors, sizeof *order, cmp_offset);
	for (int64_t i = 1; i < g->n_tensors; i++)
		if (order[i]->offset < order[i - 1]->offset + order[i - 1]->nbytes) {
			aah_errf(err, err_len, "tensor '%.*s' overlaps tensor '%.*s'",
			         (int)(order[i]->name.len > 200 ? 200 : order[i]->name.len), order[i]->name.s,
			         (int)(order[i - 1]->name.len > 200 ? 200 : order[i - 1]->name.len), order[i - 1]->name.s);
			goto fail;
		}
	free(order);
	free(korder);
	return 0;
fail:
	free(order);
	free(korder);
	gguf_free(g);
	return -1;
}

void gguf_free(gguf_file *g)
{
	if (!g)
		return;
	for (int64_t i = 0; i < g->n_kv; i++)
		free(g->kv[i].strs);
	free(g->kv);
	free(g->tensors);
	memset(g, 0, sizeof *g);
}

const gguf_kv *gguf_find_kv(const gguf_file *g, const char *key)
{
	gguf_str k = { key, strlen(key) };
	for (int64_t i = 0; i < g->n_kv; i++)
		if (str_eq(g->kv[i].key, k))
			return &g->kv[i];
	return NULL;
}

const gguf_tensor_info *gguf_find_tensor(const gguf_file *g, const char *name)
{
	gguf_str k = { name, strlen(name) };
	for (int64_t i = 0; i < g->n_tensors; i++)
		if (str_eq(g->tensors[i].name, k))
			return &g->tensors[i];
	return NULL;
}

/* The integer value of a scalar of integer type t at p; false for a non-integer type or a u64 beyond INT64_MAX. */
static bool gguf_int_at(uint32_t t, const uint8_t *p, int64_t *out)
{
	uint64_t u;
	switch (t) {
	case GGUF_TYPE_UINT8: *out = p[0]; return true;
	case GGUF_TYPE_INT8: *out = (int8_t)p[0]; return true;
	case GGUF_TYPE_UINT16: *out = (int64_t)rd_le(p, 2); return true;
	case GGUF_TYPE_INT16: *out = (int16_t)rd_le(p, 2); return true;
	case GGUF_TYPE_UINT32: *out = (int64_t)rd_le(p, 4); return true;
	case GGUF_TYPE_INT32: *out = (int32_t)rd_le(p, 4); return true;
	case GGUF_TYPE_INT64: *out = (int64_t)rd_le(p, 8); return true;
	case GGUF_TYPE_UINT64:
		u = rd_le(p, 8);
		if (u > (uint64_t)INT64_MAX) return false;
		*out = (int64_t)u;
		return true;
	}
	return false;
}

static bool gguf_float_at(uint32_t t, const uint8_t *p, double *out)
{
	if (t == GGUF_TYPE_FLOAT32) {
		uint32_t b = (uint32_t)rd_le(p, 4);
		float f;
		memcpy(&f, &b, 4);
		*out = f;
		return true;
	}
	if (t == GGUF_TYPE_FLOAT64) {
		uint64_t b = rd_le(p, 8);
		memcpy(out, &b, 8);
		return true;
	}
	return false;
}

int gguf_get_int(const gguf_file *g, const char *key, int64_t *out, char *err, size_t err_len)
{
	const gguf_kv *kv = gguf_find_kv(g, key);
	if (!kv)
		return 0;
	if (kv->type == GGUF_TYPE_ARRAY || kv->type == GGUF_TYPE_STRING || !gguf_int_at(kv->type, kv->data, out)) {
		aah_errf(err, err_len, "key '%s' must be an integer (type %u)", key, kv->type);
		return -1;
	}
	return 1;
}

int gguf_get_float(const gguf_file *g, const char *key, double *out, char *err, size_t err_len)
{
	const gguf_kv *kv = gguf_find_kv(g, key);
	if (!kv)
		return 0;
	if (kv->type == GGUF_TYPE_ARRAY || !gguf_float_at(kv->type, kv->data, out)) {
		aah_errf(err, err_len, "key '%s' must be a float (type %u)", key, kv->type);
		return -1;
	}
	if (!isfinite(*out)) {   /* no value of a model is NaN or infinite: a lying file, never a default */
		aah_errf(err, err_len, "key '%s' is %g: must be a finite number", key, *out);
		return -1;
	}
	return 1;
}

int gguf_get_bool(const gguf_file *g, const char *key, bool *out, char *err, size_t err_len)
{
	const gguf_kv *kv = gguf_find_kv(g, key);
	if (!kv)
		return 0;
	if (kv->type != GGUF_TYPE_BOOL || kv->data[0] > 1) {
		aah_errf(err, err_len, "key '%s' must be a bool (type %u)", key, kv->type);
		return -1;
	}
	*out = kv->data[0] != 0;
	return 1;
}

int gguf_get_str(const gguf_file *g, const char *key, gguf_str *out, char *err, size_t err_len)
{
	const gguf_kv *kv = gguf_find_kv(g, key);
	if (!kv)
		return 0;
	if (kv->type != GGUF_TYPE_STRING) {
		aah_errf(err, err_len, "key '%s' must be a string (type %u)", key, kv->type);
		return -1;
	}
	*out = kv->str;
	return 1;
}

int64_t gguf_arr_int(const gguf_kv *kv, uint64_t i)
{
	int64_t v = 0;
	size_t es = gguf_scalar_size(kv->arr_type);
	if (!gguf_int_at(kv->arr_type, kv->data + i * es, &v))
		return INT64_MIN;
	return v;
}

double gguf_arr_float(const gguf_kv *kv, uint64_t i)
{
	double v = 0;
	size_t es = gguf_scalar_size(kv->arr_type);
	if (!gguf_float_at(kv->arr_type, kv->data + i * es, &v))
		return 0.0 / 0.0;
	return v;
}
