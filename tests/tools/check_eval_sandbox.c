/* tests/tools/check_eval_sandbox.c — Check suite for aah-eval's sandbox (tools/eval/sandbox, code_eval_driver): programs
 * are scored as HF evaluate's code_eval scores them (the fixtures of tests/eval/code_eval_fixtures.jsonl, which
 * harness_reference.py's copy of execute.py is held to as well: an early exit(), a __main__ block, SystemExit, a
 * subprocess, a sleep past the limit, a memory hog …) in every mode; the strongest mode that works here confines them
 * (no socket, nor the host's loopback; no writes outside its directory; a process limit; CPU, wall and memory
 * limits; nothing left behind); and in places where bubblewrap cannot mount a fresh /proc (a mount namespace whose
 * /proc has a masked entry, as a Docker container's has) or cannot make a namespace at all (a chroot), entered here
 * for real, detection falls back to bwrap-noproc and to process, says why, and still scores every fixture right.
 * Each test decides by what the program could or could not do, never by how long it took. */
#include <arpa/inet.h>
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tools/eval/sandbox.h"

#define SLOT 7

static eval_sandbox_limits limits;
static eval_sandbox_mode detected = EVAL_SANDBOX_AUTO;   /* the strongest mode that works here */
static char *fixtures;   /* tests/eval/code_eval_fixtures.jsonl, read before any test enters another root */

static void setup(void)
{
	eval_sandbox_default_limits(&limits);
	eval_sandbox_set_timeout(&limits, 20);
	limits.wall_seconds = 60;   /* generous: a loaded machine must not turn a pass into a timeout */
	limits.cpu_seconds = 30;
	if (detected == EVAL_SANDBOX_AUTO) {
		char note[2048], err[2048];
		eval_sandbox_limits l = limits;
		ck_assert_msg(eval_sandbox_detect(&l, note, sizeof note, err, sizeof err) == 0, "%s", err);
		detected = l.mode;
	}
	limits.mode = detected;
	if (!fixtures) {
		FILE *f = fopen("tests/eval/code_eval_fixtures.jsonl", "r");
		ck_assert_msg(f != NULL, "tests/eval/code_eval_fixtures.jsonl: %s", strerror(errno));
		static char buf[1 << 16];
		size_t n = fread(buf, 1, sizeof buf - 1, f);
		fclose(f);
		buf[n] = 0;
		fixtures = buf;
	}
}

static eval_sandbox_result run(const char *program)
{
	eval_sandbox_result r;
	char err[1024];
	int rc = eval_sandbox_run(&limits, SLOT, program, &r, err, sizeof err);
	ck_assert_msg(rc == 0, "the sandbox did not run: %s", err);
	return r;
}

/* Runs every fixture in limits' mode; the failures (name: what happened) into bad, their count returned. */
static int run_fixtures(char *bad, size_t cap)
{
	char line[8192];
	int n = 0, failures = 0;
	bad[0] = 0;
	eval_sandbox_limits saved = limits;
	for (const char *at = fixtures; *at;) {
		const char *nl = strchr(at, '\n');
		size_t len = nl ? (size_t)(nl - at) : strlen(at);
		snprintf(line, sizeof line, "%.*s", (int)len, at);
		at += len + (nl ? 1 : 0);
		json_error_t je;
		json_t *fx = json_loads(line, 0, &je);
		if (!fx) {
			failures++;
			snprintf(bad + strlen(bad), cap - strlen(bad), "fixture %d: %s\n", n, je.text);
			continue;
		}
		const char *name = json_string_value(json_object_get(fx, "name"));
		const char *want = json_string_value(json_object_get(fx, "result"));
		bool passed = json_is_true(json_object_get(fx, "passed"));
		eval_sandbox_set_timeout(&limits, json_number_value(json_object_get(fx, "timeout")));
		eval_sandbox_result r;
		char err[1024];
		int rc = eval_sandbox_run(&limits, SLOT, json_string_value(json_object_get(fx, "program")), &r, err, sizeof err);
		if (rc != 0 || r.passed != passed || strcmp(r.result, want) != 0) {
			failures++;
			size_t used = strlen(bad);
			snprintf(bad + used, cap - used, "%s: %s (want %s \"%s\", got %s \"%s\"; %s)\n", name,
			         rc ? err : "ran", passed ? "passed" : "not passed", want, r.passed ? "passed" : "not passed",
			         rc ? "" : r.result, rc ? "" : r.output);
		}
		limits = saved;
		json_decref(fx);
		n++;
	}
	if (n < 10) {
		failures++;
		snprintf(bad + strlen(bad), cap - strlen(bad), "only %d fixtures\n", n);
	}
	return failures;
}

START_TEST(test_pass_and_fail)
{
	eval_sandbox_result r = run("def add(a, b):\n    return a + b\n\nassert add(2, 3) == 5\nprint('ok')\n");
	ck_assert_msg(r.passed && r.status == EVAL_SANDBOX_PASSED, "%s: %s %s", eval_sandbox_status_name(r.status),
	              r.result, r.output);
	ck_assert_str_eq(r.result, "passed");
	ck_assert_str_eq(r.output, "");   /* print() goes to code_eval's swallowed stdout */
	r = run("assert 1 + 1 == 3, 'wrong'\n");
	ck_assert(!r.passed && r.status == EVAL_SANDBOX_FAILED);
	ck_assert_str_eq(r.result, "failed: wrong");
	r = run("def broken(:\n");
	ck_assert(!r.passed && r.status == EVAL_SANDBOX_FAILED);
	ck_assert_msg(!strncmp(r.result, "failed: invalid syntax", 22), "%s", r.result);
	char err[256];
	ck_assert_int_eq(eval_sandbox_check(&limits, err, sizeof err), 0);
}
END_TEST

/* code_eval's semantics, fixture by fixture, in the strongest mode here and in each weaker one */
START_TEST(test_code_eval_fixtures)
{
	char bad[16384];
	int failures = run_fixtures(bad, sizeof bad);
	ck_assert_msg(failures == 0, "mode %s:\n%s", eval_sandbox_mode_name(limits.mode), bad);
	const eval_sandbox_mode weaker[] = {EVAL_SANDBOX_BWRAP_NO_PROC, EVAL_SANDBOX_PROCESS, EVAL_SANDBOX_NONE};
	for (int i = 0; i < 3; i++) {
		if (weaker[i] < detected)
			continue;   /* bwrap-noproc where bwrap cannot run at all */
		limits.mode = weaker[i];
		char note[2048], err[2048];
		ck_assert_msg(eval_sandbox_detect(&limits, note, sizeof note, err, sizeof err) == 0, "%s", err);
		ck_assert_msg(strstr(note, eval_sandbox_mode_name(weaker[i])) != NULL, "%s", note);
		failures = run_fixtures(bad, sizeof bad);
		ck_assert_msg(failures == 0, "mode %s:\n%s", eval_sandbox_mode_name(limits.mode), bad);
	}
}
END_TEST

START_TEST(test_no_socket)
{
	/* a port listening on the host's loopback, which the program tries to reach */
	int ls = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	ck_assert_int_eq(bind(ls, (struct sockaddr *)&a, sizeof a), 0);
	ck_assert_int_eq(listen(ls, 4), 0);
	socklen_t len = sizeof a;
	getsockname(ls, (struct sockaddr *)&a, &len);
	char program[1024];
	snprintf(program, sizeof program,
	         "import socket\n"
	         "for fam, kind in [(socket.AF_INET, socket.SOCK_STREAM), (socket.AF_INET, socket.SOCK_DGRAM),\n"
	         "                  (socket.AF_UNIX, socket.SOCK_STREAM), (socket.AF_INET6, socket.SOCK_STREAM)]:\n"
	         "    try:\n"
	         "        s = socket.socket(fam, kind)\n"
	         "    except OSError as e:\n"
	         "        assert e.errno == 13, e.errno\n"
	         "        continue\n"
	         "    raise AssertionError('opened a socket %%d' %% fam)\n"
	         "try:\n"
	         "    socket.create_connection(('127.0.0.1', %d), timeout=5)\n"
	         "    raise AssertionError('connected to the host')\n"
	         "except OSError as e:\n"
	         "    pass\n",
	         ntohs(a.sin_port));
	if (limits.mode == EVAL_SANDBOX_PROCESS && !limits.seccomp)
		return;   /* nothing here can refuse a socket: the mode says so in its note */
	eval_sandbox_result r = run(program);
	close(ls);
	ck_assert_msg(r.passed, "%s %s", r.result, r.output);
}
END_TEST

START_TEST(test_writes_only_its_dir)
{
	if (limits.mode >= EVAL_SANDBOX_PROCESS)
		return;   /* without a mount namespace the program sees the host's tree (under a uid of its own as root) */
	char marker[64];
	snprintf(marker, sizeof marker, "aah-sandbox-marker-%d", (int)getpid());
	char program[2048];
	snprintf(program, sizeof program,
	         "import os, posix\n"
	         "wrote = []\n"
	         "for d in ['/', '/tmp', '/usr', '/usr/lib', '/dev', '/dev/shm', '/proc', '/sandbox/..', '/var', '/home',\n"
	         "          '/root', '/etc']:\n"
	         "    p = os.path.join(d, '%s')\n"
	         "    try:\n"
	         "        with open(p, 'w') as f:\n"
	         "            f.write('x')\n"
	         "        wrote.append(p)\n"
	         "    except OSError:\n"
	         "        pass\n"
	         "    try:\n"
	         "        os.mkdir(p + '.d')\n"
	         "        wrote.append(p + '.d')\n"
	         "    except OSError:\n"
	         "        pass\n"
	         "with open('/sandbox/%s', 'w') as f:\n"
	         "    f.write('inside')\n"
	         "os.mkdir('/sandbox/sub')\n"
	         "assert posix.getcwd().startswith('/sandbox/tmp'), posix.getcwd()\n"
	         "assert not wrote, 'wrote ' + ' '.join(wrote)\n",
	         marker, marker);
	eval_sandbox_result r = run(program);
	ck_assert_msg(r.passed, "%s %s", r.result, r.output);
	/* nothing of it on the host: not in /tmp, $TMPDIR or the working directory */
	const char *dirs[] = {"/tmp", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", "."};
	for (int i = 0; i < 3; i++) {
		char p[512];
		snprintf(p, sizeof p, "%s/%s", dirs[i], marker);
		struct stat st;
		ck_assert_msg(stat(p, &st) != 0, "%s exists on the host", p);
	}
}
END_TEST

/* Processes of the sandbox's uid (as root), or whose command line holds marker. */
static int count_processes(const char *marker)
{
	int n = 0;
	DIR *d = opendir("/proc");
	struct dirent *e;
	while ((e = readdir(d))) {
		if (e->d_name[0] < '0' || e->d_name[0] > '9')
			continue;
		char path[300], buf[4096];
		snprintf(path, sizeof path, "/proc/%s/cmdline", e->d_name);
		FILE *f = fopen(path, "rb");
		if (!f)
			continue;
		size_t k = fread(buf, 1, sizeof buf - 1, f);
		fclose(f);
		for (size_t i = 0; i < k; i++)
			if (!buf[i])
				buf[i] = ' ';
		buf[k] = 0;
		if (strstr(buf, marker))
			n++;
		struct stat st;
		snprintf(path, sizeof path, "/proc/%s", e->d_name);
		if (geteuid() == 0 && stat(path, &st) == 0 && st.st_uid == eval_sandbox_slot_uid(SLOT))
			n++;
	}
	closedir(d);
	return n;
}

START_TEST(test_fork_limit)
{
	/* code_eval's guard sets os.fork to None; posix.fork is the same call under another name, which the guard does
	 * not reach and the sandbox's process limit must. The children exec a sleeper whose command line holds a
	 * marker, so that count_processes sees any that outlive the sandbox. */
	limits.processes = 16;
	char marker[64], program[1024];
	snprintf(marker, sizeof marker, "aah-sandbox-forks-%d", (int)getpid());
	snprintf(program, sizeof program,
	         "import os, posix\n"
	         "n = 0\n"
	         "try:\n"
	         "    for _ in range(10000):\n"
	         "        if posix.fork() == 0:\n"
	         "            os.execv('/usr/bin/python3', ['python3', '-c', 'import time; time.sleep(600)', '%s'])\n"
	         "        n += 1\n"
	         "except OSError as e:\n"
	         "    os.write(1, b'forks %%d then errno %%d' %% (n, e.errno))\n"
	         "else:\n"
	         "    raise AssertionError('forked %%d times without limit' %% n)\n",
	         marker);
	if (limits.mode == EVAL_SANDBOX_NONE)
		return;
	eval_sandbox_result r = run(program);
	ck_assert_msg(r.passed, "%s: %s %s", eval_sandbox_status_name(r.status), r.result, r.output);
	int forks = -1;
	ck_assert(sscanf(r.output, "forks %d", &forks) == 1);
	ck_assert_msg(forks >= 1 && forks < 16, "%d forks", forks);
	/* the sleeping children died with the sandbox */
	ck_assert_int_eq(count_processes(marker), 0);
	/* a real fork bomb ends too (killed at its limits), and nothing of it remains */
	eval_sandbox_set_timeout(&limits, 1);
	r = run("import posix\nwhile True:\n    try:\n        posix.fork()\n    except OSError:\n        pass\n");
	ck_assert_msg(!r.passed, "%s", r.output);
	ck_assert_int_eq(count_processes(marker), 0);
}
END_TEST

START_TEST(test_time_limits)
{
	/* code_eval's own limit: ITIMER_REAL raises TimeoutException in the program */
	eval_sandbox_set_timeout(&limits, 1);
	eval_sandbox_result r = run("import time\ntime.sleep(3600)\n");
	ck_assert_msg(!r.passed && r.status == EVAL_SANDBOX_TIMEOUT, "%s %s", eval_sandbox_status_name(r.status), r.result);
	ck_assert_str_eq(r.result, "timed out");
	/* a program that silences the alarm is killed at the wall limit, and code_eval's empty result is "timed out" */
	eval_sandbox_set_timeout(&limits, 0.5);
	limits.wall_seconds = 2;
	r = run("import signal, time\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\ntime.sleep(3600)\n");
	ck_assert_msg(!r.passed && r.status == EVAL_SANDBOX_TIMEOUT, "%s (exit %d)", eval_sandbox_status_name(r.status),
	              r.exit_code);
	ck_assert_str_eq(r.result, "timed out");
	if (limits.mode == EVAL_SANDBOX_NONE)
		return;
	/* the CPU backstop */
	eval_sandbox_set_timeout(&limits, 30);
	limits.cpu_seconds = 1;
	r = run("import signal\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\nwhile True:\n    pass\n");
	ck_assert_msg(!r.passed && r.status == EVAL_SANDBOX_TIMEOUT, "%s (exit %d)", eval_sandbox_status_name(r.status),
	              r.exit_code);
}
END_TEST

START_TEST(test_memory_limit)
{
	if (limits.mode == EVAL_SANDBOX_NONE)
		return;
	limits.memory_bytes = 256ll << 20;
	eval_sandbox_result r = run("x = bytearray(1 << 30)\n");
	ck_assert_msg(!r.passed, "%s", r.result);
	ck_assert_msg(!strcmp(r.result, "failed: ") || r.status == EVAL_SANDBOX_SIGNALED, "%s", r.result);   /* MemoryError */
	if (limits.mode >= EVAL_SANDBOX_PROCESS)
		return;   /* the private directory is a tmpfs of limited size in bwrap's modes only */
	limits.disk_bytes = 1 << 20;
	r = run("try:\n    open('/sandbox/big', 'wb').write(b'x' * (8 << 20))\nexcept OSError as e:\n    pass\nelse:\n"
	        "    raise AssertionError('wrote 8 MiB into a 1 MiB directory')\n");
	ck_assert_msg(r.passed || r.status == EVAL_SANDBOX_SIGNALED, "%s: %s", eval_sandbox_status_name(r.status),
	              r.result);   /* ENOSPC, or SIGXFSZ at RLIMIT_FSIZE */
}
END_TEST

START_TEST(test_leaves_nothing)
{
	if (limits.mode == EVAL_SANDBOX_NONE)
		return;
	/* a daemon that double-forks away from the program and would live for an hour; a file in its directory */
	char marker[64];
	snprintf(marker, sizeof marker, "aah-sandbox-daemon-%d", (int)getpid());
	char program[1024];
	snprintf(program, sizeof program,
	         "import os, posix\n"
	         "open('left-behind', 'w').write('x')\n"
	         "if posix.fork() == 0:\n"
	         "    os.setsid()\n"
	         "    if posix.fork() == 0:\n"
	         "        os.execv('/usr/bin/python3', ['python3', '-c', 'import time; time.sleep(3600)', '%s'])\n"
	         "    os._exit(0)\n"
	         "os.wait()\n",
	         marker);
	eval_sandbox_result r = run(program);
	ck_assert_msg(r.passed, "%s %s", r.result, r.output);
	if (limits.mode == EVAL_SANDBOX_PROCESS && geteuid() != 0)
		return;   /* unprivileged, a process that left the group cannot be told from this user's others */
	ck_assert_int_eq(count_processes(marker), 0);
	if (limits.mode >= EVAL_SANDBOX_PROCESS)
		return;
	/* a second run sees a fresh directory: only code_eval's temporary directory, main.py read and removed */
	r = run("import os\ne = os.listdir('/sandbox')\nassert len(e) == 1 and e[0].startswith('tmp'), e\n"
	        "assert os.listdir('.') == [], os.listdir('.')\n");
	ck_assert_msg(r.passed, "%s", r.result);
}
END_TEST

START_TEST(test_bad_setup)
{
	eval_sandbox_result r;
	char err[512], note[512];
	limits.mode = EVAL_SANDBOX_BWRAP;
	limits.python = "/opt/python3";
	ck_assert_int_eq(eval_sandbox_run(&limits, 0, "pass\n", &r, err, sizeof err), -1);
	ck_assert(strstr(err, "under /usr") != NULL);
	limits.python = "/usr/bin/python3";
	limits.bwrap = "/nonexistent/bwrap";
	ck_assert_int_eq(eval_sandbox_check(&limits, err, sizeof err), -1);
	ck_assert_int_eq(eval_sandbox_detect(&limits, note, sizeof note, err, sizeof err), -1);   /* asked for, absent */
	limits.mode = EVAL_SANDBOX_AUTO;
	ck_assert_int_eq(eval_sandbox_run(&limits, 0, "pass\n", &r, err, sizeof err), -1);
	ck_assert(strstr(err, "no mode chosen") != NULL);
	/* auto without bwrap: the cause named, and a weaker mode that works */
	ck_assert_int_eq(eval_sandbox_detect(&limits, note, sizeof note, err, sizeof err), 0);
	ck_assert_msg(limits.mode == EVAL_SANDBOX_PROCESS && strstr(note, "bwrap not found"), "%s", note);
	eval_sandbox_mode m;
	ck_assert_int_eq(eval_sandbox_mode_parse("bwrap-noproc", &m), 0);
	ck_assert_int_eq(m, EVAL_SANDBOX_BWRAP_NO_PROC);
	ck_assert_int_eq(eval_sandbox_mode_parse("docker", &m), -1);
}
END_TEST

/* ---- places where bubblewrap cannot do everything, entered for real (needs root: a mount namespace of our own) */

/* In a child: enter the place (enter(dir) returns 0), detect, run the fixtures; "MODE\tNOTE\tFAILURES" into out. */
static void in_place(int (*enter)(const char *dir), const char *dir, char *out, size_t cap)
{
	int p[2];
	ck_assert_int_eq(pipe(p), 0);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		close(p[0]);
		char buf[20000] = "";
		if (unshare(CLONE_NEWNS) != 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) {
			snprintf(buf, sizeof buf, "SKIP\tno mount namespace of our own here (%s)\t", strerror(errno));
		} else if (enter(dir) != 0) {
			snprintf(buf, sizeof buf, "ERROR\tcannot enter the place: %s\t", strerror(errno));
		} else {
			eval_sandbox_limits l;
			eval_sandbox_default_limits(&l);
			char note[2048], err[2048], bad[12000];
			if (eval_sandbox_detect(&l, note, sizeof note, err, sizeof err) != 0) {
				snprintf(buf, sizeof buf, "ERROR\t%s\t", err);
			} else {
				limits = l;
				run_fixtures(bad, sizeof bad);
				snprintf(buf, sizeof buf, "%s\t%s\t%s", eval_sandbox_mode_name(l.mode), note, bad);
			}
		}
		ssize_t w = write(p[1], buf, strlen(buf));
		(void)w;
		_exit(0);
	}
	close(p[1]);
	size_t n = 0;
	ssize_t k;
	while (n < cap - 1 && (k = read(p[0], out + n, cap - 1 - n)) > 0)
		n += (size_t)k;
	out[n] = 0;
	close(p[0]);
	waitpid(pid, NULL, 0);
}

/* Docker's /proc: entries masked by bind mounts, so that the kernel refuses a fresh proc mount */
static int enter_masked_proc(const char *dir)
{
	(void)dir;
	return mount("/dev/null", "/proc/uptime", NULL, MS_BIND, NULL);
}

/* a chroot: the kernel refuses a user namespace to a chrooted process */
static int enter_chroot(const char *dir)
{
	const char *binds[] = {"usr", "etc", "dev", "proc"};
	const char *links[] = {"lib", "lib64", "bin", "sbin"};
	char p[600], t[256];
	for (int i = 0; i < 4; i++) {
		snprintf(p, sizeof p, "%s/%s", dir, binds[i]);
		char src[64];
		snprintf(src, sizeof src, "/%s", binds[i]);
		if (mkdir(p, 0755) != 0 || mount(src, p, NULL, MS_BIND | MS_REC, NULL) != 0)
			return -1;
	}
	for (int i = 0; i < 4; i++) {
		char src[64];
		snprintf(src, sizeof src, "/%s", links[i]);
		snprintf(p, sizeof p, "%s/%s", dir, links[i]);
		ssize_t k = readlink(src, t, sizeof t - 1);
		if (k > 0) {
			t[k] = 0;
			if (symlink(t, p) != 0)
				return -1;
		} else if (access(src, F_OK) == 0 && (mkdir(p, 0755) != 0 || mount(src, p, NULL, MS_BIND | MS_REC, NULL) != 0)) {
			return -1;
		}
	}
	snprintf(p, sizeof p, "%s/tmp", dir);
	if (mkdir(p, 01777) != 0 || mount("tmpfs", p, "tmpfs", 0, "mode=1777,size=64m") != 0)
		return -1;
	if (chroot(dir) != 0 || chdir("/") != 0)
		return -1;
	setenv("TMPDIR", "/tmp", 1);
	return 0;
}

static void remove_tree(const char *dir)
{
	const char *names[] = {"usr", "etc", "dev", "proc", "tmp", "lib", "lib64", "bin", "sbin"};
	char p[600];
	for (int i = 0; i < 9; i++) {
		snprintf(p, sizeof p, "%s/%s", dir, names[i]);
		if (rmdir(p) != 0)
			unlink(p);
	}
	rmdir(dir);
}

/* Two processes sandboxing at once never share a slot's uid (a sweep of one's uid killed the other's programs when
 * two aah-eval ran side by side): each claims a block of 256 uids with an exclusive lock on the block's file, held
 * while it lives. The block this process claimed is locked against any other open of that file, as another process's
 * claim would be; slots map into it. */
START_TEST(test_uid_blocks)
{
	const uint32_t mine = eval_sandbox_slot_uid(3);
	ck_assert_uint_ne(mine, (uint32_t)-1);
	ck_assert_uint_eq(eval_sandbox_slot_uid(3), mine);
	ck_assert_uint_eq(eval_sandbox_slot_uid(4), mine + 1);
	ck_assert_uint_eq((mine - EVAL_SANDBOX_UID_BASE) % 256, 3);
	char path[64];
	snprintf(path, sizeof path, "/tmp/aah-eval-uids.%u.lock", (mine - EVAL_SANDBOX_UID_BASE) / 256);
	int fd = open(path, O_RDWR | O_CLOEXEC);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(flock(fd, LOCK_EX | LOCK_NB), -1);   /* another claim of this block fails */
	ck_assert_int_eq(errno, EWOULDBLOCK);
	close(fd);
}
END_TEST

START_TEST(test_place_without_proc)
{
	char out[20000];
	in_place(enter_masked_proc, NULL, out, sizeof out);
	if (!strncmp(out, "SKIP", 4)) {
		fprintf(stderr, "check_eval_sandbox: %s: the masked-/proc place is not entered here\n", out + 5);
		return;   /* not root, or already in a place (a chroot) that cannot make a mount namespace */
	}
	ck_assert_msg(!strncmp(out, "bwrap-noproc\t", 13), "%s", out);
	ck_assert_msg(strstr(out, "cannot mount a fresh /proc") && strstr(out, "Can't mount proc"), "%s", out);
	ck_assert_msg(out[strlen(out) - 1] == '\t', "fixtures failed there:\n%s", out);
}
END_TEST

START_TEST(test_place_without_namespaces)
{
	char dir[] = "/tmp/aah-check-chroot-XXXXXX";
	ck_assert_ptr_nonnull(mkdtemp(dir));
	chmod(dir, 0755);   /* the new root: the slot's uid must reach /usr through it */
	char out[20000];
	in_place(enter_chroot, dir, out, sizeof out);
	remove_tree(dir);
	if (!strncmp(out, "SKIP", 4)) {
		fprintf(stderr, "check_eval_sandbox: %s: the chroot is not entered here\n", out + 5);
		return;   /* not root, or already in a place (a chroot) that cannot make a mount namespace */
	}
	ck_assert_msg(!strncmp(out, "process\t", 8), "%s", out);
	ck_assert_msg(strstr(out, "cannot make its namespaces") && strstr(out, "create new namespace"), "%s", out);
	ck_assert_msg(out[strlen(out) - 1] == '\t', "fixtures failed there:\n%s", out);
}
END_TEST

static Suite *sandbox_suite(void)
{
	Suite *s = suite_create("eval_sandbox");
	TCase *tc = tcase_create("sandbox");
	tcase_add_checked_fixture(tc, setup, NULL);
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_pass_and_fail);
	tcase_add_test(tc, test_code_eval_fixtures);
	tcase_add_test(tc, test_no_socket);
	tcase_add_test(tc, test_writes_only_its_dir);
	tcase_add_test(tc, test_fork_limit);
	tcase_add_test(tc, test_time_limits);
	tcase_add_test(tc, test_memory_limit);
	tcase_add_test(tc, test_leaves_nothing);
	tcase_add_test(tc, test_bad_setup);
	tcase_add_test(tc, test_uid_blocks);
	tcase_add_test(tc, test_place_without_proc);
	tcase_add_test(tc, test_place_without_namespaces);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(sandbox_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
