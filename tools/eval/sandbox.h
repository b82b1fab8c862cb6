/* tools/eval/sandbox.h — runs untrusted Python (a generated completion with its tests) as Hugging Face evaluate's
 * code_eval runs it (code_eval_driver.c: exec in fresh globals under its reliability_guard and wall-clock limit;
 * passed means code_eval's result "passed", never an exit status), confined by the strongest sandbox the place
 * allows:
 * - bwrap: bubblewrap with new user, PID, network, IPC and UTS namespaces (no network: not even the host's loopback),
 *   socket() refused by a seccomp filter, the system read-only (/usr only), a fresh /proc and /dev, a private
 *   size-limited tmpfs as the one writable directory (gone with the sandbox);
 * - bwrap-noproc: the same without /proc, where a fresh one cannot be mounted (an unprivileged container or pod whose
 *   /proc has masked paths, a nested sandbox);
 * - process: where no namespace can be made (a chroot, a container without user namespaces): a plain process in a
 *   private 0700 directory of its own, seccomp's socket() filter when the kernel allows it, under its own uid as root;
 * - none: only code_eval's own guard (--sandbox none, an explicit and logged choice).
 * Every mode but none sets CPU, memory, process, file-size and open-file limits before exec. As root the program runs
 * under a uid of its own per slot (eval_sandbox_slot_uid), so that the process limit counts its processes only and a
 * sweep of a slot's uid kills nothing else — also not another aah-eval's programs on the same machine: each process
 * claims a block of 256 uids of its own (an exclusive lock file per block). A run returns once every process of it is gone and reaped: the calling process makes itself a child
 * subreaper for that. */
#ifndef AAH_EVAL_SANDBOX_H
#define AAH_EVAL_SANDBOX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define EVAL_SANDBOX_UID_BASE 2000000000u   /* bwrap maps uids below 2^31 only */
#define EVAL_SANDBOX_UID_BLOCKS 256         /* blocks of 256 slots: processes sandboxing at once on one machine */

typedef enum eval_sandbox_mode {
	EVAL_SANDBOX_BWRAP,          /* the strongest first (see above) */
	EVAL_SANDBOX_BWRAP_NO_PROC,
	EVAL_SANDBOX_PROCESS,
	EVAL_SANDBOX_NONE,
	EVAL_SANDBOX_AUTO,           /* eval_sandbox_detect picks the strongest that works here */
} eval_sandbox_mode;

typedef struct eval_sandbox_limits {
	eval_sandbox_mode mode;
	bool seccomp;            /* process mode: install the socket() filter (detect clears it where it cannot be) */
	double timeout_seconds;  /* code_eval's timeout: ITIMER_REAL inside, and join(timeout + 1) (default 3) */
	int32_t cpu_seconds;     /* RLIMIT_CPU of each process: a backstop, above the wall limit */
	double wall_seconds;     /* the whole sandbox is killed after this (above timeout + 1: start-up time) */
	int64_t memory_bytes;    /* RLIMIT_AS */
	int32_t processes;       /* RLIMIT_NPROC: processes of the sandbox's uid */
	int64_t disk_bytes;      /* size of the private tmpfs, and RLIMIT_FSIZE */
	int32_t open_files;      /* RLIMIT_NOFILE */
	const char *python;      /* the interpreter, under /usr (default /usr/bin/python3) */
	const char *bwrap;       /* default: bwrap from PATH */
} eval_sandbox_limits;

typedef enum eval_sandbox_status {
	EVAL_SANDBOX_PASSED,     /* code_eval's result "passed" */
	EVAL_SANDBOX_FAILED,     /* "failed: …", or the process ended without a result */
	EVAL_SANDBOX_TIMEOUT,    /* "timed out", or killed at the wall limit or by its CPU limit */
	EVAL_SANDBOX_SIGNALED,   /* killed by another signal (e.g. memory) before a result */
} eval_sandbox_status;

typedef struct eval_sandbox_result {
	eval_sandbox_status status;
	bool passed;             /* code_eval's passed: result == "passed" */
	char result[2048];       /* code_eval's result string ("timed out" when the program left none, as code_eval) */
	int32_t exit_code;       /* the process's exit status; 128 + signal when a signal ended it */
	char output[4096];       /* the first bytes of stdout and stderr together */
	size_t output_len;
} eval_sandbox_result;

extern const char eval_code_eval_driver[];   /* code_eval_driver.c */

/* Defaults: mode AUTO, code_eval's 3 s, 1 GiB, 32 processes, 64 MiB of disk, 64 open files. */
void eval_sandbox_default_limits(eval_sandbox_limits *l);
/* Sets the code_eval timeout and the limits that follow from it (wall = timeout + 1 + start-up, CPU above it). */
void eval_sandbox_set_timeout(eval_sandbox_limits *l, double timeout_seconds);
/* Runs program (Python source) in a fresh sandbox of l->mode (not AUTO); slot (0 … 65535) picks its uid when root,
 * so that concurrent sandboxes never share a process limit. 0 with *out filled, or -1 with err when the sandbox
 * itself could not run. */
int eval_sandbox_run(const eval_sandbox_limits *l, int32_t slot, const char *program, eval_sandbox_result *out,
                     char *err, size_t errlen);
/* A trial run of a known program in l->mode: 0 when it works here, else -1 with what is missing. */
int eval_sandbox_check(const eval_sandbox_limits *l, char *err, size_t errlen);
/* The uid slot's programs run under as root: EVAL_SANDBOX_UID_BASE + 256 · block + (slot mod 256), where block is
 * this process's, claimed on first use by an exclusive lock on TMPDIR-independent /tmp/aah-eval-uids.BLOCK.lock (held
 * until the process exits), so that two processes never share a uid. (uid_t)-1 when every block is taken. */
uint32_t eval_sandbox_slot_uid(int32_t slot);
/* Once at start: for AUTO, the strongest mode that works here into l->mode (and l->seccomp); for an explicit mode, a
 * trial of it. note gets one line for the log: the mode and, when weaker than bwrap, the cause that ruled the
 * stronger ones out. 0, or -1 with err when no mode (or not the one asked for) works. */
int eval_sandbox_detect(eval_sandbox_limits *l, char *note, size_t notelen, char *err, size_t errlen);
const char *eval_sandbox_status_name(eval_sandbox_status s);
const char *eval_sandbox_mode_name(eval_sandbox_mode m);   /* bwrap, bwrap-noproc, process, none, auto */
int eval_sandbox_mode_parse(const char *name, eval_sandbox_mode *out);   /* 0, or -1 for an unknown name */

#ifdef __cplusplus
}
#endif
#endif
