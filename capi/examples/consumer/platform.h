/* What the receive path (receive.c) needs from its platform: a connection to the
 * broker, a clock, the flash, and a place to note each applied message's id. posix.c
 * gives them with a TCP socket and a file; cortex_m.c with stubs, to link for a chip. */
#ifndef CONSUMER_PLATFORM_H
#define CONSUMER_PLATFORM_H

#include <stddef.h>
#include <stdint.h>

#include "idem_mqtt.h"

/* The session the receive path runs. */
struct session {
    /* IDEM_MQTT_3_1_1 or IDEM_MQTT_5. */
    uint8_t protocol;
    const char *client_id;
    const char *topic;
    uint8_t qos;
    /* The run ends after this long without bytes from the broker. */
    uint32_t idle_ms;
};

/* Opens a connection to the broker: 0, or -1 (the platform said why). */
int plat_connect(void);
/* Up to `cap` bytes from the broker, waiting at most `wait_ms`: their count, 0 if
 * none came, -1 once the connection is closed. */
long plat_recv(uint8_t *buf, size_t cap, int wait_ms);
/* Sends all `len` bytes: 0, or -1 once the connection is closed. */
int plat_send(const uint8_t *bytes, size_t len);
void plat_close(void);
uint64_t plat_now_ms(void);
void plat_sleep_ms(uint32_t ms);
/* The flash the receiver keeps its journal on. */
const idem_flash *plat_flash(void);
/* The ids log: message `n` (1, 2, ...) applied, with this id. A line must reach its
 * storage before the flash record that applies it (posix.c syncs it before the next
 * flash write). */
void plat_applied(uint32_t n, const char *id, size_t id_len);
/* At start: the flash counts `applied` messages; log lines past them are dropped. */
void plat_applied_keep(uint32_t applied);
/* One line for a person (stderr on POSIX). */
void plat_say(const char *what, const char *why);
/* The run's figures, at its end. */
void plat_report(const idem_stats *s, int64_t total);

/* The receive path: runs `s` until the broker has been quiet for s->idle_ms. Returns
 * the process's exit code: 0 done, 1 failure. */
int consume(const struct session *s);

#endif
