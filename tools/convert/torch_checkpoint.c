/* tools/convert/torch_checkpoint.c — torch.save archives: finds the one record folder and its data.pkl, unpickles it with
 * the restricted unpickler, and binds tensors to their storage records, copying views out in row-major order. */
#include "tools/convert/torch_checkpoint.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "models/errf.h"
#include "tools/convert/safetensors_write.h"

/* What a file that is not a zip archive is, from its first bytes. */
static const char *not_zip_reason(const uint8_t *d, uint64_t n)
{
	if (n >= 2 && d[0] == 0x80 && d[1] <= 5)
		return "a bare pickle: the legacy torch.save format (torch < 1.6, or _use_new_zipfile_serialization=False), "
		       "which is not read; save it again with torch.save on torch 1.6 or later";
	if (n >= 262 && !memcmp(d + 257, "ustar", 5))
		return "a tar archive: the oldest torch.save format, which is not read; save it again with torch.save on "
		       "torch 1.6 or later";
	return "not a torch.save archive (no zip header)";
}

static int tc_setup(tc_file *f, char *err, size_t err_len)
{
	const zip_archive *z = &f->zip;
	if (z->size < 4 || memcmp(z->data, "PK\x03\x04", 4)) {
		aah_errf(err, err_len, "%s: %s", f->path, not_zip_reason(z->data, z->size));
		return -1;
	}
	/* One folder holds every record; NAME/data.pkl is the pickle. */
	const zip_entry *pkl = NULL;
	for (int32_t i = 0; i < z->n_entries; i++) {
		const char *n = z->entries[i].name, *slash = strchr(n, '/');
		if (slash && !strcmp(slash + 1, "data.pkl") && !pkl)
			pkl = &z->entries[i];
	}
	if (!pkl) {
		aah_errf(err, err_len, "%s: a zip archive without NAME/data.pkl: not a torch.save checkpoint", f->path);
		return -1;
	}
	size_t plen = (size_t)(strchr(pkl->name, '/') - pkl->name) + 1;
	f->prefix = strndup(pkl->name, plen);
	if (!f->prefix) {
		aah_errf(err, err_len, "%s: out of memory", f->path);
		return -1;
	}
	for (int32_t i = 0; i < z->n_entries; i++) {
		const char *n = z->entries[i].name;
		if (strncmp(n, f->prefix, plen) != 0) {
			aah_errf(err, err_len, "%s: record '%s' lies outside the archive's folder '%s': not one torch.save "
			         "checkpoint", f->path, n, f->prefix);
			return -1;
		}
		if (!strcmp(n + plen, "constants.pkl") || !strncmp(n + plen, "code/", 5)) {
			aah_errf(err, err_len, "%s: a TorchScript archive (torch.jit.save), not a torch.save checkpoint",
			         f->path);
			return -1;
		}
	}
	char name[ZIP_MAX_NAME + 32];
	snprintf(name, sizeof name, "%sbyteorder", f->prefix);
	const zip_entry *bo = zip_find(z, name);
	if (bo && !(bo->size == 6 && !memcmp(zip_entry_data(z, bo), "little", 6))) {
		aah_errf(err, err_len, "%s: the checkpoint's byte order is not 'little' (a big-endian save is not read)",
		         f->path);
		return -1;
	}
	if (zip_entry_check(z, pkl, err, err_len))
		return -1;
	f->storage_state = calloc((size_t)z->n_entries, 1);
	if (!f->storage_state) {
		aah_errf(err, err_len, "%s: out of memory", f->path);
		return -1;
	}
	char perr[768];
	if (pkl_load(&f->doc, zip_entry_data(z, pkl), (size_t)pkl->size, NULL, perr, sizeof perr)) {
		aah_errf(err, err_len, "%s: %s: %s", f->path, pkl->name, perr);
		return -1;
	}
	return 0;
}

int tc_open(tc_file *f, const char *path, char *err, size_t err_len)
{
	memset(f, 0, sizeof *f);
	if (!(f->path = strdup(path))) {
		aah_errf(err, err_len, "%s: out of memory", path);
		return -1;
	}
	/* Say what a non-zip file is before the zip reader calls it "no end record". */
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		aah_errf(err, err_len, "%s: %s", path, strerror(errno));
		goto fail;
	}
	uint8_t head[512];
	ssize_t got = read(fd, head, sizeof head);
	close(fd);
	if (got < 4 || memcmp(head, "PK\x03\x04", 4)) {
		aah_errf(err, err_len, "%s: %s", path, not_zip_reason(head, got > 0 ? (uint64_t)got : 0));
		goto fail;
	}
	if (zip_open_file(&f->zip, path, err, err_len) || tc_setup(f, err, err_len))
		goto fail;
	return 0;
fail:
	tc_close(f);
	return -1;
}

int tc_open_mem(tc_file *f, const void *data, size_t size, const char *label, char *err, size_t err_len)
{
	memset(f, 0, sizeof *f);
	if (!(f->path = strdup(label ? label : "checkpoint"))) {
		aah_errf(err, err_len, "out of memory");
		return -1;
	}
	if (zip_open_mem(&f->zip, data, size, f->path, err, err_len) || tc_setup(f, err, err_len)) {
		tc_close(f);
		return -1;
	}
	return 0;
}

void tc_close(tc_file *f)
{
	if (!f)
		return;
	pkl_free(&f->doc);
	zip_close(&f->zip);
	free(f->storage_state);
	free(f->prefix);
	free(f->path);
	memset(f, 0, sizeof *f);
}

bool tc_dtype_is_float(pkl_dtype d)
{
	return d == PKL_DT_F32 || d == PKL_DT_F16 || d == PKL_DT_BF16 || d == PKL_DT_F64;
}

st_dtype tc_dtype_to_st(pkl_dtype d)
{
	return d == PKL_DT_F16 ? ST_F16 : d == PKL_DT_BF16 ? ST_BF16 : ST_F32;
}

int tc_tensor_bind(tc_file *f, const pkl_value *v, tc_tensor *out, char *err, size_t err_len)
{
	if (!v || v->type != PKL_TENSOR) {
		aah_errf(err, err_len, "%s: a %s where a tensor was expected", f->path, pkl_type_name(v));
		return -1;
	}
	const pkl_tensor *t = v->u.tensor;
	const pkl_value *s = t->storage;
	char name[ZIP_MAX_NAME + 64];
	snprintf(name, sizeof name, "%sdata/%s", f->prefix, s->u.storage.key);
	const zip_entry *e = zip_find(&f->zip, name);
	if (!e) {
		aah_errf(err, err_len, "%s: storage record '%s' is missing", f->path, name);
		return -1;
	}
	size_t es = pkl_dtype_size(s->u.storage.dtype);
	uint64_t want = (uint64_t)s->u.storage.numel * es;
	if (e->size != want) {
		aah_errf(err, err_len, "%s: storage record '%s' holds %llu bytes; the pickle says %lld × %s = %llu "
		         "(a storage shorter or longer than its tensors)", f->path, name, (unsigned long long)e->size,
		         (long long)s->u.storage.numel, pkl_dtype_name(s->u.storage.dtype), (unsigned long long)want);
		return -1;
	}
	int32_t id = (int32_t)(e - f->zip.entries);
	uint8_t *state = &f->storage_state[id];
	if (*state == 0) {
		if (zip_entry_check(&f->zip, e, err, err_len))
			return -1;
		*state = (uint8_t)(1 + s->u.storage.dtype);
	} else if (*state != 1 + s->u.storage.dtype) {
		aah_errf(err, err_len, "%s: storage record '%s' is read both as %s and as %s", f->path, name,
		         pkl_dtype_name((pkl_dtype)(*state - 1)), pkl_dtype_name(s->u.storage.dtype));
		return -1;
	}
	memset(out, 0, sizeof *out);
	out->dtype = s->u.storage.dtype;
	out->n_dims = t->n_dims;
	memcpy(out->shape, t->shape, sizeof t->shape);
	memcpy(out->stride, t->stride, sizeof t->stride);
	out->offset = t->offset;
	out->numel = t->numel;
	out->storage = zip_entry_data(&f->zip, e);
	out->storage_numel = s->u.storage.numel;
	out->storage_id = id;
	int64_t expect = 1;
	out->contiguous = true;
	for (int32_t i = t->n_dims; i-- > 0;) {
		if (t->shape[i] != 1 && t->stride[i] != expect)
			out->contiguous = false;
		expect *= t->shape[i];
	}
	return 0;
}

/* ---- reading ---- */

static float bf16_to_f32(uint16_t h)
{
	uint32_t u = (uint32_t)h << 16;
	float x;
	memcpy(&x, &u, sizeof x);
	return x;
}

static float f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff, u;
	if (e == 0x1f)
		u = sign | 0x7f800000u | m << 13;   /* inf, NaN */
	else if (e)
		u = sign | (e + 112) << 23 | m << 13;
	else if (!m)
		u = sign;
	else {                               /* subnormal: normalise */
		e = 113;
		while (!(m & 0x400)) {
			m <<= 1;
			e--;
		}
		u = sign | e << 23 | (m & 0x3ff) << 13;
	}
	float x;
	memcpy(&x, &u, sizeof x);
	return x;
}

static float elem_f32(const uint8_t *p, pkl_dtype d)
{
	uint16_t h;
	float f;
	double g;
	switch (d) {
	case PKL_DT_F16:
		memcpy(&h, p, 2);
		return f16_to_f32(h);
	case PKL_DT_BF16:
		memcpy(&h, p, 2);
		return bf16_to_f32(h);
	case PKL_DT_F64:
		memcpy(&g, p, 8);
		return (float)g;
	default:
		memcpy(&f, p, 4);
		return f;
	}
}

/* Calls run(ctx, storage element index, count, out index) for the maximal runs of consecutive storage elements that
 * make up elements [first, first + n) of t in row-major order. */
typedef void (*run_fn)(void *ctx, int64_t at, int64_t count, int64_t out);

static void for_each_run(const tc_tensor *t, int64_t first, int64_t n, run_fn run, void *ctx)
{
	if (n <= 0)
		return;
	if (t->contiguous) {
		run(ctx, t->offset + first, n, 0);
		return;
	}
	int32_t nd = t->n_dims;
	/* the innermost dimension with stride 1 forms runs; others step one element at a time */
	int64_t inner = nd ? t->shape[nd - 1] : 1, istride = nd ? t->stride[nd - 1] : 1;
	int64_t idx[PKL_MAX_DIMS] = { 0 }, rem = first;
	for (int32_t i = nd; i-- > 0;) {
		idx[i] = rem % t->shape[i];
		rem /= t->shape[i];
	}
	int64_t done = 0;
	while (done < n) {
		int64_t at = t->offset;
		for (int32_t i = 0; i < nd; i++)
			at += idx[i] * t->stride[i];
		int64_t k;
		if (istride == 1 || inner == 1) {
			k = inner - (nd ? idx[nd - 1] : 0);
			if (k > n - done)
				k = n - done;
			run(ctx, at, k, done);
		} else {
			k = 1;
			run(ctx, at, 1, done);
		}
		done += k;
		/* advance the index by k elements (k never crosses the innermost row) */
		if (nd) {
			idx[nd - 1] += k;
			for (int32_t i = nd - 1; i > 0 && idx[i] >= t->shape[i]; i--) {
				idx[i] = 0;
				idx[i - 1]++;
			}
		}
	}
}

typedef struct read_ctx {
	const tc_tensor *t;
	st_dtype as;
	uint8_t *dst;
	size_t in_size, out_size;
	bool same;
} read_ctx;

static void read_run(void *vctx, int64_t at, int64_t count, int64_t out)
{
	read_ctx *c = vctx;
	const uint8_t *src = c->t->storage + (size_t)at * c->in_size;
	uint8_t *dst = c->dst + (size_t)out * c->out_size;
	if (c->same) {
		memcpy(dst, src, (size_t)count * c->in_size);
		return;
	}
	for (int64_t i = 0; i < count; i++) {
		float x = elem_f32(src + (size_t)i * c->in_size, c->t->dtype);
		st_convert_f32(dst + (size_t)i * c->out_size, c->as, &x, 1);
	}
}

void tc_tensor_read(const tc_tensor *t, st_dtype as, void *dst, int64_t first, int64_t n)
{
	read_ctx c = { .t = t, .as = as, .dst = dst, .in_size = pkl_dtype_size(t->dtype),
		       .out_size = as == ST_F32 ? 4 : 2 };
	c.same = t->dtype != PKL_DT_F64 && tc_dtype_to_st(t->dtype) == as;
	for_each_run(t, first, n, read_run, &c);
}
