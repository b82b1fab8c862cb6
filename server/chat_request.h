/* server/chat_request.h — the body of POST /v1/chat/completions, parsed and validated: the fields it shares with
 * /v1/completions (completion_request_parse_shared), the messages checked and turned into the variables a chat
 * template renders, and the chat-only fields. No tokenizer, no template, no engine: fuzzed
 * (tests/fuzz/fuzz_chat_request.c). */
#ifndef AAH_SERVER_CHAT_REQUEST_H
#define AAH_SERVER_CHAT_REQUEST_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server/completion_request.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CHAT_MAX_MESSAGES 4096        /* more can never fit a context: a ChatML turn costs at least 5 tokens */
#define CHAT_MAX_DEPTH 16             /* nesting of a message's values (tool_calls' arguments, …) */
#define CHAT_MAX_TOP_LOGPROBS 20      /* OpenAI's bound */

/* tool_choice (docs/chat.md#tools). */
typedef enum chat_tool_choice {
	CHAT_TOOL_CHOICE_AUTO = 0,        /* the default: the model may call a tool; its calls are parsed out */
	CHAT_TOOL_CHOICE_NONE,            /* the tools are hidden from the template and nothing is parsed */
	CHAT_TOOL_CHOICE_REQUIRED,        /* one call or more (one without parallel_tool_calls), enforced by a grammar */
	CHAT_TOOL_CHOICE_NAMED,           /* {"type": "function", "function": {"name": N}}: a call to N, enforced */
} chat_tool_choice;

typedef struct chat_request {
	completion_request base;          /* the shared fields; base.prompts is left empty (the handler renders one) */
	json_t *vars;                     /* owned: {"messages": […], "add_generation_prompt": bool, "tools"?: […],
	                                   * and every key of chat_template_kwargs} — bos_token and eos_token are the
	                                   * template's to add */
	int32_t n_messages;
	bool continue_final;              /* continue_final_message: the last (assistant) message is continued, its turn
	                                   * left open (chat_request_continue_cut) */
	bool thinking_off;                /* chat_template_kwargs.enable_thinking is false: no reasoning split */
	bool logprobs;                    /* the chat shape: choices[].logprobs.content[] */
	int32_t top_logprobs;             /* 0 … CHAT_MAX_TOP_LOGPROBS */
	const json_t *tools;              /* the body's tools array (borrowed from base.json), or NULL: none or empty */
	chat_tool_choice tool_choice;
	const char *tool_name;            /* NAMED: the function's name (borrowed from base.json, one of tools') */
	bool parallel_tools;              /* parallel_tool_calls (default true): false allows one call */
	char param[64];                   /* the name of a field that failed, when it is built ("messages[3].content") */
} chat_request;

/* Parses a JSON body. Each message becomes {"role", "content", …}: content a string (an array of text parts joined
 * with "\n", as vLLM joins them for string templates), null, or absent; the other members it had (name, tool_calls,
 * tool_call_id, reasoning_content, …) are kept as they came. Returns 0, or -1 with a message in err and the field's
 * name in *param ("messages", "messages[3].content", …: a static string or out->param; NULL for the body as a
 * whole). Free with
 * chat_request_free (also after a failure). */
int chat_request_parse(chat_request *out, const char *body, size_t len, const completion_limits *lim, char *err,
                       size_t err_len, const char **param);
void chat_request_free(chat_request *r);

/* Renames every developer message to system, for a template that does not know the developer role (OpenAI's SDKs
 * send a system prompt as developer to newer models; a template written before that role would refuse or drop it). */
void chat_request_developer_as_system(chat_request *r);
/* With continue_final_message, the length of the rendered prompt to keep: up to the end of the final message's text,
 * as transformers' apply_chat_template(continue_final_message=True) cuts it (the last occurrence of the text stripped
 * of whitespace; its trailing whitespace kept where the prompt has the whole text), so that no end of turn follows.
 * *cut is len without continue_final_message. Returns 0, or -1 when the template did not render the text (it changed
 * it: the request is refused, as transformers refuses it). */
int chat_request_continue_cut(const chat_request *r, const char *prompt, size_t len, size_t *cut);

#ifdef __cplusplus
}
#endif
#endif
