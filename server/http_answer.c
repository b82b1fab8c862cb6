/* server/http_answer.c — see http_answer.h: the front's own responses, in the shape of the API's (http.c) errors. */
#include "server/http_answer.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *reason(int s)
{
	switch (s) {
	case 400: return "Bad Request";
	case 408: return "Request Timeout";
	case 413: return "Content Too Large";
	case 414: return "URI Too Long";
	case 429: return "Too Many Requests";
	case 431: return "Request Header Fields Too Large";
	case 501: return "Not Implemented";
	case 503: return "Service Unavailable";
	case 505: return "HTTP Version Not Supported";
	default: return "Internal Server Error";
	}
}

size_t http_answer_format(char *dst, size_t room, int status, const char *type, const char *code, int retry,
                          const char *msg)
{
	char clean[200];
	size_t n = 0;
	for (; msg[n] && n < sizeof clean - 1; n++)   /* valid UTF-8 for the encoder, whatever a client's bytes were */
		clean[n] = (unsigned char)msg[n] >= 0x80 || (unsigned char)msg[n] < 0x20 ? '?' : msg[n];
	clean[n] = 0;
	json_t *e = json_pack("{s:{s:s,s:s,s:n,s:s}}", "error", "message", clean, "type", type, "param", "code", code);
	char *body = e ? json_dumps(e, JSON_COMPACT) : NULL;
	json_decref(e);
	const char *b = body ? body : "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\"}}";
	char retry_h[40] = "";
	if (retry > 0)
		snprintf(retry_h, sizeof retry_h, "Retry-After: %d\r\n", retry);
	char head[256];
	int hn = snprintf(head, sizeof head,
	                  "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\nConnection: close\r\n%s\r\n",
	                  status, reason(status), strlen(b), retry_h);
	size_t bl = strlen(b), total = (size_t)hn + bl;
	if (hn < 0 || total > room) {
		free(body);
		return 0;
	}
	memcpy(dst, head, (size_t)hn);
	memcpy(dst + hn, b, bl);
	free(body);
	return total;
}
