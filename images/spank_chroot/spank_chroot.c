/*
 * spank_chroot: run Slurm job steps inside the jail.
 *
 * Copyright (c) soperator.slurm contributors
 * GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
 *
 * The jail is one shared root filesystem that users see as / on login and worker nodes. This SPANK plugin moves
 * every job step that slurmstepd starts on a worker into it:
 *
 *   required /usr/lib/slurm/spank_chroot.so jail=/mnt/jail [bind=SRC[:DST][:ro] ...] [nodefaults] [disabled]
 *            [allow_no_jail]
 *
 * Options (plugstack.conf):
 *   jail=DIR       the jail's root directory on the node (required).
 *   bind=SRC[:DST][:ro]
 *                  also bind-mount the node's SRC (recursively) at DST inside the jail (DST defaults to SRC); `ro`
 *                  makes it read-only. SRC must exist, or the step fails. Repeatable; applied in the given order,
 *                  after the defaults. Paths may not contain ':'.
 *   nodefaults     do not bind the default node paths (see below); /proc, /sys and /dev are always mounted.
 *   disabled       load, but leave every step on the node's own root filesystem.
 *   allow_no_jail  offer the job option --no-jail (srun/sbatch/salloc) that keeps that job out of the jail. Off by
 *                  default: the jail is the users' environment and the node's root filesystem is not theirs.
 *
 * What a step sees (all mounts live in a mount namespace of its own; nothing propagates back to the node):
 *   /               the jail (rbind of jail=, so volumes mounted below it on the node come along)
 *   /proc           a fresh procfs (no PID namespace: it lists the node's processes; a bind of the node's /proc when
 *                   the kernel refuses a new procfs, e.g. in a container with masked /proc paths)
 *   /sys, /dev      recursive binds of the node's (cgroup filesystems, /dev/pts, /dev/shm included)
 *   defaults        the node's /tmp (node-local scratch, as on any Slurm node), and the Slurm paths of the images:
 *                   /etc/slurm (configs, so srun/sbatch in the jail read the current ones), /run/munge (munged's
 *                   socket, so they can authenticate), /var/spool/slurmd (batch scripts and slurmstepd sockets).
 *                   Each is skipped when the node does not have it. Not the whole /run: it holds what users must not
 *                   see (a pod's service-account token lives under /run/secrets).
 *   bind=           what plugstack.conf adds.
 * Missing mount points are created inside the jail (as root); a mount point whose path crosses a symbolic link in
 * the jail is refused (the step fails), so the jail's content cannot redirect a mount onto a node path.
 *
 * Design: where the step enters the jail, and why.
 *   The namespace is entered in slurm_spank_init_post_opt, which runs in slurmstepd (as root, in its main thread,
 *   once per step on each node) after user options are known and BEFORE slurmstepd opens the step's output files
 *   and changes to the job's working directory. So those paths -- `sbatch -o out.txt`, the submit directory -- are
 *   resolved in the jail, where users created them from the login nodes. Entering in the forked task instead
 *   (slurm_spank_task_init_privileged) would leave slurmstepd on the node's filesystem: output files would land
 *   there (or fail to open) and the working directory would not exist. One namespace per step also costs one set
 *   of mounts per node instead of one per task.
 *   unshare(CLONE_NEWNS) in a multithreaded process moves only the calling thread, and so only the main thread of
 *   slurmstepd and everything it creates afterwards (tasks, later threads) live in the jail; its message thread
 *   stays on the node's root and keeps serving its socket in the node's spool directory. What slurmstepd itself
 *   touches after this hook must exist in the jail at the node's path: the spool directory (the batch script is
 *   executed from it, and unlinked at the end), the munge socket (it signs its messages to slurmd and slurmctld),
 *   cgroup files under /sys, and any TaskProlog/TaskEpilog. The defaults and bind= provide that.
 *   pivot_root (not chroot): the node's root is detached from the namespace entirely, so a process that regains
 *   root in the job cannot chroot("..") its way out. chroot is used only when pivot_root is impossible because the
 *   node's root is an initramfs (rootfs cannot be pivoted away), with a warning; any other pivot_root error fails.
 *   Each task checks, before it executes user code, that its root is the jail slurmstepd entered (fail closed).
 *
 * Which steps: every step that runs user code -- the batch step, srun steps, the interactive step. Not the extern
 *   step (PrologFlags=Contain): it runs no user program; processes that pam_slurm_adopt adopts into it join its
 *   cgroup, not its mount namespace, so moving it would protect nothing.
 *
 * Failures fail closed: when the step cannot enter the jail (jail directory missing, a mount refused, a broken
 *   plugstack.conf), every task of the step fails before it executes anything, with exit code 1 and the message
 *   "spank_chroot: ..." on the job's stderr and in the slurmd log; nothing runs on the node's root instead. (Why
 *   not by returning an error from slurm_spank_init_post_opt: see step_failed().) Keep the plugin `required` in
 *   plugstack.conf, so that a plugin that cannot even be loaded fails the step too.
 *
 * Working directory: slurmstepd changes to the job's directory after this plugin ran, so it is looked up in the
 *   jail; when the jail has no such directory, slurmstepd logs an error and uses /tmp (Slurm's own fallback).
 *
 * Requirements for a jail: the Slurm client binaries and libraries of the same Slurm version, the munge library,
 *   this plugin at the path plugstack.conf names (srun and sbatch in the jail load plugstack.conf too), and the
 *   users (passwd/group) -- slurmstepd executes the step's programs from the jail.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

#include <slurm/slurm.h>
#include <slurm/spank.h>

SPANK_PLUGIN(spank_chroot, 1);

#define LOG_PREFIX "spank_chroot: "
#define MAX_BINDS 32

/* The node paths bound by default: the images' layout (plugins/module_utils/constants.py). */
static const char *const default_binds[] = {
	"/tmp",                 /* node-local scratch */
	"/etc/slurm",           /* SLURM_CONF_DIR */
	"/run/munge",           /* MUNGE_SOCKET_DIR */
	"/var/spool/slurmd",    /* SLURMD_SPOOL */
	NULL,
};

struct bind {
	char src[PATH_MAX];
	char dst[PATH_MAX];
	int recursive;
	int readonly;
	int optional;           /* skip when the source does not exist */
};

static struct {
	char jail[PATH_MAX];
	int defaults;
	int disabled;
	int allow_no_jail;
	struct bind binds[MAX_BINDS];
	int nbinds;
} cfg;

/* What this slurmstepd decided for its step, in slurm_spank_init_post_opt. */
static enum {
	STEP_UNDECIDED,         /* not yet: a task now would be a bug; it fails (fail closed) */
	STEP_OUTSIDE,           /* stays on the node's root: extern step, `disabled`, --no-jail */
	STEP_ENTERED,           /* slurmstepd entered the jail; tasks inherit it */
	STEP_FAILED,            /* could not enter (or a broken plugstack.conf): every task fails with `reason` */
} step_state;
static int no_jail;             /* --no-jail was given (and allowed) */
static dev_t jail_dev;          /* the jail's root as this step sees it after entering */
static ino_t jail_ino;
static char errbuf[PATH_MAX * 2 + 256];
static char reason[sizeof(errbuf) + PATH_MAX + 64];

static int opt_no_jail(int val, const char *optarg, int remote)
{
	(void) val;
	(void) optarg;
	(void) remote;
	no_jail = 1;
	return 0;
}

static struct spank_option no_jail_option = {
	"no-jail", NULL,
	"Run this job on the compute node's own root filesystem instead of the jail (spank_chroot).",
	0, 0, opt_no_jail,
};

static int fail(const char *fmt, ...) __attribute__ ((format (printf, 1, 2)));

/* Record an error (for the caller to log once, with context) and return -1. */
static int fail(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(errbuf, sizeof(errbuf), fmt, ap);
	va_end(ap);
	return -1;
}

static int copy_path(char *dst, const char *src, const char *what)
{
	size_t len = strlen(src);

	if (len == 0 || src[0] != '/')
		return fail("%s must be an absolute path, got '%s'", what, src);
	if (len >= PATH_MAX)
		return fail("%s is too long: %s", what, src);
	memcpy(dst, src, len + 1);
	/* drop trailing slashes, but keep "/" */
	while (len > 1 && dst[len - 1] == '/')
		dst[--len] = '\0';
	return 0;
}

static int add_bind(const char *src, const char *dst, int recursive, int readonly, int optional)
{
	struct bind *b;

	if (cfg.nbinds >= MAX_BINDS)
		return fail("too many bind mounts (at most %d)", MAX_BINDS);
	b = &cfg.binds[cfg.nbinds];
	memset(b, 0, sizeof(*b));
	if (copy_path(b->src, src, "bind source") < 0 || copy_path(b->dst, dst ? dst : src, "bind target") < 0)
		return -1;
	if (strcmp(b->dst, "/") == 0)
		return fail("bind target may not be / (that is the jail itself)");
	b->recursive = recursive;
	b->readonly = readonly;
	b->optional = optional;
	cfg.nbinds++;
	return 0;
}

/* bind=SRC[:DST][:ro] */
static int parse_bind(const char *value)
{
	char buf[PATH_MAX * 2 + 8];
	char *parts[3] = { NULL, NULL, NULL };
	char *p, *save = NULL;
	int n = 0, readonly = 0;

	if (strlen(value) >= sizeof(buf))
		return fail("bind= value is too long: %s", value);
	strcpy(buf, value);
	for (p = strtok_r(buf, ":", &save); p; p = strtok_r(NULL, ":", &save)) {
		if (n == 3)
			return fail("bind=%s: expected SRC[:DST][:ro]", value);
		parts[n++] = p;
	}
	if (n == 0)
		return fail("bind= needs a path");
	if (n >= 2 && strcmp(parts[n - 1], "ro") == 0) {
		readonly = 1;
		parts[--n] = NULL;
	} else if (n == 3) {
		return fail("bind=%s: the third field may only be 'ro'", value);
	}
	return add_bind(parts[0], parts[1], 1, readonly, 0);
}

static int has_word(int ac, char **av, const char *word)
{
	int i;

	for (i = 0; i < ac; i++)
		if (strcmp(av[i], word) == 0)
			return 1;
	return 0;
}

/* Parse the plugstack.conf arguments into cfg: the default binds first (unless nodefaults), then bind= in order. */
static int parse_args(int ac, char **av)
{
	int i;

	cfg.jail[0] = '\0';
	cfg.nbinds = cfg.disabled = cfg.allow_no_jail = 0;
	cfg.defaults = !has_word(ac, av, "nodefaults");
	for (i = 0; cfg.defaults && default_binds[i]; i++)
		if (add_bind(default_binds[i], NULL, 1, 0, 1) < 0)
			return -1;
	for (i = 0; i < ac; i++) {
		const char *arg = av[i];

		if (strncmp(arg, "jail=", 5) == 0) {
			if (copy_path(cfg.jail, arg + 5, "jail") < 0)
				return -1;
		} else if (strncmp(arg, "bind=", 5) == 0) {
			if (parse_bind(arg + 5) < 0)
				return -1;
		} else if (strcmp(arg, "disabled") == 0) {
			cfg.disabled = 1;
		} else if (strcmp(arg, "allow_no_jail") == 0) {
			cfg.allow_no_jail = 1;
		} else if (strcmp(arg, "nodefaults") != 0) {
			return fail("unknown option '%s' (known: jail=, bind=, nodefaults, disabled, allow_no_jail)",
				    arg);
		}
	}
	if (cfg.jail[0] == '\0' && !cfg.disabled)
		return fail("jail=DIR is required");
	if (strcmp(cfg.jail, "/") == 0)
		return fail("jail=/ is the node's own root, not a jail");
	return 0;
}

/* --------------------------------------------------------------------------------------------- mounting */

static int join(char *out, const char *root, const char *path)
{
	if (snprintf(out, PATH_MAX, "%s%s", root, path) >= PATH_MAX)
		return fail("path too long: %s%s", root, path);
	return 0;
}

/*
 * Make `target` (a path inside the jail) exist as a directory, or as an empty file when the source is not a
 * directory, creating missing parents as directories. No component may be a symbolic link: the jail's content is
 * not trusted to point a mount (or a mkdir as root) somewhere on the node, and an absolute link in the jail means a
 * jail path, not a node path.
 */
static int make_mountpoint(const char *jail, const char *target, int is_dir)
{
	char path[PATH_MAX];
	struct stat st;
	size_t i;
	int last, fd;

	if (strlen(target) >= sizeof(path))
		return fail("path too long: %s", target);
	strcpy(path, target);
	for (i = strlen(jail) + 1;; i++) {
		char c = path[i];

		if (c != '/' && c != '\0')
			continue;
		last = (c == '\0');
		path[i] = '\0';
		if (lstat(path, &st) == 0) {
			if (S_ISLNK(st.st_mode))
				return fail("mount point %s: %s is a symbolic link", target, path);
			if (!last && !S_ISDIR(st.st_mode))
				return fail("mount point %s: %s is not a directory", target, path);
		} else if (errno != ENOENT) {
			return fail("mount point %s: %s: %s", target, path, strerror(errno));
		} else if (!last || is_dir) {
			if (mkdir(path, 0755) < 0 && errno != EEXIST)
				return fail("cannot create mount point %s: %s", path, strerror(errno));
		} else {
			fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
			if (fd < 0)
				return fail("cannot create mount point %s: %s", path, strerror(errno));
			close(fd);
		}
		if (last)
			return 0;
		path[i] = '/';
	}
}

static unsigned long vfs_to_mount_flags(unsigned long f)
{
	unsigned long m = 0;

	if (f & ST_NOSUID)
		m |= MS_NOSUID;
	if (f & ST_NODEV)
		m |= MS_NODEV;
	if (f & ST_NOEXEC)
		m |= MS_NOEXEC;
	if (f & ST_NOATIME)
		m |= MS_NOATIME;
	if (f & ST_NODIRATIME)
		m |= MS_NODIRATIME;
	if (f & ST_RELATIME)
		m |= MS_RELATIME;
	return m;
}

static int bind_into(const char *jail, const struct bind *b)
{
	char target[PATH_MAX];
	struct stat st;
	struct statvfs vfs;

	if (stat(b->src, &st) < 0) {
		if (b->optional && errno == ENOENT) {
			slurm_debug(LOG_PREFIX "%s does not exist on this node; not bound", b->src);
			return 0;
		}
		return fail("bind source %s: %s", b->src, strerror(errno));
	}
	if (join(target, jail, b->dst) < 0 || make_mountpoint(jail, target, S_ISDIR(st.st_mode)) < 0)
		return -1;
	if (mount(b->src, target, NULL, MS_BIND | (b->recursive ? MS_REC : 0), NULL) < 0)
		return fail("cannot bind %s to %s: %s", b->src, target, strerror(errno));
	if (b->readonly) {
		unsigned long keep = statvfs(target, &vfs) == 0 ? vfs_to_mount_flags(vfs.f_flag) : 0;

		if (mount(NULL, target, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | keep, NULL) < 0)
			return fail("cannot make %s read-only: %s", target, strerror(errno));
	}
	return 0;
}

static int mount_proc(const char *jail)
{
	char target[PATH_MAX];
	struct bind node_proc;

	if (join(target, jail, "/proc") < 0 || make_mountpoint(jail, target, 1) < 0)
		return -1;
	if (mount("proc", target, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) == 0)
		return 0;
	slurm_verbose(LOG_PREFIX "a new procfs was refused (%s); binding the node's /proc", strerror(errno));
	memset(&node_proc, 0, sizeof(node_proc));
	strcpy(node_proc.src, "/proc");
	strcpy(node_proc.dst, "/proc");
	node_proc.recursive = 1;
	return bind_into(jail, &node_proc);
}

/* The node's root is the initial rootfs (ramfs or tmpfs, not a mount of its own): pivot_root refuses it. */
static int root_is_initramfs(void)
{
	struct statfs fs;

	if (statfs("/", &fs) < 0)
		return 0;
	return fs.f_type == RAMFS_MAGIC || fs.f_type == TMPFS_MAGIC;
}

static int enter_root(const char *jail)
{
	if (chdir(jail) < 0)
		return fail("chdir %s: %s", jail, strerror(errno));
	if (syscall(SYS_pivot_root, ".", ".") == 0) {
		/* the node's root is now stacked under the jail at "/": detach it from this namespace */
		if (umount2(".", MNT_DETACH) < 0)
			return fail("cannot detach the node's root after pivot_root: %s", strerror(errno));
	} else if (errno == EINVAL && root_is_initramfs()) {
		slurm_info(LOG_PREFIX "warning: the node's root is an initramfs, which pivot_root cannot move; "
			   "using chroot into %s", jail);
		if (chroot(".") < 0)
			return fail("chroot %s: %s", jail, strerror(errno));
	} else {
		return fail("pivot_root into %s: %s", jail, strerror(errno));
	}
	if (chdir("/") < 0)
		return fail("chdir / in the jail: %s", strerror(errno));
	return 0;
}

static int enter_jail(void)
{
	char jail[PATH_MAX];
	struct stat st;
	struct bind sys = { "/sys", "/sys", 1, 0, 0 }, dev = { "/dev", "/dev", 1, 0, 0 };
	int i;

	if (geteuid() != 0)
		return fail("must run as root to enter the jail (slurmstepd runs as uid %u)", (unsigned) geteuid());
	if (!realpath(cfg.jail, jail))
		return fail("jail directory %s: %s", cfg.jail, strerror(errno));
	if (stat(jail, &st) < 0 || !S_ISDIR(st.st_mode))
		return fail("jail %s is not a directory", cfg.jail);
	if (strcmp(jail, "/") == 0)
		return fail("jail %s is the node's own root", cfg.jail);

	if (unshare(CLONE_NEWNS) < 0)
		return fail("unshare(CLONE_NEWNS): %s", strerror(errno));
	/* receive mount events from the node (e.g. volumes mounted later), send none back */
	if (mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) < 0)
		return fail("cannot make the step's mounts private: %s", strerror(errno));
	/* a mount point of its own, which pivot_root needs; recursive so volumes below the jail come along */
	if (mount(jail, jail, NULL, MS_BIND | MS_REC, NULL) < 0)
		return fail("cannot bind the jail %s onto itself: %s", jail, strerror(errno));

	if (mount_proc(jail) < 0 || bind_into(jail, &sys) < 0 || bind_into(jail, &dev) < 0)
		return -1;
	for (i = 0; i < cfg.nbinds; i++)
		if (bind_into(jail, &cfg.binds[i]) < 0)
			return -1;
	if (enter_root(jail) < 0)
		return -1;
	if (stat("/", &st) < 0)
		return fail("stat / in the jail: %s", strerror(errno));
	jail_dev = st.st_dev;
	jail_ino = st.st_ino;
	return 0;
}

/* ------------------------------------------------------------------------------------------------ hooks */

/*
 * Failing: slurm_spank_init_post_opt does not return an error. When it does, slurmstepd aborts the step launch;
 * srun then only says "Plugin initialization failed", exits 0 and the job ends COMPLETED (Slurm 22.05), and a
 * batch job's node is drained. Instead the step is marked failed and every task fails in
 * slurm_spank_task_init_privileged, before it executes anything: the job fails (exit code 1) with our message on
 * its stderr, and in the slurmd log. No task of the step runs outside the jail either way.
 */
static void step_failed(const char *fmt, ...) __attribute__ ((format (printf, 1, 2)));

static void step_failed(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(reason, sizeof(reason), fmt, ap);
	va_end(ap);
	step_state = STEP_FAILED;
	slurm_error(LOG_PREFIX "%s", reason);
}

int slurm_spank_init(spank_t sp, int ac, char **av)
{
	spank_context_t ctx = spank_context();

	/* srun, sbatch, salloc: only offer --no-jail when plugstack.conf allows it */
	if (ctx == S_CTX_LOCAL || ctx == S_CTX_ALLOCATOR) {
		if (has_word(ac, av, "allow_no_jail") && spank_option_register(sp, &no_jail_option) != ESPANK_SUCCESS) {
			slurm_error(LOG_PREFIX "cannot register the --no-jail option");
			return -1;
		}
		return 0;
	}
	if (ctx != S_CTX_REMOTE)
		return 0;
	step_state = STEP_UNDECIDED;
	if (parse_args(ac, av) < 0)
		step_failed("plugstack.conf: %s", errbuf);
	else if (cfg.allow_no_jail && spank_option_register(sp, &no_jail_option) != ESPANK_SUCCESS)
		step_failed("cannot register the --no-jail option");
	return 0;
}

int slurm_spank_init_post_opt(spank_t sp, int ac, char **av)
{
	uint32_t job = 0, step = 0;

	(void) ac;
	(void) av;
	if (!spank_remote(sp))
		return 0;
	if (spank_get_item(sp, S_JOB_ID, &job) != ESPANK_SUCCESS ||
	    spank_get_item(sp, S_JOB_STEPID, &step) != ESPANK_SUCCESS) {
		step_failed("cannot read the job and step id");
		return 0;
	}
	if (step == SLURM_EXTERN_CONT) {
		step_state = STEP_OUTSIDE;
		return 0;
	}
	if (step_state == STEP_FAILED)
		return 0;
	if (cfg.disabled) {
		step_state = STEP_OUTSIDE;
		return 0;
	}
	if (no_jail) {
		slurm_info(LOG_PREFIX "job %u step %u: --no-jail, running on the node's root filesystem", job, step);
		step_state = STEP_OUTSIDE;
		return 0;
	}
	if (enter_jail() < 0) {
		step_failed("job %u step %u: cannot enter the jail %s: %s", job, step, cfg.jail, errbuf);
		return 0;
	}
	step_state = STEP_ENTERED;
	slurm_verbose(LOG_PREFIX "job %u step %u runs in the jail %s", job, step, cfg.jail);
	return 0;
}

int slurm_spank_task_init_privileged(spank_t sp, int ac, char **av)
{
	struct stat st;

	(void) ac;
	(void) av;
	if (!spank_remote(sp))
		return 0;
	switch (step_state) {
	case STEP_OUTSIDE:
		return 0;
	case STEP_FAILED:
		/* in the task, before exec: this reaches the job's stderr (srun's terminal, the batch output file) */
		slurm_error(LOG_PREFIX "not running the task: %s", reason);
		return -1;
	case STEP_UNDECIDED:
		slurm_error(LOG_PREFIX "not running the task: the step was not set up (init_post_opt did not run)");
		return -1;
	case STEP_ENTERED:
		break;
	}
	/* the task was forked by the slurmstepd thread that entered the jail: check it really is in it */
	if (stat("/", &st) < 0 || st.st_dev != jail_dev || st.st_ino != jail_ino) {
		slurm_error(LOG_PREFIX "not running the task: it is not in the jail %s", cfg.jail);
		return -1;
	}
	return 0;
}
