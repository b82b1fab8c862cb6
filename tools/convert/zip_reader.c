/* tools/convert/zip_reader.c — reads the zip archives torch.save writes. Written here rather than through libzip because
 * those archives need very little (stored entries, a zip64 end record) and everything else should be refused: a
 * compressed entry, overlapping entries, names that climb out of a folder, headers that disagree. */
#include "tools/convert/zip_reader.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "models/errf.h"

#define SIG_LOCAL 0x04034b50u
#define SIG_CENTRAL 0x02014b50u
#define SIG_EOCD 0x06054b50u
#define SIG_EOCD64 0x06064b50u
#define SIG_LOCATOR64 0x07064b50u

static uint16_t rd16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t rd32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t rd64(const uint8_t *p)
{
	return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32;
}

/* ---- CRC-32: zlib's (the zip polynomial, and the same pre- and post-conditioning) ---- */

uint32_t zip_crc32(uint32_t crc, const void *p, size_t n)
{
	return (uint32_t)crc32_z(crc, p, n);
}

/* ---- names ---- */

/* 0 when name (n bytes, not NUL-terminated) is a safe relative path; else -1 and why. */
static int name_check(const uint8_t *name, size_t n, const char **why)
{
	if (n == 0 || n > ZIP_MAX_NAME) {
		*why = "an empty or over-long name";
		return -1;
	}
	if (name[0] == '/') {
		*why = "an absolute path";
		return -1;
	}
	size_t start = 0;
	for (size_t i = 0; i <= n; i++) {
		if (i < n) {
			uint8_t c = name[i];
			if (c < 0x20 || c == 0x7f) {
				*why = "a control character or NUL in its name";
				return -1;
			}
			if (c == '\\') {
				*why = "a backslash in its name";
				return -1;
			}
			if (c != '/')
				continue;
		}
		size_t len = i - start;
		/* a trailing '/' (a folder entry) leaves an empty last component, which is allowed */
		if ((len == 0 && i < n) || (len == 1 && name[start] == '.') ||
		    (len == 2 && name[start] == '.' && name[start + 1] == '.')) {
			*why = "an empty, '.' or '..' path component";
			return -1;
		}
		start = i + 1;
	}
	return 0;
}

static int cmp_name(const void *a, const void *b)
{
	return strcmp((*(const zip_entry *const *)a)->name, (*(const zip_entry *const *)b)->name);
}

static int cmp_offset(const void *a, const void *b)
{
	uint64_t x = (*(const zip_entry *const *)a)->header_offset, y = (*(const zip_entry *const *)b)->header_offset;
	return x < y ? -1 : x > y;
}

/* ---- the end records ---- */

typedef struct zip_end {
	uint64_t n_entries, cd_offset, cd_size;
	uint64_t end_of_cd;          /* where the central directory must end: the first end record */
} zip_end;

static int find_end(const zip_archive *z, zip_end *e, char *err, size_t err_len)
{
	const uint8_t *d = z->data;
	if (z->size < 22) {
		aah_errf(err, err_len, "%s: %llu bytes: too short to be a zip archive (truncated?)", z->label,
		         (unsigned long long)z->size);
		return -1;
	}
	/* The end record is the last 22 bytes plus its comment; search back over the longest comment possible. */
	uint64_t lo = z->size > 22 + 65535 ? z->size - 22 - 65535 : 0, pos = z->size - 22;
	for (;; pos--) {
		if (rd32(d + pos) == SIG_EOCD && rd16(d + pos + 20) == z->size - pos - 22)
			break;
		if (pos == lo) {
			aah_errf(err, err_len, "%s: no end-of-central-directory record: not a zip archive, or truncated",
			         z->label);
			return -1;
		}
	}
	const uint8_t *r = d + pos;
	uint32_t disk = rd16(r + 4), cd_disk = rd16(r + 6);
	uint64_t n_disk = rd16(r + 8), n_total = rd16(r + 10), cd_size = rd32(r + 12), cd_off = rd32(r + 16);
	e->end_of_cd = pos;
	if (pos >= 20 && rd32(d + pos - 20) == SIG_LOCATOR64) {
		const uint8_t *l = d + pos - 20;
		uint64_t off64 = rd64(l + 8);
		if (rd32(l + 4) != 0 || rd32(l + 16) > 1) {
			aah_errf(err, err_len, "%s: a multi-disk archive is not supported", z->label);
			return -1;
		}
		if (off64 > pos - 20 || pos - 20 - off64 < 56 || rd32(d + off64) != SIG_EOCD64) {
			aah_errf(err, err_len, "%s: the zip64 end record the locator points to is missing or truncated",
			         z->label);
			return -1;
		}
		const uint8_t *r64 = d + off64;
		uint64_t rec = rd64(r64 + 4);
		if (rec < 44 || rec > pos - 20 - off64 - 12) {
			aah_errf(err, err_len, "%s: the zip64 end record has a bad length", z->label);
			return -1;
		}
		uint32_t disk64 = rd32(r64 + 16), cd_disk64 = rd32(r64 + 20);
		uint64_t nd64 = rd64(r64 + 24), nt64 = rd64(r64 + 32), cs64 = rd64(r64 + 40), co64 = rd64(r64 + 48);
		/* the 16/32-bit fields must agree or say "see zip64" */
		if ((disk != 0xffff && disk != disk64) || (cd_disk != 0xffff && cd_disk != cd_disk64) ||
		    (n_disk != 0xffff && n_disk != nd64) || (n_total != 0xffff && n_total != nt64) ||
		    (cd_size != 0xffffffffu && cd_size != cs64) || (cd_off != 0xffffffffu && cd_off != co64)) {
			aah_errf(err, err_len, "%s: the end record and the zip64 end record disagree", z->label);
			return -1;
		}
		disk = disk64;
		cd_disk = cd_disk64;
		n_disk = nd64;
		n_total = nt64;
		cd_size = cs64;
		cd_off = co64;
		e->end_of_cd = off64;
	}
	if (disk != 0 || cd_disk != 0 || n_disk != n_total) {
		aah_errf(err, err_len, "%s: a multi-disk archive is not supported", z->label);
		return -1;
	}
	if (n_total > ZIP_MAX_ENTRIES) {
		aah_errf(err, err_len, "%s: %llu entries (more than %d)", z->label, (unsigned long long)n_total,
		         ZIP_MAX_ENTRIES);
		return -1;
	}
	if (cd_off > e->end_of_cd || cd_size != e->end_of_cd - cd_off) {
		aah_errf(err, err_len, "%s: the central directory (%llu bytes at %llu) does not end where the end record "
		         "begins (%llu): truncated or not one archive", z->label, (unsigned long long)cd_size,
		         (unsigned long long)cd_off, (unsigned long long)e->end_of_cd);
		return -1;
	}
	e->n_entries = n_total;
	e->cd_offset = cd_off;
	e->cd_size = cd_size;
	return 0;
}

/* ---- the central directory ---- */

/* Reads the zip64 extended-information extra field for the fields that are saturated. */
static int read_zip64_extra(const uint8_t *extra, size_t n, uint64_t *usize, uint64_t *csize, uint64_t *off,
                            bool need_u, bool need_c, bool need_o)
{
	size_t at = 0;
	while (at + 4 <= n) {
		uint16_t id = rd16(extra + at), len = rd16(extra + at + 2);
		if (at + 4 + len > n)
			return -1;
		if (id == 0x0001) {
			const uint8_t *f = extra + at + 4;
			size_t k = 0;
			if (need_u) {
				if (k + 8 > len) return -1;
				*usize = rd64(f + k);
				k += 8;
			}
			if (need_c) {
				if (k + 8 > len) return -1;
				*csize = rd64(f + k);
				k += 8;
			}
			if (need_o) {
				if (k + 8 > len) return -1;
				*off = rd64(f + k);
			}
			return 0;
		}
		at += 4 + (size_t)len;
	}
	return need_u || need_c || need_o ? -1 : 0;
}

/* Reads central entry i at *at (advanced past it) into e and checks its local header. */
static int read_entry(zip_archive *z, const zip_end *end, uint64_t *at, int32_t i, zip_entry *e, char *err,
                      size_t err_len)
{
	const uint8_t *d = z->data;
	uint64_t cd_end = end->cd_offset + end->cd_size;
	if (cd_end - *at < 46 || rd32(d + *at) != SIG_CENTRAL) {
		aah_errf(err, err_len, "%s: central directory entry %d is missing or truncated", z->label, (int)i);
		return -1;
	}
	const uint8_t *c = d + *at;
	uint16_t flags = rd16(c + 8), method = rd16(c + 10), nlen = rd16(c + 28), elen = rd16(c + 30),
	         clen = rd16(c + 32), disk = rd16(c + 34);
	uint32_t crc = rd32(c + 16);
	uint64_t csize = rd32(c + 20), usize = rd32(c + 24), off = rd32(c + 42);
	if (cd_end - *at - 46 < (uint64_t)nlen + elen + clen) {
		aah_errf(err, err_len, "%s: central directory entry %d runs past the directory", z->label, (int)i);
		return -1;
	}
	const uint8_t *name = c + 46;
	const char *why = NULL;
	if (name_check(name, nlen, &why)) {
		aah_errf(err, err_len, "%s: entry %d ('%.*s') has %s: refused", z->label, (int)i,
		         (int)(nlen > 200 ? 200 : nlen), (const char *)name, why);
		return -1;
	}
	e->name = malloc((size_t)nlen + 1);
	if (!e->name) {
		aah_errf(err, err_len, "%s: out of memory", z->label);
		return -1;
	}
	memcpy(e->name, name, nlen);
	e->name[nlen] = 0;
	if (read_zip64_extra(name + nlen, elen, &usize, &csize, &off, usize == 0xffffffffu, csize == 0xffffffffu,
	                     off == 0xffffffffu)) {
		aah_errf(err, err_len, "%s: entry '%s' has a malformed zip64 extra field", z->label, e->name);
		return -1;
	}
	*at += 46 + (uint64_t)nlen + elen + clen;
	if (disk != 0 && disk != 0xffff) {
		aah_errf(err, err_len, "%s: entry '%s' starts on another disk", z->label, e->name);
		return -1;
	}
	if (flags & 0x41) {
		aah_errf(err, err_len, "%s: entry '%s' is encrypted", z->label, e->name);
		return -1;
	}
	if (method != 0) {
		aah_errf(err, err_len, "%s: entry '%s' is compressed (method %u): torch.save stores entries uncompressed, "
		         "and compressed ones are refused rather than inflated", z->label, e->name, method);
		return -1;
	}
	if (csize != usize) {
		aah_errf(err, err_len, "%s: stored entry '%s' declares %llu bytes stored but %llu bytes of content", z->label,
		         e->name, (unsigned long long)csize, (unsigned long long)usize);
		return -1;
	}
	/* the local header: inside the data area, same name and method */
	if (off > end->cd_offset || end->cd_offset - off < 30 || rd32(d + off) != SIG_LOCAL) {
		aah_errf(err, err_len, "%s: entry '%s': no local header at offset %llu", z->label, e->name,
		         (unsigned long long)off);
		return -1;
	}
	const uint8_t *l = d + off;
	uint16_t lflags = rd16(l + 6), lmethod = rd16(l + 8), lnlen = rd16(l + 26), lelen = rd16(l + 28);
	uint64_t data_off = off + 30 + (uint64_t)lnlen + lelen;
	if (data_off > end->cd_offset || lnlen != nlen || memcmp(l + 30, name, nlen) != 0 || lmethod != method) {
		aah_errf(err, err_len, "%s: entry '%s': its local header disagrees with the central directory", z->label,
		         e->name);
		return -1;
	}
	/* Without a data descriptor (flag bit 3) the local header carries crc and sizes; they must agree too. */
	if (!(lflags & 0x08)) {
		uint64_t lc = rd32(l + 18), lu = rd32(l + 22);
		if (rd32(l + 14) != crc || (lc != 0xffffffffu && lc != csize) || (lu != 0xffffffffu && lu != usize)) {
			aah_errf(err, err_len, "%s: entry '%s': its local header's size or CRC disagrees with the central "
			         "directory", z->label, e->name);
			return -1;
		}
	}
	if (usize > end->cd_offset - data_off) {
		aah_errf(err, err_len, "%s: entry '%s' declares %llu bytes, which run past the archive's data (%llu bytes "
		         "left): truncated or forged", z->label, e->name, (unsigned long long)usize,
		         (unsigned long long)(end->cd_offset - data_off));
		return -1;
	}
	e->header_offset = off;
	e->data_offset = data_off;
	e->size = usize;
	e->crc32 = crc;
	return 0;
}

/* No two names alike; no entry's header or data reaching into the next one's. Keeps the by-name order. */
static int check_set(zip_archive *z, char *err, size_t err_len)
{
	int32_t n = z->n_entries;
	const zip_entry **v = malloc(sizeof(*v) * (size_t)(n ? n : 1));
	z->by_name = malloc(sizeof(*z->by_name) * (size_t)(n ? n : 1));
	if (!v || !z->by_name) {
		free(v);
		aah_errf(err, err_len, "%s: out of memory", z->label);
		return -1;
	}
	for (int32_t i = 0; i < n; i++)
		v[i] = &z->entries[i];
	int rc = 0;
	qsort(v, (size_t)n, sizeof(*v), cmp_name);
	memcpy(z->by_name, v, sizeof(*v) * (size_t)n);
	for (int32_t i = 1; i < n && !rc; i++)
		if (!strcmp(v[i - 1]->name, v[i]->name)) {
			aah_errf(err, err_len, "%s: two entries are named '%s'", z->label, v[i]->name);
			rc = -1;
		}
	qsort(v, (size_t)n, sizeof(*v), cmp_offset);
	for (int32_t i = 1; i < n && !rc; i++)
		if (v[i]->header_offset < v[i - 1]->data_offset + v[i - 1]->size) {
			aah_errf(err, err_len, "%s: entries '%s' and '%s' overlap", z->label, v[i - 1]->name, v[i]->name);
			rc = -1;
		}
	free(v);
	return rc;
}

int zip_open_mem(zip_archive *z, const void *data, uint64_t size, const char *label, char *err, size_t err_len)
{
	memset(z, 0, sizeof *z);
	z->label = strdup(label ? label : "zip");
	if (!z->label) {
		aah_errf(err, err_len, "out of memory");
		return -1;
	}
	z->data = data;
	z->size = size;
	zip_end end;
	if (find_end(z, &end, err, err_len))
		goto fail;
	if (end.n_entries > end.cd_size / 46) {
		aah_errf(err, err_len, "%s: %llu entries cannot fit in a %llu-byte central directory", z->label,
		         (unsigned long long)end.n_entries, (unsigned long long)end.cd_size);
		goto fail;
	}
	z->entries = calloc(end.n_entries ? (size_t)end.n_entries : 1, sizeof *z->entries);
	if (!z->entries) {
		aah_errf(err, err_len, "%s: out of memory", z->label);
		goto fail;
	}
	uint64_t at = end.cd_offset;
	for (uint64_t i = 0; i < end.n_entries; i++) {
		z->n_entries = (int32_t)i + 1;
		if (read_entry(z, &end, &at, (int32_t)i, &z->entries[i], err, err_len))
			goto fail;
	}
	if (at != end.cd_offset + end.cd_size) {
		aah_errf(err, err_len, "%s: the central directory holds more than the %llu entries the end record counts",
		         z->label, (unsigned long long)end.n_entries);
		goto fail;
	}
	if (check_set(z, err, err_len))
		goto fail;
	return 0;
fail:
	zip_close(z);
	return -1;
}

int zip_open_file(zip_archive *z, const char *path, char *err, size_t err_len)
{
	memset(z, 0, sizeof *z);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		aah_errf(err, err_len, "%s: %s", path, strerror(errno));
		return -1;
	}
	struct stat sb;
	if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
		aah_errf(err, err_len, "%s: not a regular file", path);
		close(fd);
		return -1;
	}
	void *map = NULL;
	if (sb.st_size > 0) {
		map = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
		if (map == MAP_FAILED) {
			aah_errf(err, err_len, "%s: mmap failed: %s", path, strerror(errno));
			close(fd);
			return -1;
		}
	}
	close(fd);
	static const uint8_t empty[1];
	if (zip_open_mem(z, map ? map : empty, (uint64_t)sb.st_size, path, err, err_len)) {
		if (map)
			munmap(map, (size_t)sb.st_size);
		return -1;
	}
	z->map = map;
	return 0;
}

void zip_close(zip_archive *z)
{
	if (!z)
		return;
	for (int32_t i = 0; i < z->n_entries; i++)
		free(z->entries[i].name);
	free(z->entries);
	free(z->by_name);
	if (z->map)
		munmap(z->map, (size_t)z->size);
	free(z->label);
	memset(z, 0, sizeof *z);
}

const zip_entry *zip_find(const zip_archive *z, const char *name)
{
	int32_t lo = 0, hi = z->by_name ? z->n_entries : 0;
	while (lo < hi) {
		int32_t mid = lo + (hi - lo) / 2;
		int c = strcmp(z->by_name[mid]->name, name);
		if (c == 0)
			return z->by_name[mid];
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

const uint8_t *zip_entry_data(const zip_archive *z, const zip_entry *e)
{
	return z->data + e->data_offset;
}

int zip_entry_check(const zip_archive *z, const zip_entry *e, char *err, size_t err_len)
{
	uint32_t crc = 0;
	const uint8_t *p = zip_entry_data(z, e);
	/* in pieces: a size_t holds any mapped size, but keep each call bounded */
	for (uint64_t done = 0; done < e->size;) {
		size_t n = e->size - done > (1u << 30) ? (1u << 30) : (size_t)(e->size - done);
		crc = zip_crc32(crc, p + done, n);
		done += n;
	}
	if (crc != e->crc32) {
		aah_errf(err, err_len, "%s: entry '%s' fails its CRC-32 check (0x%08x, the directory says 0x%08x): the "
		         "archive is corrupt", z->label, e->name, crc, e->crc32);
		return -1;
	}
	return 0;
}
