/* tools/eval/dataset.c — JSONL benchmark files and their layout checks (see dataset.h). */
#include "tools/eval/dataset.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/errf.h"
#include "tools/eval/util.h"

json_t *eval_doc_get(const json_t *doc, const char *path)
{
	const json_t *v = doc;
	const char *p = path;
	while (v && *p) {
		const char *dot = strchr(p, '.');
		size_t n = dot ? (size_t)(dot - p) : strlen(p);
		if (!json_is_object(v))
			return NULL;
		char key[128];
		if (n >= sizeof key)
			return NULL;
		memcpy(key, p, n);
		key[n] = 0;
		v = json_object_get(v, key);
		p += n + (dot ? 1 : 0);
	}
	return (json_t *)v;
}

const char *eval_doc_str(const json_t *doc, const char *path)
{
	const char *s = json_string_value(eval_doc_get(doc, path));
	return s ? s : "";
}

/* NULL when v fits f, else what was expected. */
static const char *field_mismatch(const eval_field *f, const json_t *v, char *buf, size_t n)
{
	switch (f->kind) {
	case EVAL_FIELD_STRING:
		return json_is_string(v) ? NULL : "a string";
	case EVAL_FIELD_STRING_OR_NULL:
		return json_is_string(v) || json_is_null(v) ? NULL : "a string or null";
	case EVAL_FIELD_INT:
		return json_is_integer(v) ? NULL : "an integer";
	case EVAL_FIELD_INT_OR_DIGITS:
		if (json_is_integer(v))
			return NULL;
		if (json_is_string(v)) {
			const char *s = json_string_value(v);
			bool ok = *s != 0 && strlen(s) < 10;
			for (const char *p = s; ok && *p; p++)
				ok = *p >= '0' && *p <= '9';
			if (ok)
				return NULL;
		}
		return "an integer (or a string of digits)";
	case EVAL_FIELD_STRING_ARRAY: {
		bool ok = json_is_array(v);
		size_t count = ok ? json_array_size(v) : 0;
		for (size_t i = 0; ok && i < count; i++)
			ok = json_is_string(json_array_get(v, i));
		ok = ok && (int64_t)count >= f->min_items && (f->max_items == 0 || (int64_t)count <= f->max_items);
		if (ok)
			return NULL;
		if (f->max_items == f->min_items)
			snprintf(buf, n, "an array of %d strings", f->min_items);
		else if (f->max_items == 0)
			snprintf(buf, n, "an array of at least %d strings", f->min_items);
		else
			snprintf(buf, n, "an array of %d to %d strings", f->min_items, f->max_items);
		return buf;
	}
	case EVAL_FIELD_OBJECT:
		return json_is_object(v) ? NULL : "an object";
	default:
		return NULL;
	}
}

static int check_doc(const json_t *doc, const eval_field *layout, eval_doc_check check, char *msg, size_t n)
{
	char expect[96];
	for (const eval_field *f = layout; f && f->name; f++) {
		json_t *v = eval_doc_get(doc, f->name);
		if (!v) {
			if (f->optional)
				continue;
			snprintf(msg, n, "missing field '%s'", f->name);
			return -1;
		}
		const char *want = field_mismatch(f, v, expect, sizeof expect);
		if (want) {
			if (json_is_array(v) && f->kind == EVAL_FIELD_STRING_ARRAY)
				snprintf(msg, n, "field '%s': expected %s (found an array of %zu)", f->name, want, json_array_size(v));
			else
				snprintf(msg, n, "field '%s': expected %s (found %s)", f->name, want, aah_json_kind(v));
			return -1;
		}
	}
	if (check) {
		char field[64] = "", what[256] = "";
		if (check(doc, field, sizeof field, what, sizeof what) != 0) {
			snprintf(msg, n, "field '%s': %s", field, what);
			return -1;
		}
	}
	return 0;
}

int eval_docs_parse(eval_docs *out, const char *name, const char *data, size_t len, const eval_field *layout,
                    eval_doc_check check, char *err, size_t errlen)
{
	memset(out, 0, sizeof *out);
	int64_t cap = 0;
	size_t at = 0;
	if (len >= 3 && !memcmp(data, "\xEF\xBB\xBF", 3))
		at = 3;
	for (int64_t line = 1; at < len; line++) {
		const char *nl = memchr(data + at, '\n', len - at);
		size_t end = nl ? (size_t)(nl - data) : len;
		size_t n = end - at;
		if (n && data[at + n - 1] == '\r')
			n--;
		const char *s = data + at;
		at = end + 1;
		bool blank = true;
		for (size_t i = 0; i < n && blank; i++)
			blank = s[i] == ' ' || s[i] == '\t';
		if (blank)
			continue;
		json_error_t je;
		json_t *doc = json_loadb(s, n, JSON_REJECT_DUPLICATES, &je);
		char msg[512];
		if (!doc || !json_is_object(doc)) {
			if (doc)
				snprintf(msg, sizeof msg, "expected a JSON object, found %s", aah_json_kind(doc));
			else
				snprintf(msg, sizeof msg, "not JSON: %s (column %d)", je.text, je.column);
			json_decref(doc);
			snprintf(err, errlen, "%s:%lld: %s", name, (long long)line, msg);
			eval_docs_free(out);
			return -1;
		}
		if (check_doc(doc, layout, check, msg, sizeof msg) != 0) {
			json_decref(doc);
			snprintf(err, errlen, "%s:%lld: %s", name, (long long)line, msg);
			eval_docs_free(out);
			return -1;
		}
		if (out->n == cap) {
			cap = cap ? cap * 2 : 64;
			out->doc = xrealloc(out->doc, (size_t)cap * sizeof *out->doc);
			out->line = xrealloc(out->line, (size_t)cap * sizeof *out->line);
		}
		out->doc[out->n] = doc;
		out->line[out->n] = line;
		out->n++;
	}
	return 0;
}

int eval_docs_read(eval_docs *out, const char *path, const eval_field *layout, eval_doc_check check, char *err,
                   size_t errlen)
{
	size_t len;
	char *data = eval_read_file(path, &len, err, errlen);
	if (!data) {
		memset(out, 0, sizeof *out);
		return -1;
	}
	int rc = eval_docs_parse(out, path, data, len, layout, check, err, errlen);
	free(data);
	return rc;
}

void eval_docs_free(eval_docs *d)
{
	for (int64_t i = 0; i < d->n; i++)
		json_decref(d->doc[i]);
	free(d->doc);
	free(d->line);
	memset(d, 0, sizeof *d);
}
