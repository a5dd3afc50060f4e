/* The POSIX platform of the C consumer: a TCP socket to the broker, a file as the
 * flash (16 KiB, 4-byte writes, 4 KiB pages, synced before any acknowledgement it
 * allows goes out), and the ids log beside it (FLASH.ids, the lines `idem mqtt consume`
 * writes: {"n":3,"id":"p2"}).
 *
 *     consumer [--protocol 3.1.1|5] HOST PORT CLIENT_ID TOPIC FLASH [IDLE_MS]
 *
 * MQTT 3.1.1 unless --protocol 5 is given.
 * Prints one JSON line of figures at the end. Exit codes: 0 done, 1 failure, 2 usage. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "platform.h"

#define PAGE 4096u
#define CAPACITY (4u * PAGE)

static const char *host, *port;
static int sock = -1, flash_fd = -1, log_fd = -1;
static int log_dirty;
/* fdatasync calls the run made: of the flash file (the door's sync callback) and of the
 * ids log (before a flash write that follows a new line). */
static unsigned long long flash_syncs, log_syncs;
static const char *flash_path;

void plat_say(const char *what, const char *why) {
    fprintf(stderr, "consumer: %s: %s\n", what, why);
}

int plat_connect(void) {
    struct addrinfo hints = {0}, *res;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    int rc = getaddrinfo(host, port, &hints, &res);
    if (rc != 0) {
        plat_say("resolving the broker", gai_strerror(rc));
        return -1;
    }
    sock = socket(res->ai_family, res->ai_socktype, res->ai_protocol);
    if (sock < 0 || connect(sock, res->ai_addr, res->ai_addrlen) != 0) {
        plat_say("connecting to the broker", strerror(errno));
        if (sock >= 0) close(sock);
        sock = -1;
        freeaddrinfo(res);
        return -1;
    }
    freeaddrinfo(res);
    int one = 1;
    setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return 0;
}

long plat_recv(uint8_t *buf, size_t cap, int wait_ms) {
    struct pollfd p = {sock, POLLIN, 0};
    int rc = poll(&p, 1, wait_ms);
    if (rc < 0) return errno == EINTR ? 0 : -1;
    if (rc == 0) return 0;
    ssize_t n = recv(sock, buf, cap, 0);
    return n > 0 ? (long)n : -1;
}

int plat_send(const uint8_t *bytes, size_t len) {
    while (len > 0) {
        ssize_t n = send(sock, bytes, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return -1;
        bytes += n;
        len -= (size_t)n;
    }
    return 0;
}

void plat_close(void) {
    if (sock >= 0) close(sock);
    sock = -1;
}

uint64_t plat_now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000u + (uint64_t)t.tv_nsec / 1000000u;
}

void plat_sleep_ms(uint32_t ms) {
    struct timespec t = {ms / 1000u, (long)(ms % 1000u) * 1000000L};
    nanosleep(&t, NULL);
}

static int all(ssize_t n, size_t len) { return n == (ssize_t)len ? 0 : -1; }

static int flash_read(void *ctx, uint32_t addr, uint8_t *buf, size_t len) {
    (void)ctx;
    return all(pread(flash_fd, buf, len, addr), len);
}

/* The ids log's lines reach the disk before any record that counts them. */
static int flash_write(void *ctx, uint32_t addr, const uint8_t *bytes, size_t len) {
    (void)ctx;
    if (log_dirty) {
        log_syncs++;
        if (fdatasync(log_fd) != 0) return -1;
    }
    log_dirty = 0;
    return all(pwrite(flash_fd, bytes, len, addr), len);
}

static int flash_erase(void *ctx, uint32_t addr) {
    static uint8_t blank[PAGE];
    (void)ctx;
    memset(blank, 0xFF, sizeof blank);
    return all(pwrite(flash_fd, blank, PAGE, addr), PAGE);
}

static int flash_sync(void *ctx) {
    (void)ctx;
    flash_syncs++;
    return fdatasync(flash_fd);
}

static const idem_flash file_flash = {
    NULL, flash_read, flash_write, flash_erase, flash_sync, CAPACITY, 4, PAGE, 0, CAPACITY,
};

const idem_flash *plat_flash(void) { return &file_flash; }

void plat_applied(uint32_t n, const char *id, size_t id_len) {
    char line[160];
    int len = snprintf(line, sizeof line, "{\"n\":%u,\"id\":\"%.*s\"}\n", (unsigned)n,
                       (int)(id_len > 100 ? 100 : id_len), id);
    if (write(log_fd, line, (size_t)len) != len) plat_say("writing the ids log", strerror(errno));
    log_dirty = 1;
}

/* Keeps the log's first `applied` lines: a line past them was written before a record
 * that a kill stopped. */
void plat_applied_keep(uint32_t applied) {
    char buf[4096];
    off_t at = 0, keep = 0;
    uint32_t lines = 0;
    ssize_t n;
    while (lines < applied && (n = pread(log_fd, buf, sizeof buf, at)) > 0) {
        for (ssize_t i = 0; i < n && lines < applied; i++) {
            if (buf[i] == '\n') {
                lines++;
                keep = at + i + 1;
            }
        }
        at += n;
    }
    if (ftruncate(log_fd, keep) != 0 || lseek(log_fd, keep, SEEK_SET) < 0) {
        plat_say("trimming the ids log", strerror(errno));
    }
}

void plat_report(const idem_stats *s, int64_t total) {
    printf("{\"total\":%lld,\"applied\":%u,\"duplicates\":%u,\"rejected\":%u,\"held\":%u,"
           "\"records\":%llu,\"redeliveries\":%llu,\"held_again\":%llu,\"unanswered\":%llu,"
           "\"session_present\":%s,\"granted_qos\":%d,\"resumed\":%s,\"reason\":%u,"
           "\"session_expiry_s\":%lu,\"resend_reconnects\":%u,\"past_receive_maximum\":%llu,"
           "\"waited\":%llu,\"most_waiting\":%u,\"syncs\":%llu,\"flash_fdatasyncs\":%llu,"
           "\"log_fdatasyncs\":%llu,\"publish_after_pubrel\":%llu}\n",
           (long long)total, s->applied, s->duplicates, s->rejected, s->held,
           (unsigned long long)s->records, (unsigned long long)s->redeliveries,
           (unsigned long long)s->held_again, (unsigned long long)s->unanswered,
           s->session_present ? "true" : "false", s->granted_qos, s->resumed ? "true" : "false",
           s->reason, (unsigned long)s->session_expiry_s, s->resend_reconnects,
           (unsigned long long)s->past_receive_maximum, (unsigned long long)s->waited,
           s->most_waiting, (unsigned long long)s->syncs, flash_syncs, log_syncs,
           (unsigned long long)s->publish_after_pubrel);
}

/* Opens the flash file, made blank (0xFF) when new. */
static int open_flash(void) {
    flash_fd = open(flash_path, O_RDWR | O_CREAT, 0644);
    struct stat st;
    if (flash_fd < 0 || fstat(flash_fd, &st) != 0) return -1;
    if (st.st_size == 0) {
        for (uint32_t a = 0; a < CAPACITY; a += PAGE) {
            if (flash_erase(NULL, a) != 0) return -1;
        }
        if (fdatasync(flash_fd) != 0) return -1;
    } else if (st.st_size != CAPACITY) {
        errno = EINVAL;
        return -1;
    }
    char log_path[4096];
    snprintf(log_path, sizeof log_path, "%s.ids", flash_path);
    log_fd = open(log_path, O_RDWR | O_CREAT, 0644);
    return log_fd < 0 ? -1 : 0;
}

int main(int argc, char **argv) {
    uint8_t protocol = IDEM_MQTT_3_1_1;
    if (argc > 1 && strcmp(argv[1], "--protocol") == 0) {
        const char *p = argc > 2 ? argv[2] : "";
        if (strcmp(p, "5") == 0) {
            protocol = IDEM_MQTT_5;
        } else if (strcmp(p, "3.1.1") != 0) {
            fprintf(stderr, "consumer: --protocol takes 3.1.1 or 5, not %s\n", *p ? p : "nothing");
            return 2;
        }
        argc -= 2;
        argv += 2;
    }
    if (argc < 6 || argc > 7) {
        fprintf(stderr, "usage: consumer [--protocol 3.1.1|5] HOST PORT CLIENT_ID TOPIC FLASH [IDLE_MS]\n");
        return 2;
    }
    host = argv[1];
    port = argv[2];
    flash_path = argv[5];
    char *end = NULL;
    unsigned long idle = argc == 7 ? strtoul(argv[6], &end, 10) : 1000;
    if (argc == 7 && (*argv[6] == '\0' || *end != '\0' || idle > 3600000)) {
        fprintf(stderr, "consumer: IDLE_MS takes milliseconds up to 3600000, not %s\n", argv[6]);
        return 2;
    }
    if (open_flash() != 0) {
        fprintf(stderr, "consumer: %s is not a 16384-byte flash file this consumer can use: %s\n",
                flash_path, strerror(errno));
        return 1;
    }
    struct session s = {protocol, argv[3], argv[4], 2, (uint32_t)idle};
    return consume(&s);
}
