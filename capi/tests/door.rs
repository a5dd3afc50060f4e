//! The C door driven from Rust through its extern functions, as a C caller drives it:
//! a QoS 2 exchange whose PUBREC and PUBCOMP are handed out only after the sync that
//! follows their record, and bad input of every kind (null pointers, a geometry the
//! journal cannot use, a state too large, a write callback that fails, garbage from the
//! socket), each answered with a code and a sentence, never a crash.

use core::ffi::{CStr, c_int, c_void};
use std::ptr::{null, null_mut};

use idem_mqtt_c::*;

const PAGE: usize = IDEM_PAGE as usize;

/// A RAM flash with NOR's rules and a record of what was done, in order.
struct Mem {
    bytes: Vec<u8>,
    fail_write: bool,
    ops: Vec<char>,
}

fn mem(ctx: *mut c_void) -> &'static mut Mem {
    // SAFETY: every table in this file passes a live `Mem` as its context.
    unsafe { &mut *ctx.cast::<Mem>() }
}

unsafe extern "C" fn read(ctx: *mut c_void, addr: u32, buf: *mut u8, len: usize) -> c_int {
    let m = mem(ctx);
    // SAFETY: the door passes a buffer of `len` bytes.
    let buf = unsafe { std::slice::from_raw_parts_mut(buf, len) };
    buf.copy_from_slice(&m.bytes[addr as usize..addr as usize + len]);
    0
}

unsafe extern "C" fn write(ctx: *mut c_void, addr: u32, bytes: *const u8, len: usize) -> c_int {
    let m = mem(ctx);
    if m.fail_write {
        return -5;
    }
    m.ops.push('w');
    // SAFETY: the door passes `len` bytes.
    let bytes = unsafe { std::slice::from_raw_parts(bytes, len) };
    for (i, b) in bytes.iter().enumerate() {
        m.bytes[addr as usize + i] &= b;
    }
    0
}

unsafe extern "C" fn erase(ctx: *mut c_void, addr: u32) -> c_int {
    let m = mem(ctx);
    m.ops.push('e');
    m.bytes[addr as usize..addr as usize + 1024].fill(0xFF);
    0
}

unsafe extern "C" fn sync(ctx: *mut c_void) -> c_int {
    mem(ctx).ops.push('s');
    0
}

/// The effect: adds the payload's first byte to a 1-byte state; `x` is rejected, `d` a
/// duplicate.
unsafe extern "C" fn effect(
    _: *mut c_void,
    payload: *const u8,
    len: usize,
    state: *mut u8,
    state_len: usize,
) -> c_int {
    // SAFETY: the door passes `len` and `state_len` bytes.
    let (p, s) = unsafe {
        (
            std::slice::from_raw_parts(payload, len),
            std::slice::from_raw_parts_mut(state, state_len),
        )
    };
    match p.first() {
        Some(b'x') | None => IDEM_REJECTED,
        Some(b'd') => IDEM_DUPLICATE,
        Some(&b) => {
            s[0] = s[0].wrapping_add(b - b'0');
            IDEM_APPLIED
        }
    }
}

fn new_mem() -> Box<Mem> {
    Box::new(Mem {
        bytes: vec![0xFF; 4 * PAGE],
        fail_write: false,
        ops: Vec::new(),
    })
}

fn table(m: &mut Mem) -> idem_flash {
    idem_flash {
        ctx: (m as *mut Mem).cast(),
        read: Some(read),
        write: Some(write),
        erase: Some(erase),
        sync: Some(sync),
        capacity: (4 * PAGE) as u32,
        write_size: 4,
        erase_size: 1024,
        region_start: 0,
        region_size: (4 * PAGE) as u32,
    }
}

fn app(state_size: usize) -> idem_app {
    idem_app {
        ctx: null_mut(),
        effect: Some(effect),
        initial_state: null(),
        state_size,
        state_tag: 7,
    }
}

fn config() -> idem_config {
    idem_config {
        protocol: IDEM_MQTT_3_1_1,
        qos: 2,
        keep_alive_s: 60,
        client_id: c"dev-1".as_ptr(),
        topic: c"payments".as_ptr(),
        session_expiry_s: 0,
    }
}

fn receiver() -> Box<idem_receiver> {
    // SAFETY: `idem_receiver` is plain bytes, and all zeros is "not opened".
    unsafe { Box::new(std::mem::zeroed()) }
}

fn open(rx: &mut idem_receiver, f: &idem_flash, a: &idem_app) -> c_int {
    // SAFETY: valid pointers to live values.
    unsafe { idem_open(rx, &config(), f, a) }
}

/// Feeds `bytes`; the status, and the output handed out then (taken as sent).
fn input(rx: &mut idem_receiver, bytes: &[u8]) -> (c_int, Vec<u8>) {
    let mut taken = 0;
    // SAFETY: valid pointers; `bytes` is `bytes.len()` long.
    let rc = unsafe { idem_input(rx, bytes.as_ptr(), bytes.len(), &mut taken) };
    (rc, output(rx))
}

fn output(rx: &mut idem_receiver) -> Vec<u8> {
    let (mut p, mut n) = (null(), 0);
    // SAFETY: valid pointers.
    assert_eq!(unsafe { idem_output(rx, &mut p, &mut n) }, IDEM_OK);
    // SAFETY: the door hands out `n` bytes at `p`.
    let out = unsafe { std::slice::from_raw_parts(p, n) }.to_vec();
    // SAFETY: an opened receiver.
    assert_eq!(unsafe { idem_sent(rx, n) }, IDEM_OK);
    out
}

fn publish2(pid: u16, payload: &[u8]) -> Vec<u8> {
    let topic = b"payments";
    let mut p = vec![0x34, (2 + topic.len() + 2 + payload.len()) as u8, 0, 8];
    p.extend_from_slice(topic);
    p.extend_from_slice(&pid.to_be_bytes());
    p.extend_from_slice(payload);
    p
}

fn stats(rx: &mut idem_receiver) -> idem_stats {
    let mut s = idem_stats::default();
    // SAFETY: valid pointers.
    assert_eq!(unsafe { idem_get_stats(rx, &mut s) }, IDEM_OK);
    s
}

/// A receiver connected and subscribed on `m`.
fn session(m: &mut Mem) -> Box<idem_receiver> {
    let mut rx = receiver();
    assert_eq!(open(&mut rx, &table(m), &app(1)), IDEM_OK);
    // SAFETY: an opened receiver.
    assert_eq!(unsafe { idem_connect(&mut *rx) }, IDEM_OK);
    let connect = output(&mut rx);
    assert_eq!(
        (connect[0], &connect[connect.len() - 5..]),
        (0x10, &b"dev-1"[..])
    );
    let (rc, subscribe) = input(&mut rx, &[0x20, 2, 0, 0]);
    assert_eq!((rc, subscribe[0]), (IDEM_OK, 0x82));
    assert_eq!(input(&mut rx, &[0x90, 3, 0, 1, 2]), (IDEM_OK, vec![]));
    rx
}

#[test]
fn a_qos2_exchange_hands_out_pubrec_and_pubcomp_only_after_their_record_is_synced() {
    let mut m = new_mem();
    let mut rx = session(&mut m);
    m.ops.clear();
    assert_eq!(
        input(&mut rx, &publish2(1, b"5")),
        (IDEM_OK, vec![0x50, 2, 0, 1])
    );
    // Written (the record's units, its check word last), then synced, then PUBREC.
    assert_eq!(m.ops.last(), Some(&'s'));
    assert_eq!(m.ops.iter().filter(|&&o| o == 's').count(), 1);
    // The broker sends it again before PUBREL: PUBREC again, nothing applied or written.
    m.ops.clear();
    let mut again = publish2(1, b"5");
    again[0] |= 0x08;
    assert_eq!(input(&mut rx, &again), (IDEM_OK, vec![0x50, 2, 0, 1]));
    assert!(m.ops.is_empty());
    assert_eq!(
        input(&mut rx, &[0x62, 2, 0, 1]),
        (IDEM_OK, vec![0x70, 2, 0, 1])
    );
    assert_eq!(m.ops.last(), Some(&'s'));
    // A duplicate by the effect's rule, and a rejected payload: counted, acknowledged.
    assert_eq!(input(&mut rx, &publish2(2, b"d")).1, vec![0x50, 2, 0, 2]);
    assert_eq!(input(&mut rx, &publish2(3, b"x")).1, vec![0x50, 2, 0, 3]);
    let s = stats(&mut rx);
    assert_eq!(
        (
            s.applied,
            s.duplicates,
            s.rejected,
            s.held,
            s.held_again,
            s.redeliveries
        ),
        (1, 1, 1, 2, 1, 1)
    );
    assert_eq!(
        (s.session_present, s.granted_qos, s.resumed, s.subscribed),
        (0, 2, 0, 1)
    );
    // A reset: the state and the held identifiers come back from the flash.
    let mut rx = receiver();
    assert_eq!(open(&mut rx, &table(&mut m), &app(1)), IDEM_OK);
    let mut state = [0u8; 1];
    // SAFETY: valid pointers, one byte.
    let rc = unsafe { idem_get_state(&mut *rx, state.as_mut_ptr(), 1) };
    assert_eq!(rc, IDEM_OK);
    let s = stats(&mut rx);
    assert_eq!(
        (state[0], s.applied, s.held, s.resumed, s.subscribed),
        (5, 1, 2, 1, 0)
    );
}

#[test]
fn one_fed_buffer_is_one_sync_and_a_release_rides_in_the_next_record() {
    let mut m = new_mem();
    let mut rx = session(&mut m);
    let before = stats(&mut rx);
    m.ops.clear();
    // PUBLISH 1, PUBLISH 2, PUBREL 1, PUBLISH 3 in one read.
    let mut bytes = publish2(1, b"5");
    bytes.extend_from_slice(&publish2(2, b"4"));
    bytes.extend_from_slice(&[0x62, 2, 0, 1]);
    bytes.extend_from_slice(&publish2(3, b"3"));
    // PUBCOMP 1 goes with PUBLISH 3's record, before its PUBREC; all after one sync.
    assert_eq!(
        input(&mut rx, &bytes),
        (
            IDEM_OK,
            vec![0x50, 2, 0, 1, 0x50, 2, 0, 2, 0x70, 2, 0, 1, 0x50, 2, 0, 3]
        )
    );
    assert_eq!(m.ops.iter().filter(|&&o| o == 's').count(), 1);
    assert_eq!(m.ops.last(), Some(&'s'));
    let s = stats(&mut rx);
    assert_eq!(
        (s.records - before.records, s.syncs - before.syncs, s.held),
        (3, 1, 2)
    );
    // PUBREL 2 and 3 in one read: no PUBLISH's record to ride in, so the group's end
    // writes both releases in one record, under one sync.
    m.ops.clear();
    assert_eq!(
        input(&mut rx, &[0x62, 2, 0, 2, 0x62, 2, 0, 3]),
        (IDEM_OK, vec![0x70, 2, 0, 2, 0x70, 2, 0, 3])
    );
    let s = stats(&mut rx);
    assert_eq!(
        (s.records - before.records, s.syncs - before.syncs, s.held),
        (4, 2, 0)
    );
    assert_eq!(m.ops.last(), Some(&'s'));
}

#[test]
fn null_pointers_and_an_unopened_receiver_get_a_code_and_a_sentence() {
    let mut m = new_mem();
    let f = table(&mut m);
    let a = app(1);
    let c = config();
    let mut rx = receiver();
    let mut taken = 0;
    let (mut p, mut n) = (null(), 0);
    // SAFETY: each call passes NULL where the door must refuse it, valid pointers else.
    unsafe {
        assert_eq!(idem_open(null_mut(), &c, &f, &a), IDEM_E_NULL);
        assert_eq!(idem_open(&mut *rx, null(), &f, &a), IDEM_E_NULL);
        assert_eq!(idem_open(&mut *rx, &c, null(), &a), IDEM_E_NULL);
        assert_eq!(idem_open(&mut *rx, &c, &f, null()), IDEM_E_NULL);
        let no_id = idem_config {
            client_id: null(),
            ..config()
        };
        assert_eq!(idem_open(&mut *rx, &no_id, &f, &a), IDEM_E_NULL);
        let no_effect = idem_app { effect: None, ..a };
        assert_eq!(idem_open(&mut *rx, &c, &f, &no_effect), IDEM_E_NULL);
        // Never opened (all zeros): every call says so.
        assert_eq!(idem_connect(&mut *rx), IDEM_E_NOT_OPEN);
        assert_eq!(
            idem_input(&mut *rx, [0u8].as_ptr(), 1, &mut taken),
            IDEM_E_NOT_OPEN
        );
        assert_eq!(idem_output(&mut *rx, &mut p, &mut n), IDEM_E_NOT_OPEN);
        assert_eq!(idem_idle(&mut *rx), IDEM_E_NOT_OPEN);
        assert_eq!(idem_connect(null_mut()), IDEM_E_NULL);
        assert_eq!(idem_input(null_mut(), null(), 0, &mut taken), IDEM_E_NULL);
        assert_eq!(idem_output(&mut *rx, null_mut(), &mut n), IDEM_E_NULL);
        assert_eq!(idem_get_stats(&mut *rx, null_mut()), IDEM_E_NULL);
        assert_eq!(idem_get_state(&mut *rx, null_mut(), 0), IDEM_E_NULL);
        assert_eq!(idem_close(null_mut()), IDEM_E_NULL);
    }
    for code in [IDEM_E_NULL, IDEM_E_NOT_OPEN, -99, 7] {
        // SAFETY: a static NUL-terminated string.
        let s = unsafe { CStr::from_ptr(idem_strerror(code)) }
            .to_str()
            .unwrap();
        let want = match code {
            IDEM_E_NULL => "a pointer argument was NULL",
            IDEM_E_NOT_OPEN => "the receiver was not opened by idem_open (or its open failed)",
            _ => "not a status code of idem",
        };
        assert_eq!(s, want);
    }
}

#[test]
fn a_geometry_the_journal_cannot_use_a_state_too_large_and_a_protocol_not_mqtts_are_refused_at_open()
 {
    let mut m = new_mem();
    let good = table(&mut m);
    let bad = [
        idem_flash {
            write_size: 3,
            ..good
        },
        idem_flash {
            write_size: 64,
            ..good
        },
        idem_flash {
            erase_size: 8192,
            ..good
        },
        idem_flash {
            erase_size: 2,
            ..good
        },
        idem_flash {
            region_size: PAGE as u32,
            ..good
        },
        idem_flash {
            region_start: 512,
            ..good
        },
        idem_flash {
            capacity: (3 * PAGE) as u32,
            ..good
        },
        idem_flash {
            erase: None,
            ..good
        },
    ];
    let mut rx = receiver();
    for (i, f) in bad.iter().enumerate() {
        assert_eq!(open(&mut rx, f, &app(1)), IDEM_E_GEOMETRY, "geometry {i}");
    }
    let a = app(IDEM_STATE_MAX + 1);
    assert_eq!(open(&mut rx, &good, &a), IDEM_E_STATE_SIZE);
    // SAFETY: an unopened receiver.
    assert_eq!(unsafe { idem_connect(&mut *rx) }, IDEM_E_NOT_OPEN);
    let mut c = config();
    for (protocol, qos, id, want) in [
        (3, 2, c"dev-1", IDEM_E_PROTOCOL),
        (6, 2, c"dev-1", IDEM_E_PROTOCOL),
        (IDEM_MQTT_3_1_1, 3, c"dev-1", IDEM_E_CONFIG),
        (IDEM_MQTT_3_1_1, 2, c"", IDEM_E_CONFIG),
    ] {
        c.protocol = protocol;
        c.qos = qos;
        c.client_id = id.as_ptr();
        // SAFETY: valid pointers.
        assert_eq!(unsafe { idem_open(&mut *rx, &c, &good, &app(1)) }, want);
    }
    let long = std::ffi::CString::new(vec![b'a'; IDEM_MAX_CLIENT_ID + 1]).unwrap();
    c = idem_config {
        client_id: long.as_ptr(),
        ..config()
    };
    // SAFETY: valid pointers.
    let rc = unsafe { idem_open(&mut *rx, &c, &good, &app(1)) };
    assert_eq!(rc, IDEM_E_CONFIG);
    // A flash that holds a 1-byte state refuses a 2-byte one, and another state tag.
    let mut rx = session(&mut m);
    input(&mut rx, &publish2(1, b"1"));
    assert_eq!(open(&mut rx, &table(&mut m), &app(2)), IDEM_E_STATE_SIZE);
    let retagged = idem_app {
        state_tag: 8,
        ..app(1)
    };
    assert_eq!(open(&mut rx, &table(&mut m), &retagged), IDEM_E_JOURNAL);
    assert_eq!(open(&mut rx, &table(&mut m), &app(1)), IDEM_OK);
}

#[test]
fn a_write_that_fails_acknowledges_nothing_and_stops_the_receiver_until_it_is_opened_again() {
    let mut m = new_mem();
    let mut rx = session(&mut m);
    m.fail_write = true;
    assert_eq!(
        input(&mut rx, &publish2(1, b"4")),
        (IDEM_E_FLASH_WRITE, vec![])
    );
    assert_eq!(
        input(&mut rx, &[0x62, 2, 0, 1]),
        (IDEM_E_FLASH_WRITE, vec![])
    );
    // SAFETY: an opened receiver.
    assert_eq!(unsafe { idem_connect(&mut *rx) }, IDEM_E_FLASH_WRITE);
    // SAFETY: a static NUL-terminated string.
    let why = unsafe { CStr::from_ptr(idem_strerror(IDEM_E_FLASH_WRITE)) };
    assert!(
        why.to_str()
            .unwrap()
            .starts_with("the flash's write callback failed")
    );
    // Opened again on a flash that works: the broker's resend is applied, once.
    m.fail_write = false;
    let mut rx = session(&mut m);
    assert_eq!(stats(&mut rx).applied, 0);
    assert_eq!(input(&mut rx, &publish2(1, b"4")).1, vec![0x50, 2, 0, 1]);
    assert_eq!((stats(&mut rx).applied, stats(&mut rx).held), (1, 1));
}

#[test]
fn garbage_from_the_socket_closes_the_connection_and_never_crashes() {
    let mut m = new_mem();
    let mut rx = session(&mut m);
    // A CONNECT (a server never sends one), a reserved type, a PUBREL with bad flags,
    // a remaining length of five bytes.
    for bad in [
        &[0x10u8, 0][..],
        &[0xF0, 0],
        &[0x60, 2, 0, 1],
        &[0x30, 0xFF, 0xFF, 0xFF, 0xFF, 0x01],
    ] {
        assert_eq!(
            input(&mut rx, bad),
            (IDEM_E_MALFORMED, vec![]),
            "{bad:02x?}"
        );
        // Stopped until the next connection.
        assert_eq!(input(&mut rx, &[0xD0, 0]).0, IDEM_E_MALFORMED);
        // SAFETY: an opened receiver.
        assert_eq!(unsafe { idem_connect(&mut *rx) }, IDEM_OK);
        output(&mut rx);
        assert_eq!(input(&mut rx, &[0x20, 2, 1, 0]).1[0], 0x82);
    }
    // A PUBLISH whose 1,000-byte topic runs past the input buffer: its identifier never
    // arrives, so it cannot even be acknowledged. The connection closes (before, the full
    // buffer took nothing more, `taken` 0, and the C side's feed loop spun).
    let mut long = vec![0x34, 0xF0, 0x07, 0x03, 0xE8];
    long.extend_from_slice(&[b'a'; 1000]);
    assert_eq!(input(&mut rx, &long), (IDEM_E_MALFORMED, vec![]));
    assert_eq!(input(&mut rx, &long[455..]).0, IDEM_E_MALFORMED);
    // SAFETY: an opened receiver.
    assert_eq!(unsafe { idem_connect(&mut *rx) }, IDEM_OK);
    output(&mut rx);
    assert_eq!(input(&mut rx, &[0x20, 2, 1, 0]).1[0], 0x82);
    // 20,000 seeded byte strings after a CONNACK: a known code each, never a panic.
    let codes = garbage(&mut rx, 0x9E37_79B9_7F4A_7C15, &[0x20, 2, 1, 0]);
    let seen: Vec<c_int> = codes.keys().copied().collect();
    assert!(
        seen.iter()
            .all(|c| [IDEM_OK, IDEM_E_MALFORMED, IDEM_E_BROKER, IDEM_E_REFUSED].contains(c)),
        "{codes:?}"
    );
    assert!(codes[&IDEM_E_MALFORMED] > 10_000, "{codes:?}");
}

/// 20,000 seeded byte strings of 1 to 24 bytes, each on a new connection after
/// `connack`: how many got each status.
fn garbage(
    rx: &mut idem_receiver,
    mut x: u64,
    connack: &[u8],
) -> std::collections::BTreeMap<c_int, u32> {
    let mut codes = std::collections::BTreeMap::new();
    for _ in 0..20_000 {
        // SAFETY: an opened receiver.
        assert_eq!(unsafe { idem_connect(rx) }, IDEM_OK);
        output(rx);
        input(rx, connack);
        let mut bytes = [0u8; 24];
        for b in &mut bytes {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *b = x as u8;
        }
        let rc = input(rx, &bytes[..(x % 24) as usize + 1]).0;
        *codes.entry(rc).or_insert(0u32) += 1;
    }
    codes
}

/// The receiver a reentrant effect calls, and what the call returned.
struct Reentrant {
    rx: *mut idem_receiver,
    got: c_int,
}

unsafe extern "C" fn reentrant(
    ctx: *mut c_void,
    _: *const u8,
    _: usize,
    _: *mut u8,
    _: usize,
) -> c_int {
    // SAFETY: the test passes a live `Reentrant`.
    let r = unsafe { &mut *ctx.cast::<Reentrant>() };
    let mut s = idem_stats::default();
    // SAFETY: valid pointers; the door must refuse the call.
    r.got = unsafe { idem_get_stats(r.rx, &mut s) };
    IDEM_APPLIED
}

#[test]
fn an_effect_that_calls_the_library_is_refused_and_the_message_still_decided() {
    let mut m = new_mem();
    let mut rx = receiver();
    let mut r = Reentrant {
        rx: &mut *rx,
        got: IDEM_OK,
    };
    let a = idem_app {
        ctx: (&mut r as *mut Reentrant).cast(),
        effect: Some(reentrant),
        ..app(1)
    };
    assert_eq!(open(&mut rx, &table(&mut m), &a), IDEM_OK);
    // SAFETY: an opened receiver.
    assert_eq!(unsafe { idem_connect(&mut *rx) }, IDEM_OK);
    output(&mut rx);
    input(&mut rx, &[0x20, 2, 0, 0]);
    input(&mut rx, &[0x90, 3, 0, 1, 2]);
    assert_eq!(
        input(&mut rx, &publish2(1, b"1")),
        (IDEM_OK, vec![0x50, 2, 0, 1])
    );
    assert_eq!(r.got, IDEM_E_REENTERED);
    assert_eq!(stats(&mut rx).applied, 1);
}

fn config5(session_expiry_s: u32) -> idem_config {
    idem_config {
        protocol: IDEM_MQTT_5,
        session_expiry_s,
        ..config()
    }
}

/// A QoS 2 PUBLISH at MQTT 5 on `payments`, with the property section `props` (its
/// length byte first).
fn publish5(pid: u16, props: &[u8], payload: &[u8]) -> Vec<u8> {
    let topic = b"payments";
    let len = 2 + topic.len() + 2 + props.len() + payload.len();
    let mut p = vec![0x34, len as u8, 0, 8];
    p.extend_from_slice(topic);
    p.extend_from_slice(&pid.to_be_bytes());
    p.extend_from_slice(props);
    p.extend_from_slice(payload);
    p
}

/// The receiver's refusal or DISCONNECT in words (`idem_reason`).
fn reason(rx: &mut idem_receiver) -> String {
    let mut buf = [0 as core::ffi::c_char; 64];
    // SAFETY: valid pointers, 64 bytes.
    assert_eq!(unsafe { idem_reason(rx, buf.as_mut_ptr(), 64) }, IDEM_OK);
    // SAFETY: the door wrote a NUL-terminated string.
    unsafe { CStr::from_ptr(buf.as_ptr()) }
        .to_str()
        .unwrap()
        .to_string()
}

/// A receiver at MQTT 5 (session expiry `expiry`) on `m`, connected: CONNECT sent,
/// CONNACK (`connack`) given; the status and the output it handed out.
fn connect5(m: &mut Mem, expiry: u32, connack: &[u8]) -> (Box<idem_receiver>, c_int, Vec<u8>) {
    let mut rx = receiver();
    // SAFETY: valid pointers to live values.
    let rc = unsafe { idem_open(&mut *rx, &config5(expiry), &table(m), &app(1)) };
    assert_eq!(rc, IDEM_OK);
    // SAFETY: an opened receiver.
    assert_eq!(unsafe { idem_connect(&mut *rx) }, IDEM_OK);
    output(&mut rx);
    let (rc, out) = input(&mut rx, connack);
    (rx, rc, out)
}

/// Connected and subscribed at MQTT 5, session expiry 3,600 s.
fn session5(m: &mut Mem) -> Box<idem_receiver> {
    let (mut rx, rc, subscribe) = connect5(m, 3600, &[0x20, 3, 0, 0, 0]);
    // SUBSCRIBE, pid 1, no properties, the filter, options: QoS 2 (MQTT 5 §3.8.3.1).
    let mut want = vec![0x82, 14, 0, 1, 0, 0, 8];
    want.extend_from_slice(b"payments");
    want.push(2);
    assert_eq!((rc, subscribe), (IDEM_OK, want));
    assert_eq!(input(&mut rx, &[0x90, 4, 0, 1, 0, 2]), (IDEM_OK, vec![]));
    rx
}

#[test]
fn at_mqtt_5_connect_asks_the_session_expiry_and_a_receive_maximum_of_the_places() {
    let mut m = new_mem();
    let mut rx = receiver();
    // SAFETY: valid pointers to live values.
    let rc = unsafe { idem_open(&mut *rx, &config5(3600), &table(&mut m), &app(1)) };
    assert_eq!(rc, IDEM_OK);
    // SAFETY: an opened receiver.
    assert_eq!(unsafe { idem_connect(&mut *rx) }, IDEM_OK);
    let connect = output(&mut rx);
    // MQTT 5 §3.1.2: "MQTT", level 5, flags 0 (Clean Start 0), keep-alive 60; the
    // properties: Session Expiry Interval 3,600, Receive Maximum 16, Maximum Packet
    // Size 0xFFFFFFFF; the client identifier.
    let mut want = vec![0x10, 31, 0, 4, b'M', b'Q', b'T', b'T', 5, 0, 0, 60, 13];
    want.extend_from_slice(&[0x11, 0, 0, 0x0E, 0x10, 0x21, 0, 16]);
    want.extend_from_slice(&[0x27, 0xFF, 0xFF, 0xFF, 0xFF, 0, 5]);
    want.extend_from_slice(b"dev-1");
    assert_eq!(connect, want);
    assert_eq!(IDEM_PLACES, 16);
    // The broker's CONNACK sets a shorter interval (§3.2.2.3.2): the one in force.
    let (mut rx, rc, _) = connect5(&mut m, 3600, &[0x20, 8, 0, 0, 5, 0x11, 0, 0, 0, 60]);
    assert_eq!((rc, stats(&mut rx).session_expiry_s), (IDEM_OK, 60));
    let (mut rx, _, _) = connect5(&mut m, IDEM_SESSION_NEVER, &[0x20, 3, 0, 0, 0]);
    assert_eq!(stats(&mut rx).session_expiry_s, u32::MAX);
    // 0 would end the session, with what is in flight, at every disconnect: refused.
    // SAFETY: valid pointers to live values.
    let rc = unsafe { idem_open(&mut *rx, &config5(0), &table(&mut m), &app(1)) };
    assert_eq!(rc, IDEM_E_SESSION_EXPIRY);
    // SAFETY: a static NUL-terminated string.
    let why = unsafe { CStr::from_ptr(idem_strerror(rc)) }
        .to_str()
        .unwrap();
    assert!(
        why.starts_with("at MQTT 5 the session expiry interval must be above 0"),
        "{why}"
    );
    // At MQTT 3.1.1 the interval is not read: 0 opens.
    assert_eq!(open(&mut rx, &table(&mut m), &app(1)), IDEM_OK);
    assert_eq!(stats(&mut rx).session_expiry_s, 0);
}

#[test]
fn at_mqtt_5_a_qos2_exchange_reads_past_properties_and_answers_an_unknown_pubrel_0x92() {
    let mut m = new_mem();
    let mut rx = session5(&mut m);
    m.ops.clear();
    // Payload Format Indicator 1 and Message Expiry Interval 60 (§3.3.2.3).
    let props = [7, 0x01, 1, 0x02, 0, 0, 0, 60];
    assert_eq!(
        input(&mut rx, &publish5(1, &props, b"5")),
        (IDEM_OK, vec![0x50, 2, 0, 1])
    );
    assert_eq!(m.ops.last(), Some(&'s'));
    // A PUBREL with reason 0 and no properties, the long form (§3.6.2).
    assert_eq!(
        input(&mut rx, &[0x62, 4, 0, 1, 0, 0]),
        (IDEM_OK, vec![0x70, 2, 0, 1])
    );
    // A PUBREL of an identifier not held: PUBCOMP 0x92, Packet Identifier not found.
    m.ops.clear();
    assert_eq!(
        input(&mut rx, &[0x62, 2, 0, 7]),
        (IDEM_OK, vec![0x70, 3, 0, 7, 0x92])
    );
    assert!(m.ops.is_empty());
    let s = stats(&mut rx);
    assert_eq!((s.applied, s.held, s.granted_qos, s.reason), (1, 0, 2, 0));
    // DISCONNECT at MQTT 5 with reason 0x00, which its short form says (§3.14.2.1).
    // SAFETY: an opened receiver.
    assert_eq!(unsafe { idem_disconnect(&mut *rx) }, IDEM_OK);
    assert_eq!(output(&mut rx), vec![0xE0, 0]);
}

#[test]
fn at_mqtt_5_a_broker_past_the_receive_maximum_waits_in_order_then_is_counted_and_its_reconnection_says_0x93()
 {
    let mut m = new_mem();
    let mut rx = session5(&mut m);
    for pid in 1..=IDEM_PLACES as u16 {
        assert_eq!(input(&mut rx, &publish5(pid, &[0], b"1")).0, IDEM_OK);
    }
    // Past the places: each waits, unanswered and undecided, in the queue.
    let waiting = IDEM_PLACES + IDEM_WAITING;
    for pid in IDEM_PLACES as u16 + 1..=waiting as u16 {
        assert_eq!(
            input(&mut rx, &publish5(pid, &[0], b"1")),
            (IDEM_OK, vec![])
        );
    }
    // One more: the queue is full, left unanswered and unapplied, counted.
    let last = waiting as u16 + 1;
    assert_eq!(
        input(&mut rx, &publish5(last, &[0], b"1")),
        (IDEM_OK, vec![])
    );
    let s = stats(&mut rx);
    assert_eq!(
        (s.applied, s.waiting, s.most_waiting, s.unanswered),
        (
            IDEM_PLACES as u32,
            IDEM_WAITING as u32,
            IDEM_WAITING as u32,
            1
        )
    );
    // Each PUBREL frees a place: its PUBCOMP, then the PUBREC of the one that waited
    // longest, after the sync that follows both records.
    for (pid, next) in (1..=IDEM_WAITING as u16).zip(IDEM_PLACES as u16 + 1..) {
        m.ops.clear();
        let [a, b] = next.to_be_bytes();
        assert_eq!(
            input(&mut rx, &[0x62, 2, 0, pid as u8]),
            (IDEM_OK, vec![0x70, 2, 0, pid as u8, 0x50, 2, a, b])
        );
        assert_eq!(m.ops.last(), Some(&'s'));
    }
    // The queue is empty and a PUBREL frees a place: no PUBLISH's record to ride in, so
    // the buffer's end writes its release (its PUBCOMP leaves with the buffer's
    // answers); then the one left unanswered is asked for again by a reconnection.
    let freed = IDEM_WAITING as u8 + 1;
    assert_eq!(
        input(&mut rx, &[0x62, 2, 0, freed]),
        (IDEM_OK, vec![0x70, 2, 0, freed])
    );
    // SAFETY: an opened receiver.
    assert_eq!(unsafe { idem_idle(&mut *rx) }, IDEM_RECONNECT);
    assert_eq!(output(&mut rx), vec![0xE0, 1, 0x93]);
    let s = stats(&mut rx);
    assert_eq!(
        (
            s.applied,
            s.waited,
            s.waiting,
            s.unanswered,
            s.past_receive_maximum,
            s.resend_reconnects
        ),
        (
            IDEM_PLACES as u32 + IDEM_WAITING as u32,
            IDEM_WAITING as u64,
            0,
            1,
            1 + IDEM_WAITING as u64,
            1
        )
    );
}

#[test]
fn at_mqtt_5_garbage_properties_and_a_refusal_get_a_code_and_a_sentence_never_a_crash() {
    let mut m = new_mem();
    let mut rx = session5(&mut m);
    for (what, bad) in [
        (
            "a property MQTT 5 does not define",
            publish5(1, &[2, 0x7F, 0], b"1"),
        ),
        (
            "a property section past the packet",
            publish5(2, &[40, 0x01], b"1"),
        ),
        (
            "a property cut inside its value",
            publish5(3, &[2, 0x02, 0], b"1"),
        ),
        (
            "a Topic Alias in place of a topic",
            vec![0x34, 5, 0, 0, 0, 1, 0],
        ),
        (
            "a CONNACK reason past its section",
            vec![0x20, 6, 0, 0, 9, 0x11, 0, 0],
        ),
        ("a SUBACK of no reason code", vec![0x90, 3, 0, 1, 0]),
    ] {
        assert_eq!(input(&mut rx, &bad), (IDEM_E_MALFORMED, vec![]), "{what}");
        assert_eq!(stats(&mut rx).applied, 0, "{what}");
        // SAFETY: an opened receiver.
        assert_eq!(unsafe { idem_connect(&mut *rx) }, IDEM_OK);
        output(&mut rx);
        assert_eq!(input(&mut rx, &[0x20, 3, 1, 0, 0]).1[0], 0x82, "{what}");
    }
    // A refusal, a refused subscription, a DISCONNECT: each named with its reason.
    for (answer, code, words) in [
        (
            &[0x20, 3, 0, 0x87, 0][..],
            IDEM_E_REFUSED,
            "CONNACK 0x87 Not authorized",
        ),
        (
            &[0x20, 2, 0, 1],
            IDEM_E_REFUSED,
            "CONNACK 0x01 Connection Refused, unacceptable protocol version",
        ),
        (
            &[0x90, 4, 0, 1, 0, 0x97],
            IDEM_E_REFUSED,
            "SUBACK 0x97 Quota exceeded",
        ),
        (
            &[0xE0, 1, 0x8E],
            IDEM_E_DISCONNECTED,
            "DISCONNECT 0x8E Session taken over",
        ),
    ] {
        let (mut rx, mut rc, _) = match answer[0] {
            0x20 => connect5(&mut m, 60, answer),
            _ => connect5(&mut m, 60, &[0x20, 3, 1, 0, 0]),
        };
        if answer[0] != 0x20 {
            rc = input(&mut rx, answer).0;
        }
        assert_eq!((rc, reason(&mut rx)), (code, words.to_string()));
        let hex = &words[words.find("0x").unwrap() + 2..][..2];
        assert_eq!(stats(&mut rx).reason, u8::from_str_radix(hex, 16).unwrap());
        // SAFETY: a static NUL-terminated string.
        let why = unsafe { CStr::from_ptr(idem_strerror(rc)) }
            .to_str()
            .unwrap();
        assert!(why.contains("idem_reason names"), "{why}");
        // Stopped until the next connection, which forgets the reason.
        assert_eq!(input(&mut rx, &[0xD0, 0]).0, code);
        // SAFETY: an opened receiver.
        assert_eq!(unsafe { idem_connect(&mut *rx) }, IDEM_OK);
        assert_eq!(reason(&mut rx), "");
    }
    // A short buffer gets what fits and IDEM_E_ARGUMENT.
    let (mut rx, _, _) = connect5(&mut m, 60, &[0x20, 3, 0, 0x87, 0]);
    let mut buf = [0 as core::ffi::c_char; 8];
    // SAFETY: valid pointers, 8 bytes.
    let rc = unsafe { idem_reason(&mut *rx, buf.as_mut_ptr(), 8) };
    assert_eq!(rc, IDEM_E_ARGUMENT);
    // SAFETY: NUL-terminated by the door.
    assert_eq!(unsafe { CStr::from_ptr(buf.as_ptr()) }, c"CONNACK");
    // 20,000 seeded byte strings after a CONNACK at MQTT 5: a known code each.
    let mut rx = session5(&mut m);
    let codes = garbage(&mut rx, 0x2545_F491_4F6C_DD1D, &[0x20, 3, 1, 0, 0]);
    // Seeded, so exact: most are not a packet, one a packet out of place (IDEM_E_BROKER),
    // the rest taken (a PINGRESP) or a packet not yet whole, waiting for more bytes.
    let want = [
        (IDEM_E_BROKER, 1),
        (IDEM_E_MALFORMED, 19_302),
        (IDEM_OK, 697),
    ];
    assert_eq!(codes, want.into_iter().collect(), "{codes:?}");
}

#[test]
fn every_reason_in_words_fits_the_64_bytes_idem_reason_promises() {
    use idem_mqtt::codec::Protocol;
    let mut longest = String::new();
    for protocol in [Protocol::V311, Protocol::V5] {
        for kind in [2, 9, 14] {
            for code in 0..=255 {
                let mut words = heapless::String::<63>::new();
                let fits = idem_mqtt_c::door::reason_words(kind, code, protocol, &mut words);
                assert!(fits.is_ok(), "{kind} {code} at {}", protocol.name());
                if words.len() > longest.len() {
                    longest = words.to_string();
                }
            }
        }
    }
    assert_eq!(
        (longest.len(), longest.as_str()),
        (
            62,
            "CONNACK 0x01 Connection Refused, unacceptable protocol version"
        )
    );
}
