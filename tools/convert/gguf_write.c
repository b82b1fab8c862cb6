/* tools/convert/gguf_write.c — the GGUF writer: the metadata serialised as it is added into one growing buffer, the
 * tensor directory computed from the declared shapes, the data filled tensor by tensor into a reused buffer. */
#include "tools/convert/gguf_write.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/bytebuf.h"
#include "kernels/quant.h"
#include "models/errf.h"
#include "models/gguf.h"

typedef struct gw_tensor {
	char *name;
	uint32_t n_dims;
	int64_t ne[GGUF_MAX_DIMS];
	uint32_t type;
	uint64_t offset, nbytes;
} gw_tensor;

struct gguf_writer {
	aah_bytebuf kv;             /* the serialised key/value pairs */
	uint64_t n_kv;
	char **keys;                /* (n_kv) for the duplicate check */
	gw_tensor *t;
	int32_t n_t, cap_t;
	bool oom;                   /* a failed append: every later call fails and write refuses */
};

gguf_writer *gguf_writer_init(void)
{
	return calloc(1, sizeof(gguf_writer));
}

void gguf_writer_free(gguf_writer *w)
{
	if (!w)
		return;
	for (uint64_t i = 0; i < w->n_kv; i++)
		free(w->keys[i]);
	free(w->keys);
	for (int32_t i = 0; i < w->n_t; i++)
		free(w->t[i].name);
	free(w->t);
	aah_bytebuf_free(&w->kv);
	free(w);
}

static int gw_put(gguf_writer *w, const void *p, size_t n)
{
	if (w->oom || aah_bytebuf_put(&w->kv, p, n)) {
		w->oom = true;
		return -1;
	}
	return 0;
}

static int gw_u32(gguf_writer *w, uint32_t v)
{
	unsigned char b[4] = { (unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16),
	                       (unsigned char)(v >> 24) };
	return gw_put(w, b, 4);
}

static int gw_u64(gguf_writer *w, uint64_t v)
{
	unsigned char b[8];
	for (int i = 0; i < 8; i++)
		b[i] = (unsigned char)(v >> (8 * i));
	return gw_put(w, b, 8);
}

static int gw_string(gguf_writer *w, const char *s, size_t n)
{
	return gw_u64(w, n) || gw_put(w, s, n);
}

/* The key and its type; counts the pair. */
static int gw_key(gguf_writer *w, const char *key, uint32_t type)
{
	char **nk = realloc(w->keys, (size_t)(w->n_kv + 1) * sizeof *nk);
	if (!nk) {
		w->oom = true;
		return -1;
	}
	w->keys = nk;
	if (!(w->keys[w->n_kv] = strdup(key))) {
		w->oom = true;
		return -1;
	}
	w->n_kv++;
	return gw_string(w, key, strlen(key)) || gw_u32(w, type);
}

int gguf_writer_u32(gguf_writer *w, const char *key, uint32_t v)
{
	return gw_key(w, key, GGUF_TYPE_UINT32) || gw_u32(w, v);
}

int gguf_writer_i32(gguf_writer *w, const char *key, int32_t v)
{
	return gw_key(w, key, GGUF_TYPE_INT32) || gw_u32(w, (uint32_t)v);
}

int gguf_writer_f32(gguf_writer *w, const char *key, float v)
{
	uint32_t b;
	memcpy(&b, &v, 4);
	return gw_key(w, key, GGUF_TYPE_FLOAT32) || gw_u32(w, b);
}

int gguf_writer_bool(gguf_writer *w, const char *key, bool v)
{
	unsigned char b = v ? 1 : 0;
	return gw_key(w, key, GGUF_TYPE_BOOL) || gw_put(w, &b, 1);
}

int gguf_writer_str(gguf_writer *w, const char *key, const char *s, size_t len)
{
	return gw_key(w, key, GGUF_TYPE_STRING) || gw_string(w, s, len);
}

int gguf_writer_str_array(gguf_writer *w, const char *key, const char *const *s, const size_t *len, uint64_t n)
{
	if (gw_key(w, key, GGUF_TYPE_ARRAY) || gw_u32(w, GGUF_TYPE_STRING) || gw_u64(w, n))
		return -1;
	for (uint64_t i = 0; i < n; i++)
		if (gw_string(w, s[i], len[i]))
			return -1;
	return 0;
}

int gguf_writer_i32_array(gguf_writer *w, const char *key, const int32_t *v, uint64_t n)
{
	if (gw_key(w, key, GGUF_TYPE_ARRAY) || gw_u32(w, GGUF_TYPE_INT32) || gw_u64(w, n))
		return -1;
	for (uint64_t i = 0; i < n; i++)
		if (gw_u32(w, (uint32_t)v[i]))
			return -1;
	return 0;
}

int gguf_writer_f32_array(gguf_writer *w, const char *key, const float *v, uint64_t n)
{
	if (gw_key(w, key, GGUF_TYPE_ARRAY) || gw_u32(w, GGUF_TYPE_FLOAT32) || gw_u64(w, n))
		return -1;
	for (uint64_t i = 0; i < n; i++) {
		uint32_t b;
		memcpy(&b, &v[i], 4);
		if (gw_u32(w, b))
			return -1;
	}
	return 0;
}

int gguf_writer_u8_array(gguf_writer *w, const char *key, const void *v, uint64_t n)
{
	return gw_key(w, key, GGUF_TYPE_ARRAY) || gw_u32(w, GGUF_TYPE_UINT8) || gw_u64(w, n) ||
	       gw_put(w, v, (size_t)n) ? -1 : 0;
}

int gguf_writer_tensor(gguf_writer *w, const char *name, uint32_t n_dims, const int64_t *ne, uint32_t ggml_type)
{
	int at = gguf_ggml_to_aah(ggml_type);
	if (w->oom || at < 0 || n_dims < 1 || n_dims > GGUF_MAX_DIMS)
		return -1;
	size_t row = aah_dtype_row_bytes((aah_dtype)at, ne[0]);
	if (!row)
		return -1;
	if (w->n_t == w->cap_t) {
		int32_t cap = w->cap_t ? w->cap_t * 2 : 64;
		gw_tensor *nt = realloc(w->t, (size_t)cap * sizeof *nt);
		if (!nt)
			return -1;
		w->t = nt;
		w->cap_t = cap;
	}
	gw_tensor *t = &w->t[w->n_t];
	memset(t, 0, sizeof *t);
	if (!(t->name = strdup(name)))
		return -1;
	t->n_dims = n_dims;
	uint64_t rows = 1;
	for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) {
		t->ne[d] = d < n_dims ? ne[d] : 1;
		if (d > 0)
			rows *= (uint64_t)t->ne[d];
	}
	t->type = ggml_type;
	t->nbytes = row * rows;
	uint64_t off = 0;
	if (w->n_t) {
		const gw_tensor *p = &w->t[w->n_t - 1];
		off = (p->offset + p->nbytes + GGUF_DEFAULT_ALIGNMENT - 1) / GGUF_DEFAULT_ALIGNMENT * GGUF_DEFAULT_ALIGNMENT;
	}
	t->offset = off;
	w->n_t++;
	return 0;
}

static int gw_write_all(FILE *f, const void *p, size_t n)
{
	return fwrite(p, 1, n, f) == n ? 0 : -1;
}

static int gw_pad(FILE *f, uint64_t at)
{
	static const unsigned char zeros[GGUF_DEFAULT_ALIGNMENT];
	size_t pad = (size_t)((GGUF_DEFAULT_ALIGNMENT - at % GGUF_DEFAULT_ALIGNMENT) % GGUF_DEFAULT_ALIGNMENT);
	return gw_write_all(f, zeros, pad);
}

int gguf_writer_write(gguf_writer *w, const char *path, gguf_fill_fn fill, void *ctx, char *err, size_t err_len)
{
	if (w->oom) {
		aah_errf(err, err_len, "%s: out of memory while building the metadata", path);
		return -1;
	}
	for (uint64_t i = 0; i < w->n_kv; i++)
		for (uint64_t j = 0; j < i; j++)
			if (!strcmp(w->keys[i], w->keys[j])) {
				aah_errf(err, err_len, "%s: key '%s' added twice", path, w->keys[i]);
				return -1;
			}
	/* the header and the tensor directory, serialised into a second writer's buffer */
	gguf_writer hdr = { 0 };
	gw_put(&hdr, "GGUF", 4);
	gw_u32(&hdr, 3);
	gw_u64(&hdr, (uint64_t)w->n_t);
	gw_u64(&hdr, w->n_kv);
	gw_put(&hdr, w->kv.p, w->kv.n);
	for (int32_t i = 0; i < w->n_t; i++) {
		const gw_tensor *t = &w->t[i];
		gw_string(&hdr, t->name, strlen(t->name));
		gw_u32(&hdr, t->n_dims);
		for (uint32_t d = 0; d < t->n_dims; d++)
			gw_u64(&hdr, (uint64_t)t->ne[d]);
		gw_u32(&hdr, t->type);
		gw_u64(&hdr, t->offset);
	}
	if (hdr.oom) {
		aah_bytebuf_free(&hdr.kv);
		aah_errf(err, err_len, "%s: out of memory", path);
		return -1;
	}
	size_t plen = strlen(path);
	char *tmp = malloc(plen + 24);
	unsigned char *buf = NULL;
	size_t buf_cap = 0;
	FILE *f = NULL;
	int fd = -1, rc = -1;
	if (!tmp) {
		aah_errf(err, err_len, "%s: out of memory", path);
		goto out;
	}
	snprintf(tmp, plen + 24, "%s.partial-XXXXXX", path);
	fd = mkstemp(tmp);
	if (fd < 0) {
		aah_errf(err, err_len, "%s: cannot create %s: %s", path, tmp, strerror(errno));
		free(tmp);
		tmp = NULL;
		goto out;
	}
	mode_t mask = umask(0);   /* mkstemp's 0600 would hide the model from the daemon's user: the usual 0666 & ~umask */
	umask(mask);
	if (fchmod(fd, 0666 & ~mask)) {
		aah_errf(err, err_len, "%s: %s", tmp, strerror(errno));
		close(fd);
		goto out;
	}
	f = fdopen(fd, "wb");
	if (!f) {
		aah_errf(err, err_len, "%s: %s", tmp, strerror(errno));
		close(fd);
		goto out;
	}
	if (gw_write_all(f, hdr.kv.p, hdr.kv.n) || gw_pad(f, hdr.kv.n))
		goto io_fail;
	uint64_t at = 0;
	for (int32_t i = 0; i < w->n_t; i++) {
		const gw_tensor *t = &w->t[i];
		if (gw_pad(f, at))
			goto io_fail;
		at = t->offset;
		if (t->nbytes > buf_cap) {
			free(buf);
			buf_cap = (size_t)t->nbytes;
			if (!(buf = malloc(buf_cap))) {
				aah_errf(err, err_len, "%s: out of memory for tensor '%s' (%llu bytes)", path, t->name,
				         (unsigned long long)t->nbytes);
				goto out;
			}
		}
		if (fill(ctx, i, buf, (size_t)t->nbytes, err, err_len))
			goto out;
		if (gw_write_all(f, buf, (size_t)t->nbytes))
			goto io_fail;
		at += t->nbytes;
	}
	if (fflush(f) || fsync(fileno(f)))
		goto io_fail;
	if (fclose(f)) {
		f = NULL;
		goto io_fail;
	}
	f = NULL;
	if (rename(tmp, path)) {
		aah_errf(err, err_len, "%s: cannot rename %s into place: %s", path, tmp, strerror(errno));
		goto out;
	}
	free(tmp);
	tmp = NULL;
	rc = 0;
	goto out;
io_fail:
	aah_errf(err, err_len, "%s: write failed: %s", tmp, strerror(errno));
out:
	if (f)
		fclose(f);
	if (tmp) {
		unlink(tmp);
		free(tmp);
	}
	free(buf);
	aah_bytebuf_free(&hdr.kv);
	return rc;
}
