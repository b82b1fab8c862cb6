/* tools/eval/sandbox.h — runs untrusted Python (a generated completion with its tests) in a bubblewrap sandbox:
 * new user, PID, network, IPC and UTS namespaces (no network: not even the host's loopback), socket() refused by a
 * seccomp filter, the system read-only (/usr only), a private size-limited tmpfs as the one writable directory
 * (gone with the sandbox), and CPU, memory, process, file-size and open-file limits set before exec. As root the
 * sandbox runs under a uid of its own per slot (EVAL_SANDBOX_UID_BASE + slot), so that the process limit counts its
 * processes only. A run returns once every process of the sandbox is gone and reaped: the calling process makes
 * itself a child subreaper for that. HumanEval / MBPP pass@1: the program passes when it exits 0 within the limits. */
#ifndef AAH_EVAL_SANDBOX_H
#define AAH_EVAL_SANDBOX_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define EVAL_SANDBOX_UID_BASE 2000000000u   /* bwrap maps uids below 2^31 only */

typedef struct eval_sandbox_limits {
	int32_t cpu_seconds;     /* RLIMIT_CPU of each process (code_eval's 3 s timeout, counted in CPU time) */
	double wall_seconds;     /* the whole sandbox is killed after this */
	int64_t memory_bytes;    /* RLIMIT_AS */
	int32_t processes;       /* RLIMIT_NPROC: processes of the sandbox's uid */
	int64_t disk_bytes;      /* size of the private tmpfs, and RLIMIT_FSIZE */
	int32_t open_files;      /* RLIMIT_NOFILE */
	const char *python;      /* the interpreter, under /usr (default /usr/bin/python3) */
	const char *bwrap;       /* default: bwrap from PATH */
} eval_sandbox_limits;

typedef enum eval_sandbox_status {
	EVAL_SANDBOX_PASSED,     /* exit status 0 */
	EVAL_SANDBOX_FAILED,     /* another exit status */
	EVAL_SANDBOX_TIMEOUT,    /* killed at the wall limit, or by its CPU limit */
	EVAL_SANDBOX_SIGNALED,   /* killed by another signal (e.g. memory) */
} eval_sandbox_status;

typedef struct eval_sandbox_result {
	eval_sandbox_status status;
	int32_t exit_code;       /* bwrap's (the program's) exit status; 128 + signal when a signal ended it */
	char output[4096];       /* the first bytes of stdout and stderr together */
	size_t output_len;
} eval_sandbox_result;

void eval_sandbox_default_limits(eval_sandbox_limits *l);
/* Runs program (Python source) in a fresh sandbox; slot (0 … 65535) picks its uid when root, so that concurrent
 * sandboxes never share a process limit. 0 with *out filled, or -1 with err when the sandbox itself could not run. */
int eval_sandbox_run(const eval_sandbox_limits *l, int32_t slot, const char *program, eval_sandbox_result *out,
                     char *err, size_t errlen);
/* A trial run of a known program: 0 when the sandbox works here, else -1 with what is missing. */
int eval_sandbox_check(const eval_sandbox_limits *l, char *err, size_t errlen);
const char *eval_sandbox_status_name(eval_sandbox_status s);

#ifdef __cplusplus
}
#endif
#endif
