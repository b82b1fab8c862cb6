/* tools/convert/zip_reader.h — a strict reader of the zip archives torch.save writes (PyTorch's "zip file format"): stored
 * entries only, every header cross-checked, names that could leave a folder refused; entries are used in place. */
#ifndef AAH_ZIP_READER_H
#define AAH_ZIP_READER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ZIP_MAX_ENTRIES (1 << 20)
#define ZIP_MAX_NAME 1024

typedef struct zip_entry {
	char *name;                  /* owned, NUL-terminated, validated (see zip_open_mem) */
	uint64_t header_offset;      /* its local header */
	uint64_t data_offset;        /* its bytes: [data_offset, data_offset + size) of the archive */
	uint64_t size;
	uint32_t crc32;              /* as the central directory records it */
} zip_entry;

typedef struct zip_archive {
	char *label;                 /* owned: the path, or the caller's label, for messages */
	const uint8_t *data;         /* the whole archive (the mapping, or the caller's buffer) */
	uint64_t size;
	void *map;                   /* owned mapping (zip_open_file), else NULL */
	zip_entry *entries;          /* owned, in central-directory order */
	int32_t n_entries;
	const zip_entry **by_name;   /* owned: the entries sorted by name, for zip_find */
} zip_archive;

/* Reads the archive in data[0, size) (the caller keeps it alive and unchanged until zip_close). label names it in
 * messages. Checks, refusing with a message that names the entry: the end-of-central-directory record (zip64 too)
 * sits at the end and agrees with the directory; one disk; at most ZIP_MAX_ENTRIES entries; every entry stored
 * (method 0: torch never compresses, so a compressed entry — the stuff of zip bombs — is refused, not inflated),
 * unencrypted, with equal compressed and uncompressed sizes that end inside the archive before the central
 * directory; its local header agrees on the name; names of 1..ZIP_MAX_NAME bytes with no NUL, control character,
 * backslash, leading '/', empty, '.' or '..' component; no two entries share a name or overlap. CRCs are not
 * checked here (zip_entry_check does). Returns 0, or -1 with err. *z is zeroed first; zip_close frees it. */
int zip_open_mem(zip_archive *z, const void *data, uint64_t size, const char *label, char *err, size_t err_len);
/* Maps path read-only and reads it as zip_open_mem does. */
int zip_open_file(zip_archive *z, const char *path, char *err, size_t err_len);
/* Frees everything zip_open_* made (the mapping too). Safe on a zeroed or failed archive. */
void zip_close(zip_archive *z);

/* The entry named name, or NULL (a binary search: archives may hold a million entries). */
const zip_entry *zip_find(const zip_archive *z, const char *name);
/* The entry's bytes, in place (size bytes). */
const uint8_t *zip_entry_data(const zip_archive *z, const zip_entry *e);
/* Computes the entry's CRC-32 and compares it with the directory's. Returns 0, or -1 with err naming it. */
int zip_entry_check(const zip_archive *z, const zip_entry *e, char *err, size_t err_len);

/* CRC-32 (IEEE 802.3, the zip polynomial) of p[0, n), continuing from crc (0 to start). */
uint32_t zip_crc32(uint32_t crc, const void *p, size_t n);

#ifdef __cplusplus
}
#endif
#endif
