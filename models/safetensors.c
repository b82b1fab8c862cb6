/* models/safetensors.c — reads safetensors files: validates the JSON header completely, then memory-maps
 * the file read-only so that tensors are used in place. Sharded checkpoints are merged into one sorted set. */
#include "safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "models/errf.h"

/* Formats into err without ever overflowing it; err may be NULL or err_len 0. */
/* Prepends "prefix: " to the message already in err (the parser does not know the file's name). */
static void st_err_prefix(char *err, size_t err_len, const char *prefix)
{
	if (!err || !err_len) return;
	size_t n = strlen(err) + 1;
	char *tmp = malloc(n);
	if (!tmp) return;
	memcpy(tmp, err, n);
	snprintf(err, err_len, "%s: %s", prefix, tmp);
	free(tmp);
}

/* Returns a malloc'd "a/b" (caller frees), or NULL when out of memory. */
static char *st_path_join(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	char *p = malloc(la + lb + 2);
	if (!p) return NULL;
	memcpy(p, a, la);
	p[la] = '/';
	memcpy(p + la + 1, b, lb + 1);
	return p;
}

static size_t st_dtype_size(st_dtype d)
{
	return d == ST_F32 ? 4 : 2;
}

static int st_dtype_parse(const char *s, st_dtype *out)
{
	if (!strcmp(s, "F32")) { *out = ST_F32; return 0; }
	if (!strcmp(s, "F16")) { *out = ST_F16; return 0; }
	if (!strcmp(s, "BF16")) { *out = ST_BF16; return 0; }
	return -1;
}

/* "[2056, 64]" into buf, for messages. */
static const char *st_shape_str(const int64_t *shape, int32_t n, char *buf, size_t len)
{
	size_t at = 0;
	at += (size_t)snprintf(buf, len, "[");
	for (int32_t i = 0; i < n && at < len; i++)
		at += (size_t)snprintf(buf + at, len - at, i ? ", %lld" : "%lld", (long long)shape[i]);
	if (at < len) snprintf(buf + at, len - at, "]");
	return buf;
}

void st_tensors_free(st_tensor *t, int32_t n)
{
	if (!t) return;
	for (int32_t i = 0; i < n; i++) {
		free(t[i].name);
		free(t[i].owned);
	}
	free(t);
}

/* Reads one tensor entry {"dtype", "shape", "data_offsets"} into *t (name excluded). */
static int st_parse_entry(const char *name, json_t *v, size_t data_len, st_tensor *t, char *err, size_t err_len)
{
	if (!json_is_object(v)) {
		aah_errf(err, err_len, "tensor '%s': entry is not a JSON object", name);
		return -1;
	}
	json_t *jd = json_object_get(v, "dtype"), *js = json_object_get(v, "shape"),
	       *jo = json_object_get(v, "data_offsets");
	if (!json_is_string(jd)) {
		aah_errf(err, err_len, "tensor '%s': 'dtype' is missing or not a string", name);
		return -1;
	}
	if (st_dtype_parse(json_string_value(jd), &t->dtype)) {
		aah_errf(err, err_len, "tensor '%s': dtype '%.32s' is not supported (only F32, F16, BF16)", name,
		         json_string_value(jd));
		return -1;
	}
	if (!json_is_array(js)) {
		aah_errf(err, err_len, "tensor '%s': 'shape' is missing or not an array", name);
		return -1;
	}
	size_t nd = json_array_size(js);
	if (nd > ST_MAX_DIMS) {
		aah_errf(err, err_len, "tensor '%s': %zu dimensions, at most %d are supported", name, nd, ST_MAX_DIMS);
		return -1;
	}
	/* A 0-dim scalar holds one element. */
	uint64_t count = 1;
	t->n_dims = (int32_t)nd;
	for (size_t i = 0; i < nd; i++) {
		json_t *e = json_array_get(js, i);
		if (!json_is_integer(e) || json_integer_value(e) < 0) {
			aah_errf(err, err_len, "tensor '%s': shape entry %zu is not a non-negative integer", name, i);
			return -1;
		}
		t->shape[i] = (int64_t)json_integer_value(e);
		if (__builtin_mul_overflow(count, (uint64_t)t->shape[i], &count)) {
			aah_errf(err, err_len, "tensor '%s': shape element count overflows", name);
			return -1;
		}
	}
	if (!json_is_array(jo) || json_array_size(jo) != 2 || !json_is_integer(json_array_get(jo, 0)) ||
	    !json_is_integer(json_array_get(jo, 1))) {
		aah_errf(err, err_len, "tensor '%s': 'data_offsets' must be an array of two integers", name);
		return -1;
	}
	json_int_t b = json_integer_value(json_array_get(jo, 0)), e = json_integer_value(json_array_get(jo, 1));
	if (b < 0 || e < 0) {
		aah_errf(err, err_len, "tensor '%s': data_offsets [%lld, %lld] are negative", name, (long long)b, (long long)e);
		return -1;
	}
	if (b > e) {
		aah_errf(err, err_len, "tensor '%s': data_offsets [%lld, %lld] end before they begin", name, (long long)b,
		         (long long)e);
		return -1;
	}
	if ((uint64_t)e > data_len) {
		aah_errf(err, err_len, "tensor '%s': data_offsets [%lld, %lld] are outside the %zu data bytes", name,
		         (long long)b, (long long)e, data_len);
		return -1;
	}
	uint64_t nbytes;
	char sbuf[128];
	size_t esz = st_dtype_size(t->dtype);
	if (__builtin_mul_overflow(count, (uint64_t)esz, &nbytes)) {
		aah_errf(err, err_len, "tensor '%s': shape %s × %zu bytes overflows", name,
		         st_shape_str(t->shape, t->n_dims, sbuf, sizeof sbuf), esz);
		return -1;
	}
	if (nbytes != (uint64_t)(e - b)) {
		aah_errf(err, err_len, "tensor '%s': shape %s × %zu bytes = %llu but data_offsets span %llu", name,
		         st_shape_str(t->shape, t->n_dims, sbuf, sizeof sbuf), esz, (unsigned long long)nbytes,
		         (unsigned long long)(e - b));
		return -1;
	}
	t->data = (const void *)(uintptr_t)b;
	t->nbytes = (size_t)nbytes;
	return 0;
}

/* The metadata, when present, is an object of strings. */
static int st_check_metadata(json_t *m, char *err, size_t err_len)
{
	const char *k;
	json_t *v;
	if (!json_is_object(m)) {
		aah_errf(err, err_len, "'__metadata__' is not an object");
		return -1;
	}
	json_object_foreach(m, k, v) {
		if (!json_is_string(v)) {
			aah_errf(err, err_len, "'__metadata__' entry '%s' is not a string", k);
			return -1;
		}
	}
	return 0;
}

static int st_cmp_begin(const void *a, const void *b)
{
	uintptr_t x = (uintptr_t)((const st_tensor *)a)->data, y = (uintptr_t)((const st_tensor *)b)->data;
	if (x != y) return x < y ? -1 : 1;
	/* Empty spans first at a shared offset, so that one cannot hide inside another. */
	size_t p = ((const st_tensor *)a)->nbytes, q = ((const st_tensor *)b)->nbytes;
	return (p > q) - (p < q);
}

static int st_cmp_name(const void *a, const void *b)
{
	return strcmp(((const st_tensor *)a)->name, ((const st_tensor *)b)->name);
}

int st_parse_header(const char *json, size_t json_len, size_t data_len, st_tensor **out, int32_t *n_out,
                    char *err, size_t err_len)
{
	*out = NULL;
	*n_out = 0;
	if (json_len > ST_MAX_HEADER) {
		aah_errf(err, err_len, "header length %zu exceeds the %u-byte limit", json_len, ST_MAX_HEADER);
		return -1;
	}
	json_error_t jerr;
	json_t *root = json_loadb(json, json_len, JSON_REJECT_DUPLICATES, &jerr);
	if (!root) {
		if (json_error_code(&jerr) == json_error_duplicate_key)
			aah_errf(err, err_len, "header names a tensor twice: %s (column %d)", jerr.text, jerr.column);
		else
			aah_errf(err, err_len, "header is not valid JSON: %s (line %d, column %d)", jerr.text, jerr.line,
			         jerr.column);
		return -1;
	}
	if (!json_is_object(root)) {
		aah_errf(err, err_len, "header is not a JSON object");
		json_decref(root);
		return -1;
	}
	size_t cap = json_object_size(root);
	if (cap > INT32_MAX) cap = INT32_MAX;
	st_tensor *t = calloc(cap ? cap : 1, sizeof *t);
	int32_t n = 0;
	const char *name;
	json_t *v;
	if (!t) {
		aah_errf(err, err_len, "out of memory");
		goto fail;
	}
	json_object_foreach(root, name, v) {
		if (!strcmp(name, "__metadata__")) {
			if (st_check_metadata(v, err, err_len)) goto fail;
			continue;
		}
		if ((size_t)n >= cap) break;
		if (st_parse_entry(name, v, data_len, &t[n], err, err_len)) goto fail;
		t[n].name = strdup(name);
		if (!t[n].name) {
			aah_errf(err, err_len, "out of memory");
			goto fail;
		}
		n++;
	}
	/* Spans must not overlap: sorted by start, each starts at or after the previous one's end. */
	qsort(t, (size_t)n, sizeof *t, st_cmp_begin);
	for (int32_t i = 1; i < n; i++) {
		uintptr_t prev_end = (uintptr_t)t[i - 1].data + t[i - 1].nbytes, begin = (uintptr_t)t[i].data;
		if (begin < prev_end) {
			aah_errf(err, err_len, "tensor '%s': data_offsets [%zu, %zu] overlap tensor '%s' [%zu, %zu]",
			         t[i].name, (size_t)begin, (size_t)begin + t[i].nbytes, t[i - 1].name,
			         (size_t)(uintptr_t)t[i - 1].data, (size_t)prev_end);
			goto fail;
		}
	}
	/* JSON_REJECT_DUPLICATES already refuses a repeated key; sorting by name is what st_find needs. */
	qsort(t, (size_t)n, sizeof *t, st_cmp_name);
	json_decref(root);
	*out = t;
	*n_out = n;
	return 0;
fail:
	json_decref(root);
	st_tensors_free(t, n);
	return -1;
}

void st_close(st_set *s)
{
	if (!s) return;
	if (s->files) {
		for (int32_t i = 0; i < s->n_files; i++) {
			if (s->files[i].map) munmap(s->files[i].map, s->files[i].size);
			free(s->files[i].path);
		}
		free(s->files);
	}
	st_tensors_free(s->tensors, s->n_tensors);
	memset(s, 0, sizeof *s);
}

/* Maps path and appends its tensors to s (unsorted); s->files must have room for one more file.
 * On failure the file is kept in s (with whatever it holds) for st_close to release. */
static int st_add_file(st_set *s, const char *path, char *err, size_t err_len)
{
	st_file *f = &s->files[s->n_files];
	int32_t fi = s->n_files;
	memset(f, 0, sizeof *f);
	f->path = strdup(path);
	if (!f->path) {
		aah_errf(err, err_len, "%s: out of memory", path);
		return -1;
	}
	s->n_files++;

	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		aah_errf(err, err_len, "%s: cannot open: %s", path, strerror(errno));
		return -1;
	}
	struct stat sb;
	if (fstat(fd, &sb) || !S_ISREG(sb.st_mode)) {
		aah_errf(err, err_len, "%s: not a regular file", path);
		close(fd);
		return -1;
	}
	if (sb.st_size < 8) {
		aah_errf(err, err_len, "%s: file is %lld bytes, too short for a safetensors header", path,
		         (long long)sb.st_size);
		close(fd);
		return -1;
	}
	void *map = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	int map_errno = errno;
	close(fd);
	if (map == MAP_FAILED) {
		aah_errf(err, err_len, "%s: mmap failed: %s", path, strerror(map_errno));
		return -1;
	}
	f->map = map;
	f->size = (size_t)sb.st_size;

	const uint8_t *p = map;
	uint64_t hlen = 0;
	for (int i = 7; i >= 0; i--) hlen = hlen << 8 | p[i];   /* little-endian u64 */
	if (hlen > ST_MAX_HEADER || hlen > f->size - 8) {
		aah_errf(err, err_len, "%s: header length %llu is larger than %s (file is %zu bytes)", path,
		         (unsigned long long)hlen, hlen > ST_MAX_HEADER ? "the 100 MiB limit" : "the file", f->size);
		return -1;
	}
	st_tensor *t;
	int32_t n;
	size_t data_len = f->size - 8 - (size_t)hlen;
	if (st_parse_header((const char *)p + 8, (size_t)hlen, data_len, &t, &n, err, err_len)) {
		st_err_prefix(err, err_len, path);
		return -1;
	}
	if ((int64_t)s->n_tensors + n > INT32_MAX) {
		aah_errf(err, err_len, "%s: too many tensors", path);
		st_tensors_free(t, n);
		return -1;
	}
	st_tensor *all = realloc(s->tensors, ((size_t)s->n_tensors + (size_t)n + 1) * sizeof *all);
	if (!all) {
		aah_errf(err, err_len, "%s: out of memory", path);
		st_tensors_free(t, n);
		return -1;
	}
	s->tensors = all;
	const uint8_t *base = p + 8 + hlen;
	for (int32_t i = 0; i < n; i++) {
		t[i].data = base + (uintptr_t)t[i].data;
		t[i].file = fi;
		/* Kernels read elements in place, so each must sit at an address its type allows. Hugging Face pads the
		 * header to 8 bytes so that this always holds; for a file that does not, copy the tensor once. */
		size_t es = t[i].dtype == ST_F32 ? 4 : 2;
		if ((uintptr_t)t[i].data % es != 0 && t[i].nbytes > 0) {
			t[i].owned = malloc(t[i].nbytes);
			if (!t[i].owned) {
				aah_errf(err, err_len, "%s: out of memory copying misaligned tensor '%s'", path, t[i].name);
				for (int32_t j = i; j < n; j++) {
					free(t[j].name);
					t[j].name = NULL;
				}
				free(t);
				return -1;
			}
			memcpy(t[i].owned, t[i].data, t[i].nbytes);
			t[i].data = t[i].owned;
		}
		all[s->n_tensors++] = t[i];
	}
	free(t);   /* the names (and copies) moved into s->tensors */
	return 0;
}

/* Sorts the merged tensors by name and refuses a name held by two files. */
static int st_finish(st_set *s, char *err, size_t err_len)
{
	qsort(s->tensors, (size_t)s->n_tensors, sizeof *s->tensors, st_cmp_name);
	for (int32_t i = 1; i < s->n_tensors; i++) {
		if (!strcmp(s->tensors[i - 1].name, s->tensors[i].name)) {
			aah_errf(err, err_len, "%s: tensor '%s' is also in %s", s->files[s->tensors[i].file].path,
			         s->tensors[i].name, s->files[s->tensors[i - 1].file].path);
			return -1;
		}
	}
	return 0;
}

int st_open_file(st_set *s, const char *path, char *err, size_t err_len)
{
	memset(s, 0, sizeof *s);
	s->files = calloc(1, sizeof *s->files);
	if (!s->files) {
		aah_errf(err, err_len, "%s: out of memory", path);
		return -1;
	}
	if (st_add_file(s, path, err, err_len) || st_finish(s, err, err_len)) {
		st_close(s);
		return -1;
	}
	return 0;
}

static int st_cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Opens the shards named by the index's weight_map and checks that each tensor is where the map says. */
static int st_open_index(st_set *s, const char *dir, const char *index_path, char *err, size_t err_len)
{
	json_error_t jerr;
	json_t *root = json_load_file(index_path, JSON_REJECT_DUPLICATES, &jerr);
	const char **shards = NULL;
	int rc = -1;
	if (!root) {
		aah_errf(err, err_len, "%s: not valid JSON: %s (line %d, column %d)", index_path, jerr.text, jerr.line,
		         jerr.column);
		return -1;
	}
	json_t *wm = json_object_get(root, "weight_map");
	if (!json_is_object(root) || !json_is_object(wm)) {
		aah_errf(err, err_len, "%s: 'weight_map' is missing or not an object", index_path);
		goto out;
	}
	size_t n_map = json_object_size(wm), n_shards = 0;
	shards = malloc((n_map ? n_map : 1) * sizeof *shards);
	if (!shards) {
		aah_errf(err, err_len, "%s: out of memory", index_path);
		goto out;
	}
	const char *name;
	json_t *v;
	json_object_foreach(wm, name, v) {
		const char *sh = json_string_value(v);
		if (!sh) {
			aah_errf(err, err_len, "%s: tensor '%s': shard name is not a string", index_path, name);
			goto out;
		}
		/* A shard must lie in dir itself: no paths, no way up. */
		if (!*sh || strchr(sh, '/') || strstr(sh, "..") || !strcmp(sh, ".")) {
			aah_errf(err, err_len, "%s: tensor '%s': shard '%s' is not a plain file name", index_path, name, sh);
			goto out;
		}
		shards[n_shards++] = sh;
	}
	if (!n_shards) {
		aah_errf(err, err_len, "%s: 'weight_map' is empty", index_path);
		goto out;
	}
	qsort(shards, n_shards, sizeof *shards, st_cmp_str);
	size_t u = 0;
	for (size_t i = 0; i < n_shards; i++)
		if (!u || strcmp(shards[u - 1], shards[i])) shards[u++] = shards[i];
	n_shards = u;

	s->files = calloc(n_shards, sizeof *s->files);
	if (!s->files) {
		aah_errf(err, err_len, "%s: out of memory", index_path);
		goto out;
	}
	for (size_t i = 0; i < n_shards; i++) {
		char *path = st_path_join(dir, shards[i]);
		int bad = !path || st_add_file(s, path, err, err_len);
		if (!path) aah_errf(err, err_len, "%s: out of memory", index_path);
		free(path);
		if (bad) goto out;
	}
	if (st_finish(s, err, err_len)) goto out;
	json_object_foreach(wm, name, v) {
		const char *sh = json_string_value(v);
		const st_tensor *t = st_find(s, name);
		const char **at = bsearch(&sh, shards, n_shards, sizeof *shards, st_cmp_str);
		int32_t want = (int32_t)(at - shards);   /* files were added in the order of shards[] */
		if (!t) {
			aah_errf(err, err_len, "%s: tensor '%s' is missing (the index maps it to this file)",
			         s->files[want].path, name);
			goto out;
		}
		if (t->file != want) {
			aah_errf(err, err_len, "%s: tensor '%s' is missing (the index maps it here, but %s holds it)",
			         s->files[want].path, name, s->files[t->file].path);
			goto out;
		}
	}
	rc = 0;
out:
	free(shards);
	json_decref(root);
	return rc;
}

int st_open_dir(st_set *s, const char *dir, char *err, size_t err_len)
{
	memset(s, 0, sizeof *s);
	char *index = st_path_join(dir, "model.safetensors.index.json");
	char *single = st_path_join(dir, "model.safetensors");
	int rc = -1;
	struct stat sb;
	if (!index || !single) {
		aah_errf(err, err_len, "%s: out of memory", dir);
	} else if (stat(index, &sb) == 0) {
		rc = st_open_index(s, dir, index, err, err_len);
	} else if (stat(single, &sb) == 0) {
		rc = st_open_file(s, single, err, err_len);
	} else {
		aah_errf(err, err_len, "%s: no model.safetensors and no model.safetensors.index.json", dir);
	}
	if (rc) st_close(s);
	free(index);
	free(single);
	return rc;
}

const st_tensor *st_find(const st_set *s, const char *name)
{
	int32_t lo = 0, hi = s->n_tensors;
	while (lo < hi) {
		int32_t mid = lo + (hi - lo) / 2;
		int c = strcmp(s->tensors[mid].name, name);
		if (!c) return &s->tensors[mid];
		if (c < 0) lo = mid + 1;
		else hi = mid;
	}
	return NULL;
}

void st_tensor_drop_pages(const st_tensor *t)
{
	if (t->owned || t->nbytes == 0)
		return;
	const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), a = (uintptr_t)t->data, e = a + t->nbytes;
	const uintptr_t lo = (a + page - 1) / page * page, hi = e / page * page;
	if (hi > lo)
		(void)madvise((void *)lo, hi - lo, MADV_DONTNEED);   /* advice: a refusal only keeps the pages */
}
