/* The Cortex-M platform of the C consumer, for a link with arm-none-eabi-gcc and
 * newlib: the same receive path (receive.c) with stub transports. The flash is 8 KiB of
 * RAM with NOR's rules (erase sets 0xFF, a write only clears bits); the connection
 * answers nothing. A real firmware puts its network stack (lwIP, a modem's AT sockets)
 * and its flash driver here. */
#include <stdint.h>
#include <string.h>

#include "platform.h"

#define PAGE 4096u
#define CAPACITY (2u * PAGE)

static uint8_t nor[CAPACITY];
static uint64_t ticks;

int plat_connect(void) { return 0; }

long plat_recv(uint8_t *buf, size_t cap, int wait_ms) {
    (void)buf;
    (void)cap;
    ticks += (uint64_t)wait_ms;
    return 0;
}

int plat_send(const uint8_t *bytes, size_t len) {
    (void)bytes;
    (void)len;
    return 0;
}

void plat_close(void) {}
uint64_t plat_now_ms(void) { return ticks; }
void plat_sleep_ms(uint32_t ms) { ticks += ms; }

static int nor_read(void *ctx, uint32_t addr, uint8_t *buf, size_t len) {
    (void)ctx;
    memcpy(buf, nor + addr, len);
    return 0;
}

static int nor_write(void *ctx, uint32_t addr, const uint8_t *bytes, size_t len) {
    (void)ctx;
    for (size_t i = 0; i < len; i++) nor[addr + i] &= bytes[i];
    return 0;
}

static int nor_erase(void *ctx, uint32_t addr) {
    (void)ctx;
    memset(nor + addr, 0xFF, PAGE);
    return 0;
}

static const idem_flash ram_nor = {
    NULL, nor_read, nor_write, nor_erase, NULL, CAPACITY, 4, PAGE, 0, CAPACITY,
};

const idem_flash *plat_flash(void) { return &ram_nor; }
void plat_applied(uint32_t n, const char *id, size_t id_len) {
    (void)n;
    (void)id;
    (void)id_len;
}
void plat_applied_keep(uint32_t applied) { (void)applied; }
void plat_say(const char *what, const char *why) {
    (void)what;
    (void)why;
}
void plat_report(const idem_stats *s, int64_t total) {
    (void)s;
    (void)total;
}

int main(void) {
    memset(nor, 0xFF, sizeof nor);
    struct session s = {IDEM_MQTT_5, "dev-1", "payments", 2, 1000};
    return consume(&s);
}
