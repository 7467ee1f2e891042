/* The pod sandbox's process: holds the pod's namespaces, reaps orphans, exits on SIGINT/SIGTERM. Ours (a few
 * lines) so the pause image is built here from scratch instead of pulled. */
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int sig) { (void)sig; _exit(0); }
static void reap(int sig) { (void)sig; while (waitpid(-1, NULL, WNOHANG) > 0) {} }

int main(void) {
	struct sigaction s = {0};
	s.sa_handler = stop;
	sigaction(SIGINT, &s, NULL);
	sigaction(SIGTERM, &s, NULL);
	s.sa_handler = reap;
	s.sa_flags = SA_NOCLDSTOP;
	sigaction(SIGCHLD, &s, NULL);
	if (getpid() != 1) return 1; /* only as a pod's first process */
	for (;;) pause();
}
