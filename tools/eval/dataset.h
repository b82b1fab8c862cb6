/* tools/eval/dataset.h — reads benchmark items as JSONL (one JSON object per line, in the field layout of the
 * public dataset) and checks every line against its task's layout, so that a file that does not fit is refused with
 * the line and the field that are wrong, before any request is sent. */
#ifndef AAH_EVAL_DATASET_H
#define AAH_EVAL_DATASET_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum eval_field_kind {
	EVAL_FIELD_STRING,
	EVAL_FIELD_STRING_OR_NULL,
	EVAL_FIELD_INT,
	EVAL_FIELD_INT_OR_DIGITS,    /* an integer, or a string of decimal digits (HellaSwag's label in both layouts) */
	EVAL_FIELD_STRING_ARRAY,     /* min_items..max_items strings (max 0: no upper bound) */
	EVAL_FIELD_OBJECT,
	EVAL_FIELD_ANY,
} eval_field_kind;

/* One field of a layout; a dotted name ("choices.text") is a field of an object field. A layout ends with a row
 * whose name is NULL. */
typedef struct eval_field {
	const char *name;
	eval_field_kind kind;
	int32_t min_items, max_items;
	bool optional;
} eval_field;

/* A task's checks across fields (an answer key among the labels, an index within the choices): 0 when the doc is
 * fine, else -1 with the field's name and what is wrong written into field and msg. */
typedef int (*eval_doc_check)(const json_t *doc, char *field, size_t fieldlen, char *msg, size_t msglen);

typedef struct eval_docs {
	json_t **doc;    /* (n) parsed objects, owned */
	int64_t *line;   /* (n) 1-based line of each in its file */
	int64_t n;
} eval_docs;

/* Parses data (a file's bytes; name is what errors call it). Blank lines are skipped; a UTF-8 byte-order mark and
 * CR line ends are accepted. 0, or -1 with "NAME:LINE: ..." in err and nothing kept. */
int eval_docs_parse(eval_docs *out, const char *name, const char *data, size_t len, const eval_field *layout,
                    eval_doc_check check, char *err, size_t errlen);
/* eval_docs_parse of a file's contents; a missing file is an error that names it. */
int eval_docs_read(eval_docs *out, const char *path, const eval_field *layout, eval_doc_check check, char *err,
                   size_t errlen);
void eval_docs_free(eval_docs *d);

/* The value at a dotted path ("answer.aliases") or NULL. */
json_t *eval_doc_get(const json_t *doc, const char *path);
/* The string at path, "" when absent or not a string (layouts guarantee presence). */
const char *eval_doc_str(const json_t *doc, const char *path);

#ifdef __cplusplus
}
#endif
#endif
