//! A store: the application's rule over one durable record, and the dedup rules that wrap
//! any store.
//!
//! A [`Store`] says how an event of the application's payload type changes its state,
//! which is always ONE record (the value plus whatever the store dedups with), so a crash
//! can never split them. Writing that record to flash, and when, is the consumer's job
//! ([`crate::consumer`]), following the policy the store names as [`Store::Persist`]
//! ([`crate::persist`]): after every effect, at checkpoints together with the consumer
//! position, or at checkpoints through a two-phase commit with the consumer's position
//! journal.
//!
//! The store contract is defined here: [`Store`], its [`Outcome`] and its
//! [`Rejections`]; the policies that persist a store's record ([`crate::persist`]) are
//! generic over it.
//!
//! A store decides in two steps, so that only an applied event can change its state:
//! [`Store::check`] reads the state and says [`Outcome::Applied`], [`Outcome::Skipped`]
//! (a duplicate) or [`Outcome::Rejected`] (an event the application refuses: a command out
//! of range, a payload it cannot use), and only then does [`Store::apply`] change the
//! state, for an event `check` said to apply. A rejected event moves the position past it
//! like a skip and adds one to the durable count of rejected events kept beside the state
//! ([`Store::Rejections`]). An `Err` is not a verdict on the event: a bounded memory that
//! is full, a value past its range. The step stops, nothing is written, and the next step
//! tries the same event again.
//!
//! The dedup rules are combinators around any store:
//!
//! | rule | skips | replay | producer retry | application resend |
//! |---|---|---|---|---|
//! | [`OffsetStamp`] | offsets not newer than its stamp | yes | no | no |
//! | [`MessageIdWindow`] | ids in a bounded window of recent ids ([`Identified`] payloads) | yes | within the window | within the window |
//! | [`UniqueKey`] | every id it ever applied, up to a capacity | yes | yes | yes |
//!
//! A store with no dedup rule of its own is at-least-once: a replay applies again. One
//! whose state carries the consumer's position (an atomic checkpoint,
//! [`crate::persist::Checkpoint`]) needs none.

use core::fmt::Debug;

use postcard::experimental::max_size::MaxSize;
use serde::{Deserialize, Serialize};

use crate::journal::{Journal, JournalError, header_size, largest_on};
use crate::log::{Event, Identified, MessageId, Offset};
use crate::persist::{
    Appendable, Appended, Covered, EachEffect, Layout, Position, new_tag, not_ours, positions_tag,
    sink_tag,
};

// The store contract lives with the policies' traits it names and that name it
// (`core/src/contract.rs`).
pub use crate::contract::{Outcome, Rejections, Store};

/// A dedup rule's state: the state of the store it wraps, and what it remembers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stamped<T> {
    /// The wrapped store's state.
    pub state: T,
    /// The highest offset applied or rejected, if any.
    pub stamp: Option<Offset>,
}

impl<T: MaxSize> MaxSize for Stamped<T> {
    const POSTCARD_MAX_SIZE: usize = T::POSTCARD_MAX_SIZE + <Option<Offset>>::POSTCARD_MAX_SIZE;
}

/// Set-if-newer around the store `S`: remembers the highest offset it applied (or
/// rejected) in the same record as `S`'s state, and skips every event that is not newer.
/// A replay after a reset is harmless; a message sent twice lands at two offsets and is
/// applied twice (that takes [`MessageIdWindow`]). The record is written after every
/// effect ([`EachEffect`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OffsetStamp<S>(pub S);

/// The mark an [`OffsetStamp`] mixes into its store's tag.
pub const STAMP_MARK: u32 = 0x03;

impl<S: Store> Store for OffsetStamp<S> {
    type Payload = S::Payload;
    type State = Stamped<S::State>;
    type Error = S::Error;
    type Rejections = S::Rejections;
    type Persist = EachEffect<Self>;
    const TAG: u32 = S::TAG ^ STAMP_MARK;

    fn check(&self, state: &Self::State, event: &Event<S::Payload>) -> Result<Outcome, S::Error> {
        if state.stamp.is_some_and(|s| event.offset <= s) {
            return Ok(Outcome::Skipped);
        }
        self.0.check(&state.state, event)
    }

    fn apply(&self, state: &mut Self::State, event: &Event<S::Payload>) {
        self.0.apply(&mut state.state, event);
        state.stamp = Some(event.offset);
    }

    fn remember(&self, state: &mut Self::State, event: &Event<S::Payload>) {
        self.0.remember(&mut state.state, event);
        state.stamp = Some(event.offset);
    }
}

/// A message-id window that is configured outside `1..=capacity`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct WindowSize {
    /// The window asked for.
    pub window: usize,
    /// The compile-time capacity.
    pub capacity: usize,
}

impl core::fmt::Display for WindowSize {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "a message-id window must hold 1 to {} ids, not {}",
            self.capacity, self.window
        )
    }
}

/// A [`UniqueKey`] table that is full, as the wrapped store's error: the event at
/// `offset` has a new key and no row is left for it. Nothing was dropped: the event is
/// not applied, and the consumer stops there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct TableFull {
    /// How many keys the table holds.
    pub capacity: usize,
    /// The event's offset.
    pub offset: Offset,
}

/// Dedup by message id around the store `S`, over a window of the last `window` distinct
/// ids applied or rejected (at most `W`, the compile-time capacity), kept in the same
/// record as `S`'s state. Its events' payloads carry the id ([`Identified`]).
///
/// Overflow policy: when the window is full, a new id evicts the oldest one, and the
/// eviction is counted in the state. A duplicate that arrives after its original was
/// evicted is no longer recognised: it is applied again. Size the window for the longest
/// gap between a message and its duplicate (a replay spans at most one checkpoint
/// interval; a producer retry, the producer's in-flight window).
///
/// With `EVICT` false it is [`UniqueKey`]: nothing is ever evicted, and a full table
/// refuses a new key with [`TableFull`], as `S`'s error (so `S::Error: From<TableFull>`;
/// the evicting window asks nothing of `S`'s error). `S`'s own `Persist` is not used:
/// the rule appends its records ([`Appended`]).
///
/// Wrap a store in one dedup rule: a window already makes a replay harmless, and the tags
/// of rules stacked in either order are not kept apart.
///
/// Each effect appends a small record (the id, `S`'s state and the window's length,
/// [`Appended`]), and recovery rebuilds the window from the newest `window` of them, so
/// the window is never rewritten whole. `S`'s state is in every record: keep it small.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessageIdWindow<S, const W: usize, const EVICT: bool = true> {
    inner: S,
    window: usize,
}

/// Insert with a unique key around the store `S`: a table with a row for each message id
/// applied or rejected (`INSERT ... ON CONFLICT DO NOTHING` on the id), up to `N` rows. A second
/// insert of a key is a no-op, so every repeat of a message, however late, is harmless:
/// the message-id rule with a memory that never forgets. The price is a row for every
/// key ever applied: a full table refuses the next new key ([`TableFull`]), where the
/// window would forget its oldest. It holds only when the key travels with the message;
/// a key the consumer makes up at each delivery would give every repeat a new row.
pub type UniqueKey<S, const N: usize> = MessageIdWindow<S, N, false>;

impl<S, const W: usize, const EVICT: bool> MessageIdWindow<S, W, EVICT> {
    /// The rule around `inner`, with a window of `window` ids, `1..=W`.
    pub fn new(inner: S, window: usize) -> Result<Self, WindowSize> {
        if window == 0 || window > W {
            return Err(WindowSize {
                window,
                capacity: W,
            });
        }
        Ok(Self { inner, window })
    }

    /// How many ids the window holds.
    pub const fn window(&self) -> usize {
        self.window
    }

    /// The store it wraps.
    pub const fn inner(&self) -> &S {
        &self.inner
    }
}

impl<S: Default, const W: usize, const EVICT: bool> Default for MessageIdWindow<S, W, EVICT> {
    /// A window of `W` ids around `S::default()`.
    fn default() -> Self {
        Self {
            inner: S::default(),
            window: W,
        }
    }
}

/// The message-id rule's state: the wrapped store's state and the window, in one record.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Windowed<T, const W: usize> {
    /// The wrapped store's state.
    pub state: T,
    /// The ids applied or rejected most recently, oldest first.
    pub seen: heapless::Vec<MessageId, W>,
    /// How many ids were evicted from the full window.
    pub evicted: u64,
}

impl<T: MaxSize, const W: usize> MaxSize for Windowed<T, W> {
    const POSTCARD_MAX_SIZE: usize = T::POSTCARD_MAX_SIZE
        + varint_len(W)
        + W * MessageId::POSTCARD_MAX_SIZE
        + u64::POSTCARD_MAX_SIZE;
}

/// The bytes of `n` as a postcard varint: what a length or count up to `n` adds to a
/// record's `POSTCARD_MAX_SIZE` (a `heapless::Vec<T, N>` takes `varint_len(N)` bytes
/// before its elements).
pub const fn varint_len(n: usize) -> usize {
    let mut len = 1;
    let mut n = n >> 7;
    while n > 0 {
        len += 1;
        n >>= 7;
    }
    len
}

impl<T, const W: usize> Windowed<T, W> {
    /// Puts `id` last, evicting the oldest while the window holds `window` ids.
    fn admit(&mut self, id: MessageId, window: usize) {
        while self.seen.len() >= window {
            // The oldest goes. On Arm by swaps: `remove(0)` would pull `memmove` into a
            // firmware (1.3 KB on a Cortex-M0); elsewhere `remove(0)` is twice as fast.
            if cfg!(target_arch = "arm") {
                for i in 1..self.seen.len() {
                    self.seen.swap(i - 1, i);
                }
                self.seen.pop();
            } else {
                self.seen.remove(0);
            }
            self.evicted += 1;
        }
        // Cannot fail: the loop above made room (window <= W).
        let _ = self.seen.push(id);
    }
}

/// What the message-id rule appends for each effect: the id, the wrapped store's state
/// and the window's scalars right after it. The window itself is rebuilt at recovery from
/// the newest `held` such records.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdApplied<T> {
    /// The id, as its 8 little-endian bytes (fixed size: a hash as a varint would take
    /// 10).
    #[serde(deserialize_with = "id_bytes")]
    pub id: [u8; 8],
    /// The wrapped store's state after it.
    pub state: T,
    /// Ids evicted from the full window so far.
    pub evicted: u64,
    /// Ids the window held after it.
    pub held: u8,
}

/// An [`IdApplied`]'s id, decoded as serde decodes a `[u8; 8]` (a tuple of 8 bytes), in
/// a loop: serde's array decoder decodes each of the 8 elements in code of its own, which
/// cost a Cortex-M0 image about 120 bytes (BENCHMARKS.md, "Firmware size").
fn id_bytes<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<[u8; 8], D::Error> {
    struct Bytes;
    impl<'de> serde::de::Visitor<'de> for Bytes {
        type Value = [u8; 8];
        fn expecting(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
            f.write_str("an array of length 8")
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<[u8; 8], A::Error> {
            let mut id = [0u8; 8];
            for (i, b) in id.iter_mut().enumerate() {
                *b = seq
                    .next_element()?
                    .ok_or_else(|| serde::de::Error::invalid_length(i, &self))?;
            }
            Ok(id)
        }
    }
    deserializer.deserialize_tuple(8, Bytes)
}

impl<T: MaxSize> MaxSize for IdApplied<T> {
    const POSTCARD_MAX_SIZE: usize =
        8 + T::POSTCARD_MAX_SIZE + u64::POSTCARD_MAX_SIZE + u8::POSTCARD_MAX_SIZE;
}

/// The marks a [`MessageIdWindow`] and a [`UniqueKey`] mix into their store's tag.
pub const WINDOW_MARK: u32 = 0x02;
/// See [`WINDOW_MARK`].
pub const UNIQUE_KEY_MARK: u32 = 0x08;

impl<S: Store<Payload: Identified>, const W: usize, const EVICT: bool>
    MessageIdWindow<S, W, EVICT>
{
    fn apply_in(&self, state: &mut Windowed<S::State, W>, event: &Event<S::Payload>) {
        state.admit(event.payload.id(), self.window);
        self.inner.apply(&mut state.state, event);
    }

    /// A rejected id takes its place in the window like an applied one, so its replay is
    /// skipped; the wrapped store remembers it too.
    fn remember_in(&self, state: &mut Windowed<S::State, W>, event: &Event<S::Payload>) {
        state.admit(event.payload.id(), self.window);
        self.inner.remember(&mut state.state, event);
    }
}

/// The window: a full window evicts its oldest id, so it never fails on its own and the
/// wrapped store's error can be anything.
impl<S: Store<Payload: Identified>, const W: usize> Store for MessageIdWindow<S, W, true> {
    type Payload = S::Payload;
    type State = Windowed<S::State, W>;
    type Error = S::Error;
    type Rejections = S::Rejections;
    type Persist = Appended<Self>;
    const TAG: u32 = S::TAG ^ WINDOW_MARK;

    fn check(&self, state: &Self::State, event: &Event<S::Payload>) -> Result<Outcome, S::Error> {
        if state.seen.contains(&event.payload.id()) {
            return Ok(Outcome::Skipped);
        }
        self.inner.check(&state.state, event)
    }

    fn apply(&self, state: &mut Self::State, event: &Event<S::Payload>) {
        self.apply_in(state, event);
    }

    fn remember(&self, state: &mut Self::State, event: &Event<S::Payload>) {
        self.remember_in(state, event);
    }
}

/// The unique-key table: a full table refuses a new key as the wrapped store's error.
impl<S, const N: usize> Store for MessageIdWindow<S, N, false>
where
    S: Store<Payload: Identified, Error: From<TableFull>>,
{
    type Payload = S::Payload;
    type State = Windowed<S::State, N>;
    type Error = S::Error;
    type Rejections = S::Rejections;
    type Persist = Appended<Self>;
    // Another rule, another tag: a table's journal is not read as a window's.
    const TAG: u32 = S::TAG ^ UNIQUE_KEY_MARK;

    fn check(&self, state: &Self::State, event: &Event<S::Payload>) -> Result<Outcome, S::Error> {
        if state.seen.contains(&event.payload.id()) {
            return Ok(Outcome::Skipped);
        }
        if state.seen.len() >= self.window {
            return Err(TableFull {
                capacity: self.window,
                offset: event.offset,
            }
            .into());
        }
        self.inner.check(&state.state, event)
    }

    fn apply(&self, state: &mut Self::State, event: &Event<S::Payload>) {
        self.apply_in(state, event);
    }

    fn remember(&self, state: &mut Self::State, event: &Event<S::Payload>) {
        self.remember_in(state, event);
    }
}

impl<S, const W: usize, const EVICT: bool> Appendable for MessageIdWindow<S, W, EVICT>
where
    S: Store<Payload: Identified>,
    Self: Store<Payload = S::Payload, State = Windowed<S::State, W>>,
{
    type Delta = IdApplied<S::State>;
    const MAX_NEEDED: u32 = {
        assert!(W <= 255, "a window's length is one byte in its records");
        W as u32
    };

    fn delta(state: &Self::State, _: &Event<S::Payload>, _: u32) -> Self::Delta {
        IdApplied {
            id: state.seen.last().map_or(0, |id| id.0).to_le_bytes(),
            state: state.state.clone(),
            evicted: state.evicted,
            held: state.seen.len() as u8,
        }
    }

    /// The state, and how many ids its window held.
    type Rebuild = (Self::State, usize);

    fn start(newest: &Self::Delta) -> (Self::Rebuild, u32) {
        let state = Windowed {
            state: newest.state.clone(),
            seen: heapless::Vec::new(),
            evicted: newest.evicted,
        };
        let held = usize::from(newest.held).min(W);
        ((state, held), held as u32)
    }

    fn fold_back((state, _): &mut Self::Rebuild, older: &Self::Delta) {
        // Newest first; `finish` puts them oldest first. (Pushing and reversing once,
        // rather than inserting at the front each time, keeps `memmove` out of a
        // firmware: 1.3 KB on a Cortex-M0.) Cannot fail: `start` asks for at most W.
        let _ = state.seen.push(MessageId(u64::from_le_bytes(older.id)));
    }

    // Out of line on bare metal: inlined, it was copied into several callers
    // (BENCHMARKS.md, "Firmware size").
    #[cfg_attr(target_os = "none", inline(never))]
    fn finish((mut state, held): Self::Rebuild) -> Option<Self::State> {
        state.seen.reverse();
        (state.seen.len() == held).then_some(state)
    }
}

crate::io::doors! { in self;
    /// Migrates the journal of a [`MessageIdWindow`] (or [`UniqueKey`]) around the store `O`
    /// to one around `N`, for a firmware update that changed the wrapped store's state:
    /// call it at every boot, before [`crate::consumer::Consumer::open`]. The window moves
    /// whole: its ids in their order, its count of evicted ids, the count of rejected events
    /// and the committed position, so a command sent before the update and again after it
    /// is still skipped. `Ok(true)` when this call finished the migration.
    ///
    /// How the window moves, and why a cut cannot lose it. The window is rebuilt from the
    /// newest `held` records, which may lie on both pages of a two-page region. First, where
    /// they do, copies of them (each the newest record with another id) are appended in the
    /// old encoding, oldest first, until the newest page holds the window in order: a cut
    /// among the copies leaves the same ids in the window, and this step tells its copies
    /// from the window's own records (each of which grew the window or evicted an id) and
    /// goes on in order. Then the window's records are written in the new encoding in the
    /// page after the newest, the migrated state in every one, the newest last
    /// ([`crate::journal::Journal::open_migrating`]'s sequence numbers), and only then are
    /// the old pages erased: a cut before the last of them leaves the old records whole and
    /// the next boot writes the rest. Before the old pages go, the position journal names the
    /// migrated journal's newest record (same position), so a storage that reorders writes
    /// does not take the migrated records for ones written after a hole.
    ///
    /// Chain it across versions as [`crate::persist::migrate_each`]: one call per old
    /// version, each to the current one. Its room is checked at compile time: a page of the
    /// old journal holds at least `2 W + 1` records (the window and its copies).
    pub fn migrate_window | migrate_window_async
        [O, N, const W: usize, const EVICT: bool, F] flash F
        (flash: &mut F, layout: &Layout, migrate: impl FnOnce(O::State) -> N::State)
        -> Result<bool, JournalError<F::Error>>
        where [
            O: Store,
            N: Store<Rejections = O::Rejections>,
            MessageIdWindow<O, W, EVICT>: Store,
            MessageIdWindow<N, W, EVICT>: Store,
        ]
        => migrate_window::<O, N, W, EVICT, F>(flash, layout, migrate);
}

/// Stops the build when a page of a flash (its write unit and page size) holds fewer than `2 w + 1` records of
/// the old window's journal (the window and the copies [`migrate_window`] makes), or
/// fewer than `w` of the new one's.
const fn room_to_migrate<Old: MaxSize, New: MaxSize>(w: usize, unit: usize, page: usize) {
    let (header, old, new) = (
        header_size(unit),
        largest_on::<Old>(unit),
        largest_on::<New>(unit),
    );
    let room = page - header;
    if room / old > 2 * w && room / new >= w {
        return;
    }
    let m = Message::new()
        .text("a window migrates where a page holds twice its ids and one more of its records: a page of ")
        .num(page)
        .text(" bytes less its header of ")
        .num(header)
        .text(" holds ")
        .num(room / old)
        .text(" old records of ")
        .num(old)
        .text(" bytes (")
        .num(2 * w + 1)
        .text(" needed) and ")
        .num(room / new)
        .text(" new ones of ")
        .num(new)
        .text(" bytes (")
        .num(w)
        .text(" needed)");
    panic!("{}", m.as_str());
}

/// A sentence with numbers, built in a `const` for a build-time refusal: `core::fmt`
/// cannot run there, and a crate for it would be idem-core's one dependency for one
/// message.
struct Message {
    buf: [u8; 320],
    len: usize,
}

impl Message {
    const fn new() -> Self {
        Self {
            buf: [0; 320],
            len: 0,
        }
    }

    /// Appends `s` (cut at the buffer's end).
    const fn text(mut self, s: &str) -> Self {
        let s = s.as_bytes();
        let mut i = 0;
        while i < s.len() && self.len < self.buf.len() {
            self.buf[self.len] = s[i];
            (self.len, i) = (self.len + 1, i + 1);
        }
        self
    }

    /// Appends `n` in decimal.
    const fn num(self, mut n: usize) -> Self {
        let (mut digits, mut len) = ([0u8; 20], 0);
        loop {
            digits[19 - len] = b'0' + (n % 10) as u8;
            (n, len) = (n / 10, len + 1);
            if n == 0 {
                break;
            }
        }
        let digits = digits.split_at(20 - len).1;
        match core::str::from_utf8(digits) {
            Ok(s) => self.text(s),
            Err(_) => self,
        }
    }

    const fn as_str(&self) -> &str {
        match core::str::from_utf8(self.buf.split_at(self.len).0) {
            Ok(s) => s,
            Err(_) => "",
        }
    }
}

/// The window's migration over `embedded_storage`'s blocking `NorFlash`.
mod blocking {
    use super::*;
    use crate::io::blocking::*;
    use crate::journal::blocking as journal_io;
    include!("store/migrate.rs");
}

/// The window's migration over `embedded_storage_async`'s `NorFlash`.
#[allow(clippy::manual_async_fn)]
#[cfg(feature = "async")]
mod asynch {
    use super::*;
    use crate::io::asynch::*;
    use crate::journal::asynch as journal_io;
    include!("store/migrate.rs");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_migrations_room_refusal_gives_its_sizes() {
        // On 4-byte units a page keeps 20 bytes for its header; a 60-byte record takes up
        // to 68 bytes (its length byte and payload in 64, the check word), so 1,004 bytes
        // hold 14, short of the 17 a window of 8 needs, and enough for a window of 6.
        let refused =
            std::panic::catch_unwind(|| room_to_migrate::<[u8; 60], [u8; 60]>(8, 4, 1024));
        let message = *refused.unwrap_err().downcast::<String>().unwrap();
        assert_eq!(
            message,
            "a window migrates where a page holds twice its ids and one more of its records: \
             a page of 1024 bytes less its header of 20 holds 14 old records of 68 bytes \
             (17 needed) and 14 new ones of 68 bytes (8 needed)"
        );
        room_to_migrate::<[u8; 60], [u8; 60]>(6, 4, 1024);
        assert_eq!(Message::new().num(0).num(907).as_str(), "0907");
    }

    /// A counter of distinct commands that rejects zero: the smallest store that is not a
    /// sum of payments.
    #[derive(Debug, Clone, Copy, Default)]
    struct Count;

    #[derive(Debug, Clone, Copy, PartialEq)]
    struct Cmd(u64, u8);

    impl Identified for Cmd {
        fn id(&self) -> MessageId {
            MessageId(self.0)
        }
    }

    #[derive(Debug, PartialEq)]
    struct Full;

    impl From<TableFull> for Full {
        fn from(_: TableFull) -> Self {
            Full
        }
    }

    impl Store for Count {
        type Payload = Cmd;
        type State = u32;
        type Error = Full;
        type Rejections = u32;
        type Persist = EachEffect<Self>;
        const TAG: u32 = 0x7E57_0000;

        fn check(&self, _: &u32, e: &Event<Cmd>) -> Result<Outcome, Full> {
            Ok(if e.payload.1 == 0 {
                Outcome::Rejected
            } else {
                Outcome::Applied
            })
        }

        fn apply(&self, state: &mut u32, _: &Event<Cmd>) {
            *state += 1;
        }
    }

    fn ev(offset: Offset, id: u64, v: u8) -> Event<Cmd> {
        Event {
            offset,
            payload: Cmd(id, v),
        }
    }

    /// Check, then apply or remember, as the consumer does.
    fn step<S: Store>(
        s: &S,
        state: &mut S::State,
        e: &Event<S::Payload>,
    ) -> Result<Outcome, S::Error> {
        let o = s.check(state, e)?;
        match o {
            Outcome::Applied => s.apply(state, e),
            Outcome::Rejected => s.remember(state, e),
            _ => {}
        }
        Ok(o)
    }

    #[test]
    fn a_message_id_record_decodes_as_with_serdes_array_decoder() {
        /// The record as serde derives it for a plain `[u8; 8]`.
        #[derive(Debug, PartialEq, Deserialize)]
        struct Plain {
            id: [u8; 8],
            state: u32,
            evicted: u64,
            held: u8,
        }
        let r = IdApplied {
            id: 0x0123_4567_89AB_CDEF_u64.to_le_bytes(),
            state: 7u32,
            evicted: 300,
            held: 5,
        };
        let mut buf = [0u8; 32];
        let bytes = postcard::to_slice(&r, &mut buf).unwrap();
        assert_eq!(&bytes[..8], &r.id, "the id is its 8 bytes, as they are");
        assert_eq!(postcard::from_bytes::<IdApplied<u32>>(bytes), Ok(r.clone()));
        assert_eq!(
            postcard::from_bytes::<Plain>(bytes),
            Ok(Plain {
                id: r.id,
                state: 7,
                evicted: 300,
                held: 5
            })
        );
        for cut in 0..bytes.len() {
            assert_eq!(
                postcard::from_bytes::<IdApplied<u32>>(&bytes[..cut]).is_err(),
                postcard::from_bytes::<Plain>(&bytes[..cut]).is_err(),
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn the_offset_stamp_skips_what_is_not_newer_and_remembers_a_rejection() {
        let s = OffsetStamp(Count);
        let mut st = Stamped::default();
        assert_eq!(step(&s, &mut st, &ev(0, 0, 5)), Ok(Outcome::Applied));
        assert_eq!(step(&s, &mut st, &ev(1, 1, 0)), Ok(Outcome::Rejected));
        assert_eq!(
            step(&s, &mut st, &ev(1, 1, 0)),
            Ok(Outcome::Skipped),
            "a replay of the rejection"
        );
        assert_eq!(step(&s, &mut st, &ev(0, 0, 5)), Ok(Outcome::Skipped));
        assert_eq!(
            step(&s, &mut st, &ev(2, 0, 5)),
            Ok(Outcome::Applied),
            "a resend at a new offset"
        );
        assert_eq!(
            st,
            Stamped {
                state: 2,
                stamp: Some(2)
            }
        );
        assert_eq!(<OffsetStamp<Count> as Store>::TAG, 0x7E57_0003);
    }

    #[test]
    fn a_full_window_evicts_the_oldest_and_counts_it() {
        let store = MessageIdWindow::<_, 4>::new(Count, 2).unwrap();
        let mut s = Windowed::default();
        for (o, id) in [1, 2, 3].into_iter().enumerate() {
            assert_eq!(
                step(&store, &mut s, &ev(o as u64, id, 1)),
                Ok(Outcome::Applied)
            );
        }
        assert_eq!(s.evicted, 1);
        assert_eq!(
            step(&store, &mut s, &ev(3, 3, 1)),
            Ok(Outcome::Skipped),
            "3 is in the window"
        );
        assert_eq!(
            step(&store, &mut s, &ev(4, 1, 1)),
            Ok(Outcome::Applied),
            "1 was evicted: it slips through"
        );
        assert_eq!(s.state, 4);
        assert_eq!(step(&store, &mut s, &ev(5, 9, 0)), Ok(Outcome::Rejected));
        assert_eq!(
            step(&store, &mut s, &ev(6, 9, 0)),
            Ok(Outcome::Skipped),
            "9 is remembered"
        );
        assert_eq!(
            MessageIdWindow::<_, 4>::new(Count, 0).map(|w| w.window()),
            Err(WindowSize {
                window: 0,
                capacity: 4
            })
        );
        assert_eq!(
            MessageIdWindow::<_, 4>::new(Count, 5).map(|w| w.window()),
            Err(WindowSize {
                window: 5,
                capacity: 4
            })
        );
    }

    /// Stacked rules each remember a rejection: a resend of a rejected id at a new offset
    /// passes the stamp and is skipped by the window, not counted again.
    #[test]
    fn stacked_rules_remember_a_rejection_in_each() {
        let s = OffsetStamp(MessageIdWindow::<_, 4>::new(Count, 4).unwrap());
        let mut st = Stamped::default();
        assert_eq!(step(&s, &mut st, &ev(3, 7, 0)), Ok(Outcome::Rejected));
        assert_eq!(step(&s, &mut st, &ev(9, 7, 0)), Ok(Outcome::Skipped));
        assert_eq!((st.stamp, st.state.seen.len()), (Some(3), 1));
    }

    #[test]
    fn a_full_unique_key_table_refuses_a_new_key_as_the_stores_error() {
        let table = UniqueKey::<Count, 2>::default();
        let mut s = Windowed::default();
        assert_eq!(step(&table, &mut s, &ev(0, 7, 1)), Ok(Outcome::Applied));
        assert_eq!(step(&table, &mut s, &ev(1, 8, 1)), Ok(Outcome::Applied));
        assert_eq!(step(&table, &mut s, &ev(2, 7, 1)), Ok(Outcome::Skipped));
        let before = s.clone();
        assert_eq!(step(&table, &mut s, &ev(3, 9, 1)), Err(Full));
        assert_eq!(s, before, "nothing changed");
        assert_eq!(<UniqueKey<Count, 2> as Store>::TAG, 0x7E57_0008);
    }

    #[test]
    fn max_sizes_bound_the_real_encodings() {
        let mut s = Windowed::<i64, 3> {
            state: i64::MIN,
            seen: heapless::Vec::new(),
            evicted: u64::MAX,
        };
        for _ in 0..3 {
            s.seen.push(MessageId(u64::MAX)).unwrap();
        }
        let mut buf = [0u8; 64];
        let used = postcard::to_slice(&s, &mut buf).unwrap().len();
        assert_eq!(used, Windowed::<i64, 3>::POSTCARD_MAX_SIZE);
        let d = IdApplied {
            id: [0xFF; 8],
            state: i64::MIN,
            evicted: u64::MAX,
            held: u8::MAX,
        };
        let used = postcard::to_slice(&d, &mut buf).unwrap().len();
        assert_eq!(used, IdApplied::<i64>::POSTCARD_MAX_SIZE);
        let st = Stamped {
            state: i64::MIN,
            stamp: Some(u64::MAX),
        };
        let used = postcard::to_slice(&st, &mut buf).unwrap().len();
        assert_eq!(used, Stamped::<i64>::POSTCARD_MAX_SIZE);
    }
}
