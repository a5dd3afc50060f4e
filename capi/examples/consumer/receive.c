/* The receive path of a C consumer of idem's payment stream over MQTT: the socket's
 * bytes go to idem's receiver, the bytes it hands back go to the socket, and the
 * application's effect adds each payment's amount to a total (the naive store: no dedup
 * of its own; QoS 2 with the identifiers on flash keeps it exact). The platform (posix.c,
 * cortex_m.c) owns the socket, the clock and the flash. */
#include <stdint.h>
#include <string.h>

#include "platform.h"

/* The application's state on flash: the total, 8 bytes little-endian. */
#define STATE_SIZE 8
/* Names that layout: change it with the layout. */
#define STATE_TAG 0x7A110001u
/* Connection attempts in a row before giving up. */
#define TRIES 5

struct app {
    /* Messages applied, as the flash counts them once their record is written. */
    uint32_t applied;
};

static int64_t get_total(const uint8_t *state) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | state[i];
    return (int64_t)v;
}

static void put_total(uint8_t *state, int64_t total) {
    uint64_t v = (uint64_t)total;
    for (int i = 0; i < 8; i++, v >>= 8) state[i] = (uint8_t)v;
}

/* The value after `"key"` and its colon in `p`, or NULL. Enough JSON for
 * {"id": "p17", "payer": "ada", "amount": 5}. */
static const uint8_t *field(const uint8_t *p, size_t n, const char *key) {
    size_t k = strlen(key);
    for (size_t i = 0; i + k + 2 <= n; i++) {
        if (p[i] != '"' || memcmp(p + i + 1, key, k) != 0 || p[i + 1 + k] != '"') continue;
        size_t j = i + k + 2;
        while (j < n && (p[j] == ' ' || p[j] == ':')) j++;
        return j < n ? p + j : NULL;
    }
    return NULL;
}

/* The effect: adds the payment's amount to the total. Called by idem with a copy of
 * the durable state, before the record that keeps the result is written. */
static int effect(void *ctx, const uint8_t *payload, size_t len, uint8_t *state,
                  size_t state_len) {
    struct app *app = ctx;
    const uint8_t *end = payload + len;
    const uint8_t *id = field(payload, len, "id");
    const uint8_t *amount = field(payload, len, "amount");
    if (state_len != STATE_SIZE || id == NULL || *id != '"' || amount == NULL) return IDEM_REJECTED;
    const uint8_t *id_end = memchr(id + 1, '"', (size_t)(end - id - 1));
    if (id_end == NULL || id_end == id + 1) return IDEM_REJECTED;
    int negative = *amount == '-';
    const uint8_t *d = amount + negative;
    int64_t value = 0;
    if (d >= end || *d < '0' || *d > '9') return IDEM_REJECTED;
    for (; d < end && *d >= '0' && *d <= '9'; d++) {
        if (value > (INT64_MAX - 9) / 10) return IDEM_REJECTED;
        value = value * 10 + (*d - '0');
    }
    int64_t total = get_total(state);
    if (negative ? total < INT64_MIN + value : total > INT64_MAX - value) return IDEM_REJECTED;
    put_total(state, negative ? total - value : total + value);
    app->applied++;
    plat_applied(app->applied, (const char *)id + 1, (size_t)(id_end - id - 1));
    return IDEM_APPLIED;
}

/* Sends everything the receiver hands out: 0, or -1 once the connection is closed. */
static int flush(idem_receiver *rx) {
    const uint8_t *bytes;
    size_t len;
    if (idem_output(rx, &bytes, &len) != IDEM_OK) return -1;
    if (len == 0) return 0;
    if (plat_send(bytes, len) != 0) return -1;
    return idem_sent(rx, len) == IDEM_OK ? 0 : -1;
}

/* The connection closed under a send: not one of idem's codes. */
#define CLOSED 100

/* Hands `n` received bytes to the receiver, sending its answers as they come. */
static int feed(idem_receiver *rx, const uint8_t *buf, long n) {
    size_t off = 0;
    while (off < (size_t)n) {
        size_t taken = 0;
        int rc = idem_input(rx, buf + off, (size_t)n - off, &taken);
        if (rc != IDEM_OK) return rc;
        if (flush(rx) != 0) return CLOSED;
        off += taken;
    }
    return IDEM_OK;
}

enum end { END_IDLE, END_AGAIN, END_FATAL };

/* After DISCONNECT: waits up to a second for the broker to close the connection, so
 * that the next CONNECT does not reach it while it still holds this one (Mosquitto
 * then closes the old one as a takeover). */
static void wait_closed(void) {
    uint8_t scrap[64];
    uint64_t until = plat_now_ms() + 1000;
    while (plat_now_ms() < until && plat_recv(scrap, sizeof scrap, 10) >= 0) {
    }
}

/* Whether the broker has answered this connection's SUBSCRIBE. */
static int subscribed(idem_receiver *rx) {
    idem_stats s;
    return idem_get_stats(rx, &s) == IDEM_OK && s.subscribed;
}

/* Names the broker's reason code for a refusal or DISCONNECT, if it gave one. */
static void say_reason(idem_receiver *rx) {
    char words[64];
    if (idem_reason(rx, words, sizeof words) == IDEM_OK && words[0] != '\0') {
        plat_say("the broker's reason", words);
    }
}

/* One connection: until the broker is quiet for idle_ms, the receiver asks for a new
 * connection, or the connection breaks. */
static enum end connection(idem_receiver *rx, const struct session *s) {
    static uint8_t buf[512];
    int rc = idem_connect(rx);
    if (rc != IDEM_OK || flush(rx) != 0) return rc == IDEM_OK ? END_AGAIN : END_FATAL;
    uint64_t start = plat_now_ms(), last_in = start, last_out = start;
    for (;;) {
        long n = plat_recv(buf, sizeof buf, 5);
        if (n < 0) return END_AGAIN;
        uint64_t now = plat_now_ms();
        if (n > 0) {
            last_in = now;
            rc = feed(rx, buf, n);
        } else {
            rc = idem_idle(rx);
            if (rc == IDEM_RECONNECT) {
                flush(rx);
                wait_closed();
                return END_AGAIN;
            }
            if (rc == IDEM_OK && now - last_in >= s->idle_ms && subscribed(rx)) {
                idem_disconnect(rx);
                flush(rx);
                return END_IDLE;
            }
            if (rc == IDEM_OK && !subscribed(rx) && now - start >= 10000) {
                plat_say("giving up", "the broker did not answer CONNECT and SUBSCRIBE within 10 s");
                return END_FATAL;
            }
            if (rc == IDEM_OK && now - last_out >= 30000) {
                rc = idem_ping(rx);
                last_out = now;
            }
            if (rc == IDEM_OK && flush(rx) != 0) return END_AGAIN;
        }
        if (rc == CLOSED) return END_AGAIN;
        if (rc == IDEM_E_MALFORMED || rc == IDEM_E_BROKER || rc == IDEM_E_DISCONNECTED) {
            plat_say("closing the connection", idem_strerror(rc));
            say_reason(rx);
            return END_AGAIN;
        }
        if (rc != IDEM_OK) {
            plat_say("stopping", idem_strerror(rc));
            say_reason(rx);
            return END_FATAL;
        }
    }
}

int consume(const struct session *s) {
    static idem_receiver rx;
    static struct app app;
    /* At MQTT 5 the session never expires, as clean session 0 keeps it at 3.1.1. */
    idem_config config = {s->protocol, s->qos, 60, s->client_id, s->topic, IDEM_SESSION_NEVER};
    idem_app application = {&app, effect, NULL, STATE_SIZE, STATE_TAG};
    int rc = idem_open(&rx, &config, plat_flash(), &application);
    if (rc != IDEM_OK) {
        plat_say("the receiver did not open", idem_strerror(rc));
        return 1;
    }
    idem_stats stats;
    idem_get_stats(&rx, &stats);
    app.applied = stats.applied;
    plat_applied_keep(stats.applied);
    for (int tries = 0;;) {
        if (plat_connect() != 0) {
            if (++tries >= TRIES) {
                plat_say("giving up", "5 connection attempts in a row failed");
                return 1;
            }
            plat_sleep_ms(100u << tries);
            continue;
        }
        uint32_t before = app.applied;
        enum end end = connection(&rx, s);
        plat_close();
        if (end == END_FATAL) return 1;
        if (end == END_IDLE) break;
        /* Only a connection that applied nothing counts against the tries. */
        tries = app.applied > before ? 0 : tries + 1;
        if (tries >= TRIES) {
            plat_say("giving up", "the broker closed 5 connections in a row before a message was applied");
            return 1;
        }
    }
    uint8_t state[STATE_SIZE];
    idem_get_stats(&rx, &stats);
    idem_get_state(&rx, state, sizeof state);
    plat_report(&stats, get_total(state));
    return 0;
}
