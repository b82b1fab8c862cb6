/* tests/check_eval_sandbox.c — Check suite for aah-eval's bubblewrap sandbox (tools/eval/sandbox): generated code
 * cannot open a socket (nor reach a port listening on the host), cannot write outside its directory, cannot fork
 * without limit, is killed at its time limit (CPU or wall), cannot take more memory than its limit, and leaves
 * nothing behind (no process, no file, its directory gone). Each test decides by what the program could or could not
 * do, never by how long it took. */
#include <arpa/inet.h>
#include <check.h>
#include <dirent.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tools/eval/sandbox.h"

static eval_sandbox_limits limits;

static void setup(void)
{
	eval_sandbox_default_limits(&limits);
	limits.wall_seconds = 60;   /* generous: a loaded machine must not turn a pass into a timeout */
	limits.cpu_seconds = 20;
}

static eval_sandbox_result run(const char *program)
{
	eval_sandbox_result r;
	char err[1024];
	int rc = eval_sandbox_run(&limits, 7, program, &r, err, sizeof err);
	ck_assert_msg(rc == 0, "the sandbox did not run: %s", err);
	return r;
}

START_TEST(test_pass_and_fail)
{
	eval_sandbox_result r = run("def add(a, b):\n    return a + b\n\nassert add(2, 3) == 5\nprint('ok')\n");
	ck_assert_msg(r.status == EVAL_SANDBOX_PASSED, "%s: %s", eval_sandbox_status_name(r.status), r.output);
	ck_assert_str_eq(r.output, "ok\n");
	r = run("assert 1 + 1 == 3, 'wrong'\n");
	ck_assert_int_eq(r.status, EVAL_SANDBOX_FAILED);
	ck_assert(strstr(r.output, "AssertionError: wrong") != NULL);
	r = run("def broken(:\n");
	ck_assert_int_eq(r.status, EVAL_SANDBOX_FAILED);
	ck_assert(strstr(r.output, "SyntaxError") != NULL);
	char err[256];
	ck_assert_int_eq(eval_sandbox_check(&limits, err, sizeof err), 0);
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
	         "import socket, sys\n"
	         "for fam, kind in [(socket.AF_INET, socket.SOCK_STREAM), (socket.AF_INET, socket.SOCK_DGRAM),\n"
	         "                  (socket.AF_UNIX, socket.SOCK_STREAM), (socket.AF_INET6, socket.SOCK_STREAM)]:\n"
	         "    try:\n"
	         "        s = socket.socket(fam, kind)\n"
	         "    except OSError as e:\n"
	         "        print('refused', fam, e.errno)\n"
	         "        continue\n"
	         "    sys.exit('opened a socket %%d' %% fam)\n"
	         "try:\n"
	         "    socket.create_connection(('127.0.0.1', %d), timeout=5)\n"
	         "    sys.exit('connected to the host')\n"
	         "except OSError as e:\n"
	         "    print('no connection', e.errno)\n",
	         ntohs(a.sin_port));
	eval_sandbox_result r = run(program);
	close(ls);
	ck_assert_msg(r.status == EVAL_SANDBOX_PASSED, "%s", r.output);
	ck_assert(strstr(r.output, "refused 2 13") && strstr(r.output, "refused 1 13") && strstr(r.output, "no connection"));
}
END_TEST

START_TEST(test_writes_only_its_dir)
{
	char marker[64];
	snprintf(marker, sizeof marker, "aah-sandbox-marker-%d", (int)getpid());
	char program[2048];
	snprintf(program, sizeof program,
	         "import os, sys\n"
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
	         "print(os.getcwd(), sorted(os.listdir('/sandbox')))\n"
	         "sys.exit(('wrote ' + ' '.join(wrote)) if wrote else 0)\n",
	         marker, marker);
	eval_sandbox_result r = run(program);
	ck_assert_msg(r.status == EVAL_SANDBOX_PASSED, "%s", r.output);
	ck_assert(strstr(r.output, "/sandbox ['") != NULL);
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
		if (geteuid() == 0 && stat(path, &st) == 0 && st.st_uid >= EVAL_SANDBOX_UID_BASE &&
		    st.st_uid < EVAL_SANDBOX_UID_BASE + 65536)
			n++;
	}
	closedir(d);
	return n;
}

START_TEST(test_fork_limit)
{
	/* children that stay alive: the program counts how many it could start before fork fails */
	limits.processes = 16;
	/* every process of both programs carries a marker on its command line (the program re-executes itself with it
	 * first; forks inherit it), so that count_processes sees any that outlive the sandbox */
	char marker[64], program[1024];
	snprintf(marker, sizeof marker, "aah-sandbox-forks-%d", (int)getpid());
	const char *reexec = "import os, sys\n"
	                     "if len(sys.argv) < 2:\n"
	                     "    os.execv(sys.executable, [sys.executable, sys.argv[0], '%s'])\n";
	snprintf(program, sizeof program, reexec, marker);
	eval_sandbox_result r = run(strcat(program, "import time\n"
	                            "n = 0\n"
	                            "try:\n"
	                            "    for _ in range(10000):\n"
	                            "        if os.fork() == 0:\n"
	                            "            time.sleep(600)\n"
	                            "            os._exit(0)\n"
	                            "        n += 1\n"
	                            "except OSError as e:\n"
	                            "    print('forks', n, 'then errno', e.errno)\n"
	                            "    sys.exit(0)\n"
	                            "sys.exit('forked %d times without limit' % n)\n"));
	ck_assert_msg(r.status == EVAL_SANDBOX_PASSED, "%s: %s", eval_sandbox_status_name(r.status), r.output);
	int forks = -1;
	ck_assert(sscanf(r.output, "forks %d", &forks) == 1);
	ck_assert_msg(forks >= 1 && forks < 16, "%d forks", forks);
	/* the sleeping children died with the sandbox */
	ck_assert_int_eq(count_processes(marker), 0);
	/* a real fork bomb ends too (killed at its limits), and nothing of it remains */
	limits.cpu_seconds = 2;
	limits.wall_seconds = 5;
	snprintf(program, sizeof program, reexec, marker);
	r = run(strcat(program, "while True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"));
	ck_assert_msg(r.status != EVAL_SANDBOX_PASSED, "%s", r.output);
	ck_assert_int_eq(count_processes(marker), 0);
}
END_TEST

START_TEST(test_time_limits)
{
	limits.cpu_seconds = 1;
	eval_sandbox_result r = run("while True:\n    pass\n");
	ck_assert_msg(r.status == EVAL_SANDBOX_TIMEOUT, "%s (exit %d)", eval_sandbox_status_name(r.status), r.exit_code);
	limits.cpu_seconds = 20;
	limits.wall_seconds = 2;
	r = run("import time\ntime.sleep(3600)\n");
	ck_assert_msg(r.status == EVAL_SANDBOX_TIMEOUT, "%s (exit %d)", eval_sandbox_status_name(r.status), r.exit_code);
}
END_TEST

START_TEST(test_memory_limit)
{
	limits.memory_bytes = 256ll << 20;
	eval_sandbox_result r = run("x = bytearray(1 << 30)\nprint('allocated', len(x))\n");
	ck_assert_msg(r.status != EVAL_SANDBOX_PASSED, "%s", r.output);
	ck_assert(strstr(r.output, "MemoryError") != NULL || r.status == EVAL_SANDBOX_SIGNALED);
	limits.disk_bytes = 1 << 20;   /* the private directory is a tmpfs of this size */
	r = run("import sys\ntry:\n    open('/sandbox/big', 'wb').write(b'x' * (8 << 20))\nexcept OSError as e:\n"
	        "    sys.exit(0)\nsys.exit('wrote 8 MiB into a 1 MiB directory')\n");
	ck_assert_msg(r.status == EVAL_SANDBOX_PASSED || r.status == EVAL_SANDBOX_SIGNALED, "%s: %s",
	              eval_sandbox_status_name(r.status), r.output);   /* ENOSPC, or SIGXFSZ at RLIMIT_FSIZE */
}
END_TEST

START_TEST(test_leaves_nothing)
{
	/* a daemon that double-forks away from the program and would live for an hour; a file in its directory */
	char marker[64];
	snprintf(marker, sizeof marker, "aah-sandbox-daemon-%d", (int)getpid());
	char program[1024];
	snprintf(program, sizeof program,
	         "import os, subprocess\n"
	         "open('/sandbox/left-behind', 'w').write('x')\n"
	         "if os.fork() == 0:\n"
	         "    os.setsid()\n"
	         "    if os.fork() == 0:\n"
	         "        os.execv('/usr/bin/python3', ['python3', '-c', 'import time; time.sleep(3600)', '%s'])\n"
	         "    os._exit(0)\n"
	         "os.wait()\n"
	         "print('daemon started')\n",
	         marker);
	eval_sandbox_result r = run(program);
	ck_assert_msg(r.status == EVAL_SANDBOX_PASSED, "%s", r.output);
	ck_assert_int_eq(count_processes(marker), 0);
	/* a second run sees a fresh, empty directory */
	r = run("import os, sys\nsys.exit(0 if os.listdir('/sandbox') == ['main.py'] else 'found %s' % os.listdir('/sandbox'))\n");
	ck_assert_msg(r.status == EVAL_SANDBOX_PASSED, "%s", r.output);
}
END_TEST

START_TEST(test_bad_setup)
{
	eval_sandbox_result r;
	char err[512];
	limits.python = "/opt/python3";
	ck_assert_int_eq(eval_sandbox_run(&limits, 0, "pass\n", &r, err, sizeof err), -1);
	ck_assert(strstr(err, "under /usr") != NULL);
	limits.python = "/usr/bin/python3";
	limits.bwrap = "/nonexistent/bwrap";
	ck_assert_int_eq(eval_sandbox_check(&limits, err, sizeof err), -1);
}
END_TEST

static Suite *sandbox_suite(void)
{
	Suite *s = suite_create("eval_sandbox");
	TCase *tc = tcase_create("sandbox");
	tcase_add_checked_fixture(tc, setup, NULL);
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_pass_and_fail);
	tcase_add_test(tc, test_no_socket);
	tcase_add_test(tc, test_writes_only_its_dir);
	tcase_add_test(tc, test_fork_limit);
	tcase_add_test(tc, test_time_limits);
	tcase_add_test(tc, test_memory_limit);
	tcase_add_test(tc, test_leaves_nothing);
	tcase_add_test(tc, test_bad_setup);
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
