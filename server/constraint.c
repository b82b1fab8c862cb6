/* server/constraint.c — the constraint surfaces of a request, turned into GBNF (constraint.h). */
#include "server/constraint.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/grammar/json_schema.h"
#include "engine/grammar/regex.h"

void constraint_free(constraint *c)
{
	free(c->gbnf);
	memset(c, 0, sizeof *c);
}

static int fail(char *err, size_t err_len, const char **param, const char *field, const char *fmt, const char *a)
{
	*param = field;
	snprintf(err, err_len, fmt, a);
	return -1;
}

static int set_text(constraint *out, char *gbnf, const char *field, const char *kind)
{
	out->gbnf = gbnf;
	out->gbnf_len = strlen(gbnf);
	out->field = field;
	out->kind = kind;
	return 0;
}

/* A schema given as an object or as a JSON string (vLLM accepts both). */
static int from_schema(constraint *out, const json_t *v, const char *field, char *err, size_t err_len,
                       const char **param)
{
	json_t *owned = NULL;
	if (json_is_string(v)) {
		json_error_t je;
		owned = json_loadb(json_string_value(v), json_string_length(v), JSON_DECODE_ANY, &je);
		if (!owned)
			return fail(err, err_len, param, field, "'%s' is a string that is not a JSON Schema document", field);
		v = owned;
	}
	if (!json_is_object(v) && !json_is_boolean(v)) {
		json_decref(owned);
		return fail(err, err_len, param, field, "'%s' must be a JSON Schema (an object)", field);
	}
	char msg[256] = "";
	char *g = json_schema_to_gbnf(v, msg, sizeof msg);
	json_decref(owned);
	if (!g) {
		*param = field;
		snprintf(err, err_len, "'%s': %s", field, msg);
		return -1;
	}
	return set_text(out, g, field, "json_schema");
}

static int from_regex(constraint *out, const json_t *v, const char *field, char *err, size_t err_len,
                      const char **param)
{
	if (!json_is_string(v))
		return fail(err, err_len, param, field, "'%s' must be a string (a regular expression)", field);
	char msg[256] = "";
	char *g = regex_to_gbnf(json_string_value(v), json_string_length(v), msg, sizeof msg);
	if (!g) {
		*param = field;
		snprintf(err, err_len, "'%s': %s", field, msg);
		return -1;
	}
	return set_text(out, g, field, "regex");
}

#define CHOICE_MAX 4096

static int from_choice(constraint *out, const json_t *v, const char *field, char *err, size_t err_len,
                       const char **param)
{
	size_t n = json_is_array(v) ? json_array_size(v) : 0;
	if (!n || n > CHOICE_MAX) {
		*param = field;
		snprintf(err, err_len, "'%s' must be a list of 1 to %d strings", field, CHOICE_MAX);
		return -1;
	}
	const char **s = malloc(n * sizeof *s);
	size_t *len = malloc(n * sizeof *len);
	if (!s || !len) {
		free(s);
		free(len);
		return fail(err, err_len, param, field, "out of memory reading '%s'", field);
	}
	for (size_t i = 0; i < n; i++) {
		const json_t *x = json_array_get(v, i);
		if (!json_is_string(x)) {
			free(s);
			free(len);
			return fail(err, err_len, param, field, "'%s' must be a list of strings", field);
		}
		s[i] = json_string_value(x);
		len[i] = json_string_length(x);
	}
	char msg[256] = "";
	char *g = choice_to_gbnf(s, len, n, msg, sizeof msg);
	free(s);
	free(len);
	if (!g) {
		*param = field;
		snprintf(err, err_len, "'%s': %s", field, msg);
		return -1;
	}
	return set_text(out, g, field, "choice");
}

static int from_grammar(constraint *out, const json_t *v, const char *field, char *err, size_t err_len,
                        const char **param)
{
	if (!json_is_string(v) || !json_string_length(v))
		return fail(err, err_len, param, field, "'%s' must be a non-empty string of GBNF", field);
	char *g = malloc(json_string_length(v) + 1);
	if (!g)
		return fail(err, err_len, param, field, "out of memory reading '%s'", field);
	memcpy(g, json_string_value(v), json_string_length(v) + 1);
	out->gbnf = g;
	out->gbnf_len = json_string_length(v);
	out->field = field;
	out->kind = "grammar";
	return 0;
}

static int from_json_object(constraint *out, const char *field, char *err, size_t err_len, const char **param)
{
	char *g = strdup(json_object_gbnf());
	if (!g)
		return fail(err, err_len, param, field, "out of memory reading '%s'", field);
	return set_text(out, g, field, "json_object");
}

static int response_format(constraint *out, const json_t *v, char *err, size_t err_len, const char **param)
{
	const char *F = "response_format";
	const json_t *type = json_object_get(v, "type");
	if (!json_is_object(v) || !json_is_string(type))
		return fail(err, err_len, param, F, "'%s' must be an object with a string 'type'", F);
	const char *t = json_string_value(type);
	const char *key;
	json_t *x;
	json_object_foreach((json_t *)v, key, x) {
		if (!strcmp(key, "type") || (!strcmp(t, "json_schema") && !strcmp(key, "json_schema")))
			continue;
		*param = F;
		snprintf(err, err_len, "'response_format' of type '%.32s' has an unknown field '%.64s'", t, key);
		return -1;
	}
	if (!strcmp(t, "text"))
		return 0;
	if (!strcmp(t, "json_object"))
		return from_json_object(out, F, err, err_len, param);
	if (strcmp(t, "json_schema")) {
		*param = F;
		snprintf(err, err_len, "'response_format' type '%.32s' is not supported (text, json_object, json_schema)",
		         t);
		return -1;
	}
	const json_t *js = json_object_get(v, "json_schema");
	if (!json_is_object(js))
		return fail(err, err_len, param, F, "'%s' of type json_schema needs a 'json_schema' object", F);
	json_object_foreach((json_t *)js, key, x) {
		if (!strcmp(key, "name") || !strcmp(key, "description") || !strcmp(key, "schema") || !strcmp(key, "strict"))
			continue;
		*param = F;
		snprintf(err, err_len, "'response_format.json_schema' has an unknown field '%.64s'", key);
		return -1;
	}
	const json_t *strict = json_object_get(js, "strict");
	if (strict && !json_is_boolean(strict) && !json_is_null(strict))
		return fail(err, err_len, param, F, "'%s.json_schema.strict' must be a boolean", F);
	const json_t *name = json_object_get(js, "name");
	if (name && !json_is_string(name))
		return fail(err, err_len, param, F, "'%s.json_schema.name' must be a string", F);
	const json_t *schema = json_object_get(js, "schema");
	if (!schema)
		return fail(err, err_len, param, F, "'%s.json_schema.schema' is missing", F);
	return from_schema(out, schema, F, err, err_len, param);
}

static int structured_outputs(constraint *out, const json_t *v, char *err, size_t err_len, const char **param)
{
	const char *F = "structured_outputs";
	if (!json_is_object(v))
		return fail(err, err_len, param, F, "'%s' must be an object", F);
	const char *key;
	json_t *x;
	const char *which = NULL;
	json_object_foreach((json_t *)v, key, x) {
		if (json_is_null(x))
			continue;
		if (!strcmp(key, "json") || !strcmp(key, "regex") || !strcmp(key, "choice") || !strcmp(key, "grammar") ||
		    (!strcmp(key, "json_object") && json_is_true(x))) {
			if (which) {
				*param = F;
				snprintf(err, err_len, "'structured_outputs' gives both '%s' and '%.32s': one constraint at a time",
				         which, key);
				return -1;
			}
			which = !strcmp(key, "json") ? "json" : !strcmp(key, "regex") ? "regex" : !strcmp(key, "choice") ?
			        "choice" : !strcmp(key, "grammar") ? "grammar" : "json_object";
			continue;
		}
		/* the options that change nothing here */
		if ((!strcmp(key, "json_object") && json_is_false(x)) || (!strcmp(key, "disable_fallback") &&
		    json_is_boolean(x)) || (!strcmp(key, "disable_any_whitespace") && json_is_false(x)) ||
		    (!strcmp(key, "disable_additional_properties") && json_is_false(x)))
			continue;
		*param = F;
		if (!strcmp(key, "whitespace_pattern") || !strcmp(key, "structural_tag") ||
		    !strcmp(key, "disable_any_whitespace") || !strcmp(key, "disable_additional_properties"))
			snprintf(err, err_len, "'structured_outputs.%s' is not supported (docs/structured-output.md)", key);
		else
			snprintf(err, err_len, "'structured_outputs' has an unknown field '%.64s'", key);
		return -1;
	}
	if (!which)
		return fail(err, err_len, param, F, "'%s' names no constraint (json, regex, choice, grammar or json_object)",
		            F);
	const json_t *c = json_object_get(v, which);
	if (!strcmp(which, "json"))
		return from_schema(out, c, F, err, err_len, param);
	if (!strcmp(which, "regex"))
		return from_regex(out, c, F, err, err_len, param);
	if (!strcmp(which, "choice"))
		return from_choice(out, c, F, err, err_len, param);
	if (!strcmp(which, "grammar"))
		return from_grammar(out, c, F, err, err_len, param);
	return from_json_object(out, F, err, err_len, param);
}

int constraint_parse(const json_t *body, constraint *out, char *err, size_t err_len, const char **param)
{
	memset(out, 0, sizeof *out);
	static const char *const fields[] = { "response_format", "structured_outputs", "guided_json", "guided_regex",
	                                      "guided_choice", "guided_grammar", "grammar", "json_schema" };
	const char *given = NULL;
	for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
		const json_t *v = json_object_get(body, fields[i]);
		if (!v || json_is_null(v))
			continue;
		if (!strcmp(fields[i], "response_format") && json_is_object(v) &&
		    json_is_string(json_object_get(v, "type")) && !strcmp(json_string_value(json_object_get(v, "type")),
		    "text") && json_object_size(v) == 1)
			continue;   /* plain text constrains nothing */
		if (given) {
			*param = fields[i];
			snprintf(err, err_len, "'%s' and '%s' both constrain the output: give one", given, fields[i]);
			return -1;
		}
		given = fields[i];
	}
	/* the options of vLLM's guided_* that change nothing, or that are not supported */
	const json_t *ws = json_object_get(body, "guided_whitespace_pattern");
	if (ws && !json_is_null(ws))
		return fail(err, err_len, param, "guided_whitespace_pattern", "'%s' is not supported: the JSON grammars "
		            "allow a fixed, bounded whitespace (docs/structured-output.md)", "guided_whitespace_pattern");
	const json_t *be = json_object_get(body, "guided_decoding_backend");
	if (be && !json_is_null(be) && !json_is_string(be))
		return fail(err, err_len, param, "guided_decoding_backend", "'%s' must be a string", "guided_decoding_backend");
	if (!given)
		return 0;
	const json_t *v = json_object_get(body, given);
	if (!strcmp(given, "response_format"))
		return response_format(out, v, err, err_len, param);
	if (!strcmp(given, "structured_outputs"))
		return structured_outputs(out, v, err, err_len, param);
	if (!strcmp(given, "guided_json") || !strcmp(given, "json_schema"))
		return from_schema(out, v, given, err, err_len, param);
	if (!strcmp(given, "guided_regex"))
		return from_regex(out, v, given, err, err_len, param);
	if (!strcmp(given, "guided_choice"))
		return from_choice(out, v, given, err, err_len, param);
	return from_grammar(out, v, given, err, err_len, param);
}
