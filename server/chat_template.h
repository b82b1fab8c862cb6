/* server/chat_template.h — the model's chat template: where it comes from (a configured file, the model directory's
 * chat_template.jinja or tokenizer_config.json, a GGUF's tokenizer.chat_template), parsed once at start-up by the
 * Jinja2 interpreter (server/jinja/jinja.h), with the bos_token and eos_token it is rendered with. */
#ifndef AAH_SERVER_CHAT_TEMPLATE_H
#define AAH_SERVER_CHAT_TEMPLATE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "models/tokenizer.h"
#include "server/jinja/jinja.h"
#include "server/tool_calls.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct chat_template chat_template;

/* Finds and parses the template: `file` when not empty (--chat-template / chat_template in aahd.conf), else
 * model_dir's chat_template.jinja, else the chat_template of model_dir's tokenizer_config.json (a string, or the list
 * of {"name", "template"} whose "default" is taken). bos_token and eos_token come from tokenizer_config.json
 * (a string or {"content": …}; null: none), else from tok's BOS and EOS (tok may be NULL). Returns 0 with *out the
 * template, or NULL when the model has none and none is configured; -1 with err ("FILE: line L, column C: …" for a
 * syntax error, or why a file cannot be read). Free with chat_template_free. */
int chat_template_load(const char *file, const char *model_dir, const tokenizer *tok, chat_template **out, char *err,
                       size_t err_len);
/* The hook for a template that arrives as a string (a GGUF's tokenizer.chat_template, read by the GGUF loader):
 * parses src (len bytes, not kept); origin names where it came from, for /v1/models and the log; bos and eos may be
 * NULL (none). NULL with err as above. */
chat_template *chat_template_from_string(const char *src, size_t len, const char *origin, const char *bos,
                                         const char *eos, char *err, size_t err_len);
void chat_template_free(chat_template *t);

/* Where the template came from: "--chat-template FILE", "MODEL/tokenizer_config.json", … */
const char *chat_template_origin(const chat_template *t);

/* Whether the template's source names the developer role (else chat requests render developer messages as system). */
bool chat_template_knows_developer(const chat_template *t);

/* The tool-call format the template's source writes (tool_format_from_template): what tool_call_parser = auto takes. */
tool_format chat_template_tool_format(const chat_template *t);

/* Renders t with vars (chat_request's: messages, add_generation_prompt, tools, the request's chat_template_kwargs)
 * plus bos_token and eos_token, within limits (NULL: jinja's defaults). jinja_render's contract: on JINJA_OK *out is
 * malloc'd (caller frees). Safe from several threads at once. */
jinja_status chat_template_render(const chat_template *t, const json_t *vars, const jinja_limits *limits, char **out,
                                  size_t *out_len, char *err, size_t err_len);

#ifdef __cplusplus
}
#endif
#endif
