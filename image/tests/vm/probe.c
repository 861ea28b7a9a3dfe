/*
 * A tenant's program for the VM test: what a job does to meet its limits. The image has no
 * shell or interpreter, so the test uploads this (built here with the host's gcc, against the
 * same Debian glibc the image carries) to the lease's scratch and runs it through the dynamic
 * loader, as a tenant runs `python3 train.py`.
 *
 *   probe mem MIB          touch MIB MiB of memory, 8 MiB at a time; exit 0 if all was had
 *   probe tasks N          start N processes that wait; exit 3 if the kernel refused one
 *   probe connect IP PORT  TCP connect (5 s at most), print what the peer sends; exit 4 if
 *                          the connection was not made
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static int mem(long mib) {
    const long chunk = 8L << 20;
    for (long done = 0; done < mib; done += 8) {
        char *p = malloc(chunk);
        if (p == NULL) {
            printf("malloc failed after %ld MiB\n", done);
            return 2;
        }
        memset(p, 0xa5, chunk);
        if (done % 64 == 0) {
            printf("touched %ld MiB\n", done + 8);
            fflush(stdout);
        }
    }
    printf("touched all %ld MiB\n", mib);
    return 0;
}

static int tasks(int n) {
    pid_t kids[4096];
    int started = 0, rc = 0;
    if (n > 4096) n = 4096;
    for (; started < n; started++) {
        pid_t pid = fork();
        if (pid == 0) {
            pause();
            _exit(0);
        }
        if (pid < 0) {
            printf("fork %d of %d refused: %s\n", started + 1, n, strerror(errno));
            rc = 3;
            break;
        }
        kids[started] = pid;
    }
    if (rc == 0) printf("started all %d tasks\n", n);
    for (int i = 0; i < started; i++) kill(kids[i], SIGKILL);
    for (int i = 0; i < started; i++) waitpid(kids[i], NULL, 0);
    return rc;
}

static int connect_to(const char *ip, int port) {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    if (inet_pton(AF_INET, ip, &a.sin_addr) != 1) {
        printf("bad address %s\n", ip);
        return 2;
    }
    int s = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (s < 0) {
        printf("socket: %s\n", strerror(errno));
        return 4;
    }
    if (connect(s, (struct sockaddr *)&a, sizeof a) < 0 && errno != EINPROGRESS) {
        printf("connect to %s:%d failed: %s\n", ip, port, strerror(errno));
        return 4;
    }
    struct pollfd p = {.fd = s, .events = POLLOUT};
    int err = 0;
    socklen_t len = sizeof err;
    if (poll(&p, 1, 5000) != 1) {
        printf("connect to %s:%d: no answer in 5 s\n", ip, port);
        return 4;
    }
    getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) {
        printf("connect to %s:%d failed: %s\n", ip, port, strerror(err));
        return 4;
    }
    printf("connected to %s:%d\n", ip, port);
    p.events = POLLIN;
    char buf[128];
    if (poll(&p, 1, 5000) == 1) {
        ssize_t got = read(s, buf, sizeof buf - 1);
        if (got > 0) {
            buf[got] = 0;
            printf("peer said: %s\n", buf);
        }
    }
    close(s);
    return 0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc == 3 && strcmp(argv[1], "mem") == 0) return mem(atol(argv[2]));
    if (argc == 3 && strcmp(argv[1], "tasks") == 0) return tasks(atoi(argv[2]));
    if (argc == 4 && strcmp(argv[1], "connect") == 0) return connect_to(argv[2], atoi(argv[3]));
    fprintf(stderr, "usage: probe mem MIB | tasks N | connect IP PORT\n");
    return 2;
}
