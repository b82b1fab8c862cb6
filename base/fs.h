/* base/fs.h — what a path is, and copying a file: the questions the loaders, the importer and the evaluator ask of
 * the file system, answered once. stat() follows links, so a link to a file is a file. */
#ifndef AAH_BASE_FS_H
#define AAH_BASE_FS_H

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

bool aah_path_exists(const char *path);   /* anything at all */
bool aah_is_file(const char *path);       /* a regular file */
bool aah_is_dir(const char *path);        /* a directory */
/* Copies from's bytes into a new file to (created 0644; an existing to is an error, never overwritten). Returns 0,
 * or -1 with err naming the file that failed (err may be NULL when err_len is 0); a partial to is left for the
 * caller, who owns the folder. */
int aah_copy_file(const char *from, const char *to, char *err, size_t err_len);

#ifdef __cplusplus
}
#endif
#endif
