/* server/jinja/jinja.h — a Jinja2 interpreter for the subset chat templates use, whose output equals python3-jinja2's
 * byte for byte when rendered as Hugging Face transformers' apply_chat_template renders (an immutable sandbox,
 * trim_blocks and lstrip_blocks, the loopcontrols extension, tojson with ensure_ascii=False, raise_exception).
 * Rendering is all a template can do: no file, no import, a step limit, an output limit, a memory limit. */
#ifndef AAH_JINJA_H
#define AAH_JINJA_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct jinja_template jinja_template;

/* Parses a template. NULL with "line L, column C: what" in err on a syntax error (L, C from 1). The source need not be
 * NUL-terminated and is not kept. Free with jinja_free. */
jinja_template *jinja_parse(const char *src, size_t len, char *err, size_t err_len);
void jinja_free(jinja_template *t);

typedef struct jinja_limits {
	uint64_t max_steps;      /* statements and expression nodes evaluated; 0: the default (10,000,000) */
	size_t max_output;       /* bytes of output; 0: the default (16 MiB) */
	size_t max_memory;       /* bytes of values alive at once; 0: the default (64 MiB) */
} jinja_limits;

typedef enum jinja_status {
	JINJA_OK = 0,
	JINJA_ERR_RAISE = 1,     /* the template called raise_exception(msg): err holds msg (a client's mistake: 400) */
	JINJA_ERR_LIMIT = 2,     /* a step, output, memory or nesting limit was reached */
	JINJA_ERR_RUNTIME = 3,   /* anything else a render can meet (a type error, …): "line L, column C: what" */
	JINJA_ERR_MEMORY = 4,    /* out of memory */
} jinja_status;

/* Renders t with the variables of `vars`, a JSON object (messages, tools, add_generation_prompt, bos_token,
 * eos_token, and any chat_template_kwargs): JSON null is Python's None, an absent key is undefined. On JINJA_OK
 * *out is a malloc'd NUL-terminated string of *out_len bytes that the caller frees; otherwise *out is NULL and err
 * says why. limits may be NULL (the defaults). t is not changed: one template may be rendered by several threads.
 * A render recurses at most 512 levels deep, within 256 KiB of the calling thread's stack (more under ASan). */
jinja_status jinja_render(const jinja_template *t, const json_t *vars, const jinja_limits *limits, char **out,
                          size_t *out_len, char *err, size_t err_len);

#ifdef __cplusplus
}
#endif
#endif
