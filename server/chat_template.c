/* server/chat_template.c — finds, reads and parses the chat template (see chat_template.h). Everything here runs at
 * start-up but chat_template_render, which runs on a request's thread and only reads the parsed template. */
#include "server/chat_template.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TEMPLATE_MAX_BYTES (1 << 20)   /* real templates are a few KiB; Llama 3.1's, among the longest, 5 KiB */

struct chat_template {
	jinja_template *jt;
	char origin[4200];
	char *bos, *eos;                   /* owned; NULL: none (the variable is then undefined, as in transformers) */
	bool developer;                    /* the source names the developer role */
	tool_format tools;                 /* the tool-call format the source writes (tool_format_from_template) */
};

void chat_template_free(chat_template *t)
{
	if (!t)
		return;
	jinja_free(t->jt);
	free(t->bos);
	free(t->eos);
	free(t);
}

const char *chat_template_origin(const chat_template *t)
{
	return t->origin;
}

bool chat_template_knows_developer(const chat_template *t)
{
	return t->developer;
}

tool_format chat_template_tool_format(const chat_template *t)
{
	return t->tools;
}

chat_template *chat_template_from_string(const char *src, size_t len, const char *origin, const char *bos,
                                         const char *eos, char *err, size_t err_len)
{
	chat_template *t = calloc(1, sizeof *t);
	if (!t) {
		snprintf(err, err_len, "out of memory");
		return NULL;
	}
	snprintf(t->origin, sizeof t->origin, "%s", origin);
	t->bos = bos ? strdup(bos) : NULL;
	t->eos = eos ? strdup(eos) : NULL;
	if ((bos && !t->bos) || (eos && !t->eos)) {
		snprintf(err, err_len, "out of memory");
		chat_template_free(t);
		return NULL;
	}
	/* a template that handles the role compares against its name; one that never names it would refuse it, or render
	 * it as an unknown turn */
	t->developer = memmem(src, len, "developer", 9) != NULL;
	/* src need not end in a NUL: the format is read from a terminated copy */
	char *text = malloc(len + 1);
	if (!text) {
		snprintf(err, err_len, "out of memory");
		chat_template_free(t);
		return NULL;
	}
	memcpy(text, src, len);
	text[len] = '\0';
	t->tools = tool_format_from_template(text);
	free(text);
	char perr[400];
	t->jt = jinja_parse(src, len, perr, sizeof perr);
	if (!t->jt) {
		snprintf(err, err_len, "the chat template of %s does not parse: %s", origin, perr);
		chat_template_free(t);
		return NULL;
	}
	return t;
}

/* The whole of a file, malloc'd (caller frees); NULL with err. */
static char *file_read(const char *path, size_t *len, char *err, size_t err_len)
{
	FILE *f = fopen(path, "rb");
	if (!f) {
		snprintf(err, err_len, "cannot open the chat template %s: %s", path, strerror(errno));
		return NULL;
	}
	char *buf = malloc(TEMPLATE_MAX_BYTES + 1);
	size_t n = buf ? fread(buf, 1, TEMPLATE_MAX_BYTES + 1, f) : 0;
	bool bad = ferror(f);
	fclose(f);
	if (!buf || bad || n > TEMPLATE_MAX_BYTES) {
		snprintf(err, err_len, "cannot read the chat template %s: %s", path,
		         !buf ? "out of memory" : bad ? "read error" : "larger than 1 MiB");
		free(buf);
		return NULL;
	}
	*len = n;
	return buf;
}

/* A special token of tokenizer_config.json: a string, or an AddedToken {"content": …}. */
static const char *token_of(const json_t *v)
{
	if (json_is_object(v))
		v = json_object_get(v, "content");
	return json_string_value(v);
}

/* bos_token or eos_token: tokenizer_config.json's when it names one (null: none), else the tokenizer's id's text. */
static const char *special_of(const json_t *cfg, const char *key, const tokenizer *tok, int32_t id)
{
	json_t *v = json_object_get(cfg, key);
	if (v)
		return token_of(v);
	return tok && id >= 0 ? tokenizer_token_text(tok, id) : NULL;
}

int chat_template_load(const char *file, const char *model_dir, const tokenizer *tok, chat_template **out, char *err,
                       size_t err_len)
{
	*out = NULL;
	char path[4096], origin[4200];
	snprintf(path, sizeof path, "%s/tokenizer_config.json", model_dir);
	json_error_t jerr;
	json_t *cfg = json_load_file(path, JSON_DECODE_INT_AS_REAL, &jerr);
	/* (reals: Llama 3 writes a 31-digit model_max_length) absent or unreadable: no template from it, no special tokens */
	const char *bos = special_of(cfg, "bos_token", tok, tok ? tokenizer_bos(tok) : -1);
	const char *eos = special_of(cfg, "eos_token", tok, tok ? tokenizer_eos(tok) : -1);
	char *src = NULL;
	size_t len = 0;
	int rc = -1;
	if (file && *file) {
		snprintf(origin, sizeof origin, "--chat-template %s", file);
		src = file_read(file, &len, err, err_len);
		if (!src)
			goto done;
	} else {
		/* transformers saves a template beside the tokenizer since 4.43, and reads it before tokenizer_config's */
		char jinja_path[4096];
		snprintf(jinja_path, sizeof jinja_path, "%s/chat_template.jinja", model_dir);
		FILE *f = fopen(jinja_path, "rb");
		if (f) {
			fclose(f);
			snprintf(origin, sizeof origin, "%s", jinja_path);
			src = file_read(jinja_path, &len, err, err_len);
			if (!src)
				goto done;
		} else {
			json_t *ct = json_object_get(cfg, "chat_template");
			if (json_is_array(ct)) {   /* [{"name": "default", "template": …}, {"name": "tool_use", …}] */
				json_t *named = NULL;
				size_t i;
				json_t *e;
				json_array_foreach(ct, i, e)
					if (json_is_string(json_object_get(e, "name")) &&
					    !strcmp(json_string_value(json_object_get(e, "name")), "default"))
						named = json_object_get(e, "template");
				if (!json_is_string(named)) {
					snprintf(err, err_len,
					         "%s: chat_template is a list of named templates without a \"default\" one; pass one "
					         "with --chat-template FILE",
					         path);
					goto done;
				}
				ct = named;
			} else if (ct && !json_is_null(ct) && !json_is_string(ct)) {
				snprintf(err, err_len, "%s: chat_template must be a string or a list of named templates", path);
				goto done;
			}
			if (!json_is_string(ct)) {   /* a base model: no template, chat refused until one is configured */
				rc = 0;
				goto done;
			}
			snprintf(origin, sizeof origin, "%s", path);
			len = json_string_length(ct);
			src = malloc(len + 1);
			if (!src) {
				snprintf(err, err_len, "out of memory");
				goto done;
			}
			memcpy(src, json_string_value(ct), len);
		}
	}
	*out = chat_template_from_string(src, len, origin, bos, eos, err, err_len);
	rc = *out ? 0 : -1;
done:
	free(src);
	json_decref(cfg);
	return rc;
}

jinja_status chat_template_render(const chat_template *t, const json_t *vars, const jinja_limits *limits, char **out,
                                  size_t *out_len, char *err, size_t err_len)
{
	*out = NULL;
	/* a shallow copy: the request's values are shared, not copied */
	json_t *all = json_copy((json_t *)vars);
	if (!all || (t->bos && json_object_set_new(all, "bos_token", json_string(t->bos)) != 0) ||
	    (t->eos && json_object_set_new(all, "eos_token", json_string(t->eos)) != 0)) {
		json_decref(all);
		snprintf(err, err_len, "out of memory");
		return JINJA_ERR_MEMORY;
	}
	jinja_status st = jinja_render(t->jt, all, limits, out, out_len, err, err_len);
	json_decref(all);
	return st;
}
