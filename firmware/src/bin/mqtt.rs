//! idem on a BBC micro:bit as an MQTT 3.1.1 subscriber whose modem is the host (`idem
//! device mqtt`): the board speaks MQTT itself and keeps its session (the QoS 2
//! identifiers the broker has not released) in the same flash record as the effect, so
//! a reset applies no message twice. The host only dials, carries bytes between the UART
//! and the broker's socket, and hangs up when the board resets. Every rule is
//! `idem_board::modem::Modem`'s and `idem_mqtt`'s; this is board glue: the NVMC driver,
//! the UART, the timer that asks again after a silence (the firmware library's receive
//! loop, `idem_firmware::link`), and the RNG the id key comes from.
#![no_std]
#![no_main]

use cortex_m_rt::entry;
use idem_board::modem::{
    BoardReader, DOMAIN, FROM_BOARD_ENCODED, FROM_BOARD_MAX, FromBoard, Modem, encode,
};
use idem_board::storage::BoardLayout;
use idem_board::timing::QEMU_EFFECT_MS;
use idem_core::log::IdKey;
use idem_firmware::{IMAGE_ID, link, nvmc, rng, timer, uart};
use panic_halt as _;

/// Under QEMU (whose flash takes no time), the pause before each acknowledgement goes
/// out, about a board's flash time for the record before it, so that a reset the host
/// schedules can land between the record and its acknowledgement. None on a board.
const ACK_PACE_MS: Option<u32> = if cfg!(feature = "qemu") {
    Some(QEMU_EFFECT_MS)
} else {
    None
};

/// Whether `msg` carries PUBACK, PUBREC or PUBCOMP.
fn is_ack(msg: &FromBoard) -> bool {
    matches!(msg, FromBoard::Send(p) if matches!(p.first(), Some(0x40 | 0x50 | 0x70)))
}

fn send(uart: &mut uart::Uart, msg: &FromBoard) {
    link::send::<_, { FROM_BOARD_MAX + 4 }, FROM_BOARD_ENCODED>(uart, encode, msg);
}

#[entry]
fn main() -> ! {
    let mut uart = uart::Uart::init();
    uart.start_rx();
    let timer = timer::Timer::init();
    let Some(mut flash) = nvmc::Nvmc::take() else {
        link::halt()
    };
    let layout = BoardLayout {
        start: 0,
        page: nvmc::PAGE as u32,
    };
    let modem = match Modem::boot(&mut flash, layout, IMAGE_ID, || rng::key().map(IdKey)) {
        Ok((modem, boot)) => {
            send(&mut uart, &boot);
            modem
        }
        Err(e) => {
            send(&mut uart, &FromBoard::Failed(e.failure()));
            link::halt()
        }
    };
    // The session (its client, receiver, packet buffer) in a static, where the size
    // test's static RAM figure counts it, not in main's frame. Taken once per boot.
    let Some(modem) = cortex_m::singleton!(: Modem = modem) else {
        link::halt()
    };
    let mut reader = BoardReader::in_domain(DOMAIN);
    loop {
        let pulled = link::receive(&mut uart, &timer, &mut reader, |uart| {
            modem.on_silence().map(|pull| send(uart, &pull)).is_some()
        });
        let Ok(msg) = pulled else {
            modem.garbled += 1;
            continue;
        };
        let mut emit = |f: &FromBoard| {
            if let Some(ms) = ACK_PACE_MS.filter(|_| is_ack(f)) {
                timer.delay_ms(ms);
            }
            send(&mut uart, f);
        };
        if let Err(e) = modem.handle(&mut flash, &msg, &mut emit) {
            send(&mut uart, &FromBoard::Failed(e.failure()));
            link::halt()
        }
    }
}
