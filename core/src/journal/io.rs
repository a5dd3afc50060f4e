// The journal's flash steps, written once and compiled twice (`crate::io`): included by
// `journal::blocking` over `embedded_storage`'s `NorFlash`, and by `journal::asynch` over
// `embedded_storage_async`'s. `Journal`'s methods are the public doors to them.

/// The unit a journal programs on the flash `F` ([`write_unit`]).
const fn unit<F: Flash>() -> usize {
    write_unit(F::WRITE_SIZE)
}

/// Bytes of a page header on the flash `F` ([`header_size`]).
const fn header<F: Flash>() -> u32 {
    header_size(F::WRITE_SIZE) as u32
}

/// The layout of a journal of `T` on the flash `F`.
const fn geometry<T: MaxSize + DeserializeOwned, F: Flash>() -> Geometry {
    geometry_of::<T>(F::WRITE_SIZE, F::ERASE_SIZE)
}

/// [`Journal::open`].
pub(crate) fn open<T: Serialize + DeserializeOwned + MaxSize, F: Flash>(
    flash: &mut F,
    region: Region,
    tag: u32,
) -> io!(Result<Opened<T>, JournalError<F::Error>>) {
    const { fits::<T, F>() }
    body!({
        let mut buf = Window::new();
        let (ring, found) = aw!(Ring::open(
            flash,
            region,
            tag,
            None,
            geometry::<T, F>(),
            &mut buf
        ))?;
        let record = if found {
            Some(decode::<T, F>(&buf)?)
        } else {
            None
        };
        Ok((
            Journal {
                ring,
                _record: PhantomData,
            },
            record,
        ))
    })
}

/// [`Journal::open_migrating`].
pub(crate) fn open_migrating<T, Old, F: Flash>(
    flash: &mut F,
    region: Region,
    tag: u32,
    old_tag: u32,
    migrate: impl FnOnce(Old) -> T,
) -> io!(Result<Migrated<T>, JournalError<F::Error>>)
where
    T: Serialize + DeserializeOwned + MaxSize,
    Old: Serialize + DeserializeOwned + MaxSize,
{
    const {
        fits::<T, F>();
        fits::<Old, F>();
    }
    body!({
        if old_tag == tag {
            return Err(JournalError::SameTag { tag });
        }
        let mut buf = Window::new();
        // This journal's pages first: a record there means the migration is done (or was
        // never needed); what is left of the old journal is erased.
        let (ring, found) = aw!(Ring::open(
            flash,
            region,
            tag,
            Some(old_tag),
            geometry::<T, F>(),
            &mut buf
        ))?;
        let mut journal = Journal {
            ring,
            _record: PhantomData,
        };
        if found {
            let record = decode::<T, F>(&buf)?;
            aw!(erase_stale(&journal.ring, flash, old_tag))?;
            return Ok((journal, Some(record), false));
        }
        // Then the old journal's, with this journal's pages (a header, perhaps a record
        // cut short) as its older ones.
        let (old, found) = aw!(Ring::open(
            flash,
            region,
            old_tag,
            Some(tag),
            geometry::<Old, F>(),
            &mut buf
        ))?;
        let newest = match old.newest {
            Some(at) if found => at,
            _ => {
                aw!(erase_stale(&journal.ring, flash, old_tag))?;
                return Ok((journal, None, false));
            }
        };
        let record = migrate(decode::<Old, F>(&buf)?);
        // The page after the old newest record's holds only older records (the old ring
        // would have erased it next): the migrated record starts this ring there, and its
        // sequence number follows the old record's. Erased here first, since this ring
        // refuses to erase another journal's page.
        let page = if newest.page + 1 == region.pages {
            0
        } else {
            newest.page + 1
        };
        aw!(erase_page(flash, region, page))?;
        journal
            .ring
            .restart_at(page, old.newest_seq.wrapping_add(1));
        aw!(append_view::<T, F, T>(&mut journal, flash, &record))?;
        aw!(erase_stale(&journal.ring, flash, old_tag))?;
        Ok((journal, Some(record), true))
    })
}

/// [`open_migrating`] for a record that is rebuilt from several (an appending store's):
/// the newest `Old` record goes through `migrate`, and `needed` of the migrated record
/// says how many of the newest records its state is rebuilt from, `n`. The `n - 1` old
/// records before the newest are carried over too, oldest first, each as `carry` makes it
/// from the migrated record and the old one, then the migrated record itself, all in the
/// page after the old newest record's, before the old pages are erased. Until the `n`
/// records are there, the old ones stay: a boot cut short finds fewer than `n` records
/// of this journal beside the old pages, and carries the rest (never a record twice,
/// never one erased before its copy is written).
///
/// The `n` old records must lie outside the page the new ones take (the page after the
/// newest's), and `n` must fit one page: `JournalError::NoSpace` otherwise, with nothing
/// written.
///
/// The old pages are left for the caller, who may have a record of its own to write
/// once the new ones are all there: the last `bool` says some remain, to erase with
/// [`erase_stale_pages`].
pub(crate) fn open_migrating_many<T, Old, F: Flash>(
    flash: &mut F,
    region: Region,
    tags: (u32, u32),
    needed: impl Fn(&T) -> u32,
    migrate: impl FnOnce(Old) -> T,
    carry: impl Fn(&T, Old) -> T,
) -> io!(Result<MigratedMany<T>, JournalError<F::Error>>)
where
    T: Serialize + DeserializeOwned + MaxSize,
    Old: Serialize + DeserializeOwned + MaxSize,
{
    const {
        fits::<T, F>();
        fits::<Old, F>();
    }
    body!({
        let (tag, old_tag) = tags;
        if old_tag == tag {
            return Err(JournalError::SameTag { tag });
        }
        let mut buf = Window::new();
        let (ring, found) = aw!(Ring::open(
            flash,
            region,
            tag,
            Some(old_tag),
            geometry::<T, F>(),
            &mut buf
        ))?;
        let mut journal = Journal {
            ring,
            _record: PhantomData,
        };
        let mut done = 0;
        if found {
            let record = decode::<T, F>(&buf)?;
            let stale = aw!(count_stale(&journal.ring, flash, old_tag))?;
            let at = journal.ring.newest.map_or(0, |a| a.page);
            done = aw!(journal.ring.summarize(flash, at))?.valid;
            if stale == 0 || done >= needed(&record) {
                return Ok((journal, Some(record), false, stale > 0));
            }
        }
        let (old, found) = aw!(Ring::open(
            flash,
            region,
            old_tag,
            Some(tag),
            geometry::<Old, F>(),
            &mut buf
        ))?;
        if !found || old.newest.is_none() {
            aw!(erase_stale(&journal.ring, flash, old_tag))?;
            return Ok((journal, None, false, false));
        }
        let record = migrate(decode::<Old, F>(&buf)?);
        let n = needed(&record).max(1);
        aw!(carry_over(
            &mut journal,
            &old,
            flash,
            (n, done),
            &record,
            carry
        ))?;
        aw!(append_view::<T, F, T>(&mut journal, flash, &record))?;
        Ok((journal, Some(record), true, true))
    })
}

/// Erases the pages of `journal`'s region that hold the journal tagged `stale` (what
/// [`open_migrating_many`] leaves).
pub(crate) fn erase_stale_pages<T, F: Flash>(
    journal: &Journal<T>,
    flash: &mut F,
    stale: u32,
) -> io!(Result<(), JournalError<F::Error>>) {
    erase_stale(&journal.ring, flash, stale)
}

/// [`open_migrating_many`]'s copies: the `n - 1` records of the `old` ring before its
/// newest, oldest first, each through `carry` with the migrated `record`, appended to
/// `journal`, which holds `done` of them already (in the page after the old newest
/// record's, erased here when it holds none).
fn carry_over<T, Old, F: Flash>(
    journal: &mut Journal<T>,
    old: &Ring,
    flash: &mut F,
    (n, done): (u32, u32),
    record: &T,
    carry: impl Fn(&T, Old) -> T,
) -> io!(Result<(), JournalError<F::Error>>)
where
    T: Serialize + DeserializeOwned + MaxSize,
    Old: DeserializeOwned,
{
    body!({
        let newest = old.newest.ok_or(JournalError::Decode)?;
        let region = old.region;
        let page = if newest.page + 1 == region.pages {
            0
        } else {
            newest.page + 1
        };
        if n > journal.ring.per_page {
            return Err(JournalError::NoSpace);
        }
        // The old records to carry, found where the new page will not reach.
        let mut outside = 0;
        aw!(old.walk_back(flash, &mut |f, _, _| {
            outside += u32::from(f.at.page != page);
            outside < n && f.at.page != page
        }))?;
        if outside < n {
            return Err(JournalError::NoSpace);
        }
        if done == 0 {
            aw!(erase_page(flash, region, page))?;
            journal
                .ring
                .restart_at(page, old.newest_seq.wrapping_add(1));
        }
        // Oldest first: the record `depth` back from the old newest, for each depth.
        for depth in (1..n - done.min(n - 1)).rev() {
            let (mut seen, mut older) = (0, None);
            aw!(old.walk_back(flash, &mut |_, body, _| {
                if seen == depth {
                    older = postcard::from_bytes::<Old>(body).ok();
                }
                seen += 1;
                seen <= depth
            }))?;
            let older = older.ok_or(JournalError::Decode)?;
            aw!(append_view::<T, F, T>(
                journal,
                flash,
                &carry(record, older)
            ))?;
        }
        Ok(())
    })
}

/// How many pages of `ring`'s region hold a header of the journal tagged `stale`.
fn count_stale<F: Flash>(
    ring: &Ring,
    flash: &mut F,
    stale: u32,
) -> io!(Result<u32, JournalError<F::Error>>) {
    body!({
        let mut count = 0;
        for page in 0..ring.region.pages {
            if aw!(ring.header(flash, page, Some(stale)))?.0 == PageState::Stale {
                count += 1;
            }
        }
        Ok(count)
    })
}

/// Erases every page of `ring`'s region that holds a header of the journal tagged
/// `stale`: once this journal has a record, none of them is needed.
fn erase_stale<F: Flash>(
    ring: &Ring,
    flash: &mut F,
    stale: u32,
) -> io!(Result<(), JournalError<F::Error>>) {
    body!({
        for page in 0..ring.region.pages {
            if aw!(ring.header(flash, page, Some(stale)))?.0 == PageState::Stale {
                aw!(erase_page(flash, ring.region, page))?;
            }
        }
        Ok(())
    })
}

/// Erases page `page` of `region`.
fn erase_page<F: Flash>(
    flash: &mut F,
    region: Region,
    page: u32,
) -> io!(Result<(), JournalError<F::Error>>) {
    body!({
        let base = region.start + page * (F::ERASE_SIZE as u32);
        aw!(flash.erase(base, base + F::ERASE_SIZE as u32)).map_err(JournalError::Flash)
    })
}

/// The payload a ring's scan left in `win` (at `win.body`), as a `T`.
fn decode<T: DeserializeOwned + MaxSize, F: Flash>(
    win: &Window,
) -> Result<T, JournalError<F::Error>> {
    match postcard::take_from_bytes(&win.bytes[win.body..]) {
        Ok((record, _)) => Ok(record),
        Err(_) => Err(JournalError::Decode),
    }
}

/// Stops the build when a journal of `T` cannot live on the flash `F` (evaluated in a
/// `const` block, once for each record type and flash).
const fn fits<T: MaxSize, F: Flash>() {
    assert!(
        F::WRITE_SIZE.is_power_of_two() && F::WRITE_SIZE <= MAX_WRITE_SIZE,
        "idem's journal needs a flash whose WRITE_SIZE is 1, 2, 4, 8, 16 or 32 bytes"
    );
    assert!(
        largest_on::<T>(F::WRITE_SIZE) <= record_limit(F::WRITE_SIZE),
        "journal record too large for a slot"
    );
    assert!(
        F::ERASE_SIZE.is_multiple_of(write_unit(F::WRITE_SIZE))
            && header_size(F::WRITE_SIZE) + largest_on::<T>(F::WRITE_SIZE) <= F::ERASE_SIZE,
        "journal slot larger than a page of this flash (ERASE_SIZE)"
    );
}

/// [`Journal::append`], for a value that encodes exactly as a `T` (a struct of borrowed
/// fields beside the owned one), so a large record need not be cloned to be written.
pub(crate) fn append_view<T: MaxSize, F: Flash, V: Serialize + ?Sized>(
    journal: &mut Journal<T>,
    flash: &mut F,
    record: &V,
) -> io!(Result<(), JournalError<F::Error>>) {
    body!({
        // A journal of small records fills a small buffer: clearing a whole
        // `MAX_SLOT_SIZE` one cost a 512-byte memset per append (44 instructions of 674 in
        // the callgrind profile). The size is a constant, so only one branch is compiled.
        // The payload goes after its length byte (format 3's layout; `Ring::append` moves
        // it back a byte in a format-2 slot).
        let (largest, unit) = (largest_on::<T>(F::WRITE_SIZE), unit::<F>());
        // One byte more than the largest record: a format-2 slot is the bytes after the
        // length byte, as long as the largest record when that takes a unit more.
        if largest < SMALL_SLOT {
            let mut buf = [0xFFu8; SMALL_SLOT];
            let len = postcard::to_slice(record, &mut buf[1..largest - unit])
                .map_err(|_| JournalError::Encode)?
                .len();
            aw!(journal.ring.append(flash, &mut buf[..largest + 1], len))
        } else {
            let mut buf = [0xFFu8; MAX_SLOT_SIZE + 1];
            let len = postcard::to_slice(record, &mut buf[1..largest - unit])
                .map_err(|_| JournalError::Encode)?
                .len();
            aw!(journal.ring.append(flash, &mut buf[..largest + 1], len))
        }
    })
}

/// [`Journal::summarize`].
pub(crate) fn summarize<T, F: Flash>(
    journal: &Journal<T>,
    flash: &mut F,
    page: u32,
) -> io!(Result<PageSummary, JournalError<F::Error>>) {
    journal.ring.summarize(flash, page)
}

/// [`Journal::recent`].
pub(crate) fn recent<T: DeserializeOwned, F: Flash>(
    journal: &Journal<T>,
    flash: &mut F,
    mut visit: impl FnMut(u32, T, bool) -> bool,
) -> io!(Result<(), JournalError<F::Error>>) {
    body!({
        let mut failed = false;
        aw!(journal.ring.walk_back(
            flash,
            &mut |f, body, adjacent| match postcard::from_bytes::<T>(body) {
                Ok(record) => visit(f.seq, record, adjacent),
                Err(_) => {
                    failed = true;
                    false
                }
            },
        ))?;
        if failed {
            return Err(JournalError::Decode);
        }
        Ok(())
    })
}

/// [`Journal::page_state`].
pub(crate) fn page_state<T, F: Flash>(
    journal: &Journal<T>,
    flash: &mut F,
    page: u32,
) -> io!(Result<PageState, JournalError<F::Error>>) {
    journal.ring.page_state(flash, page)
}

/// What [`RingIo::walk_back`] calls for each valid record: the record, its payload and
/// whether it follows on from the record visited before it; `false` stops.
pub(crate) type SlotVisit<'a> = dyn FnMut(&Found, &[u8], bool) -> bool + 'a;

/// What [`RingIo::scan`] calls for each valid record of a page, in order; `false` stops.
pub(crate) type FoundVisit<'a> = dyn FnMut(&Found) -> bool + 'a;

/// A page header as read: the page's state, its first sequence number, and whether it
/// is a format-2 page (records in fixed slots).
pub(crate) type Head = (PageState, u32, bool);

/// A record [`RingIo::read_at`] found valid: its length, the steps over its check word
/// counts, its sequence number, and where its payload starts in the window.
pub(crate) type Valid = (u32, u32, u32, usize);

/// Where a page scan starts: the first of the sequence numbers its first record can
/// carry, how many (one, but on a page whose header is damaged), and whether the page is
/// format 2.
pub(crate) type Head3 = (u32, u32, bool);

/// Records a walk back holds at once from one page; a page with more is scanned again
/// from its start for each batch ([`RingIo::walk_back`]).
const BATCH: usize = 8;

/// What a page scan saw besides its records: the runs of bytes that hold no record (a
/// write cut short, or a record voided), and on a format-2 page the blank slots, on a
/// format-3 page how many records of the largest size still fit after its last byte
/// written.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Scanned {
    regions: u32,
    blank: u32,
}

/// Bytes of a page after its header, on the flash `F`.
const fn data<F: Flash>() -> u32 {
    (F::ERASE_SIZE - header_size(F::WRITE_SIZE)) as u32
}

/// Bytes a reader reads at a time on the flash `F`, for a journal whose largest record
/// takes `largest` bytes: a [`WINDOW`] (on bare metal always), a longer record's length
/// on a hosted build, at most a page's records.
const fn window<F: Flash>(largest: u32) -> u32 {
    let len = if MAX_SLOT_SIZE > WINDOW && largest > WINDOW as u32 {
        largest
    } else {
        WINDOW as u32
    };
    if len < data::<F>() { len } else { data::<F>() }
}

/// The ring's flash steps.
pub(crate) trait RingIo {
    fn open<F: Flash>(
        flash: &mut F,
        region: Region,
        tag: u32,
        stale: Option<u32>,
        geometry: Geometry,
        win: &mut Window,
    ) -> io!(Result<(Ring, bool), JournalError<F::Error>>);
    fn append<F: Flash>(
        &mut self,
        flash: &mut F,
        buf: &mut [u8],
        len: usize,
    ) -> io!(Result<(), JournalError<F::Error>>);
    fn summarize<F: Flash>(
        &self,
        flash: &mut F,
        page: u32,
    ) -> io!(Result<PageSummary, JournalError<F::Error>>);
    fn page_state<F: Flash>(
        &self,
        flash: &mut F,
        page: u32,
    ) -> io!(Result<PageState, JournalError<F::Error>>);
    fn header<F: Flash>(
        &self,
        flash: &mut F,
        page: u32,
        stale: Option<u32>,
    ) -> io!(Result<Head, JournalError<F::Error>>);
    fn walk_back<F: Flash>(
        &self,
        flash: &mut F,
        visit: &mut SlotVisit<'_>,
    ) -> io!(Result<(), JournalError<F::Error>>);
    fn scan<F: Flash>(
        &self,
        flash: &mut F,
        page: u32,
        head: Head3,
        win: &mut Window,
        visit: &mut FoundVisit<'_>,
    ) -> io!(Result<Scanned, JournalError<F::Error>>);
    fn read_at<F: Flash>(
        &self,
        flash: &mut F,
        at: (u32, u32),
        seqs: (u32, u32),
        how: (bool, u32),
        win: &mut Window,
    ) -> io!(Result<Option<Valid>, JournalError<F::Error>>);
    fn tail<F: Flash>(
        &self,
        flash: &mut F,
        page: u32,
        chunk: &mut [u8],
    ) -> io!(Result<u32, JournalError<F::Error>>);
    fn fetch<F: Flash>(
        &self,
        flash: &mut F,
        win: &mut Window,
        at: (u32, u32),
        n: usize,
    ) -> io!(Result<usize, JournalError<F::Error>>);
    fn enter_page<F: Flash>(
        &mut self,
        flash: &mut F,
        page: u32,
    ) -> io!(Result<(), JournalError<F::Error>>);
    fn address<F: Flash>(&self, page: u32, off: u32) -> u32;
}

impl RingIo for Ring {
    /// Scans `region` laid out as `geometry`: the ring with its cursor after the newest
    /// valid record, and whether there is one (then its payload is at `win.body`).
    fn open<F: Flash>(
        flash: &mut F,
        region: Region,
        tag: u32,
        stale: Option<u32>,
        geometry: Geometry,
        win: &mut Window,
    ) -> io!(Result<(Self, bool), JournalError<F::Error>>) {
        body!({
            if !region.fits(F::ERASE_SIZE, flash.capacity()) {
                return Err(JournalError::BadRegion);
            }
            let mut r = Self::new(region, tag, geometry);
            win.len = 0;
            // The newest record, its page's first sequence number and format.
            let mut newest: Option<(Found, u32, bool)> = None;
            let mut damaged = false;
            // Valid pages first, then the pages whose header does not read valid. An erase
            // cut short leaves a page unformatted, but only ever one that held older records
            // (the page of the newest record is never erased). A record newer than every
            // readable one in such a page means its header was damaged afterwards:
            // recovering without it would roll the journal back. Without its header a
            // record's sequence number is unknown, so it is checked against each number it
            // would carry if it were newer: the first sequence number the damaged header
            // still reads, and the one the page has when it comes after the newest record's
            // page in the ring (with no valid page, the one of a first pass around the ring).
            for pass in [PageState::Valid, PageState::Unformatted] {
                for page in 0..region.pages {
                    let (state, read_base, v2) = aw!(r.header(flash, page, stale))?;
                    if state != pass {
                        continue;
                    }
                    let (after, more) = r.base_after(newest, page, unit::<F>() as u32);
                    // A damaged header's version is not to be trusted either: its records
                    // are looked for in both formats.
                    let formats = if pass == PageState::Valid { 1 } else { 2 };
                    for v2 in [v2, !v2].into_iter().take(formats) {
                        // The number the header reads, then those its place gives.
                        for (i, (base, count)) in
                            [(read_base, 1), (after, more)].into_iter().enumerate()
                        {
                            if i > 0
                                && (pass == PageState::Valid || (base, count) == (read_base, 1))
                            {
                                continue;
                            }
                            aw!(r.scan(flash, page, (base, count, v2), win, &mut |f| {
                                if newest.is_none_or(|(n, _, _)| f.seq > n.seq) {
                                    if pass != PageState::Valid {
                                        damaged = true;
                                        return false;
                                    }
                                    newest = Some((*f, base, v2));
                                }
                                true
                            }))?;
                            if damaged {
                                return Err(JournalError::Damaged {
                                    address: region.start + page * F::ERASE_SIZE as u32,
                                });
                            }
                        }
                    }
                }
            }
            // No record: the first append erases page 0 and starts there, at the first
            // sequence number (a header without records is worth one erase, not a rule).
            let Some((found, _, v2)) = newest else {
                return Ok((r, false));
            };
            r.settle(&found, v2);
            let at = (found.at.page, found.off);
            let read = aw!(r.read_at(flash, at, (found.seq, 1), (v2, TORN_MAX), win))?;
            if let Some((_, _, _, body)) = read {
                win.body = body;
            }
            Ok((r, true))
        })
    }

    /// Writes the record in `buf` (a byte for its length, then its `len` bytes of payload,
    /// then `0xFF` to one byte past the largest record's size) as the new newest record: fills in its
    /// length and check word, then programs it at the cursor: the payload's units first,
    /// then the check word's. In a format-2 page being filled, the record takes a whole
    /// slot, with no length byte; in a format-3 page, its units and the check unit, in the
    /// next page when they do not fit this one.
    /// Inlined into each typed journal's append, so a host build sees the sizes as
    /// constants (the firmware, built for size, keeps one copy).
    #[inline]
    fn append<F: Flash>(
        &mut self,
        flash: &mut F,
        buf: &mut [u8],
        len: usize,
    ) -> io!(Result<(), JournalError<F::Error>>) {
        body!({
            let unit = unit::<F>() as u32;
            // A format-2 slot has no length byte: its record starts with the payload.
            let v2_at = buf.len() - 1;
            // The units before the check unit: the length byte's and the payload's.
            let units = (1 + len as u32).div_ceil(unit);
            let packed = (units + 1) * unit;
            // Each pass that does not write steps over a torn slot or run of bytes, or
            // moves to the next page.
            let attempts = self.region.pages * (self.per_page + 2) + 1;
            // The runs stepped over, which the first record after a cut write counts.
            let mut stepped_over = 0;
            for _ in 0..attempts {
                if !self.cursor_page_ready {
                    aw!(self.enter_page(flash, self.cursor.page))?;
                }
                let extent = if self.cursor_v2 { self.slot } else { packed };
                if self.cursor_off + extent > data::<F>() {
                    self.turn_page();
                    continue;
                }
                let addr = self.address::<F>(self.cursor.page, self.cursor_off);
                // A page this ring erased holds nothing past the cursor: no need to read it
                // back (88 of 674 instructions a commit in the callgrind profile). A page
                // found at recovery may hold a torn write: read it.
                if self.cursor_page_fresh || aw!(blank(flash, addr, extent))? {
                    let check_at = (extent - unit) as usize;
                    let end = check_at + unit as usize;
                    let seq = self.cursor_seq;
                    let buf = if self.cursor_v2 {
                        &mut buf[1..]
                    } else {
                        buf[0] = units as u8;
                        &mut buf[..v2_at]
                    };
                    let at = (!self.cursor_v2).then_some(self.cursor_off);
                    let check = check_word(record_crc(&buf[..check_at], at, seq), stepped_over);
                    buf[check_at..][..4].copy_from_slice(&check.to_le_bytes());
                    if unit >= 8 {
                        // A wide unit has room for the complement: 32 more check bits.
                        buf[check_at + 4..check_at + 8].copy_from_slice(&(!check).to_le_bytes());
                    }
                    // A failed write may leave the record half programmed: until both writes
                    // are done, the page counts as not fresh (it is read again).
                    let fresh = core::mem::take(&mut self.cursor_page_fresh);
                    aw!(program(flash, addr, &buf[..end], check_at))?;
                    self.cursor_page_fresh = fresh;
                    self.newest = Some(self.cursor);
                    self.newest_off = self.cursor_off;
                    self.newest_seq = seq;
                    self.appended += 1;
                    self.advance(extent);
                    return Ok(());
                }
                // Not blank (a torn write from before a crash, or records voided): step over
                // it whole, one sequence number for it, and say so in the record that
                // follows. In a format-2 page, one slot; in a format-3 page, to a largest
                // record past the page's last byte written: a write cut short can have
                // programmed units of all ones, which read erased, up to there.
                let over = if self.cursor_v2 {
                    self.slot
                } else {
                    let tail = aw!(self.tail(flash, self.cursor.page, &mut [0; 64]))?;
                    (tail + self.largest)
                        .min(data::<F>())
                        .max(self.cursor_off + unit)
                        - self.cursor_off
                };
                stepped_over += 1;
                self.advance(over);
            }
            Err(JournalError::NoSpace)
        })
    }

    fn summarize<F: Flash>(
        &self,
        flash: &mut F,
        page: u32,
    ) -> io!(Result<PageSummary, JournalError<F::Error>>) {
        body!({
            let (state, base, v2) = aw!(self.header(flash, page, None))?;
            let mut sum = PageSummary {
                state,
                valid: 0,
                torn: 0,
                blank: 0,
                newest_seq: None,
            };
            if state == PageState::Blank {
                sum.blank = self.per_page;
                return Ok(sum);
            }
            // An unformatted page is counted too, with the first sequence number its header
            // still reads: records in it are damage to show.
            let mut win = Window::new();
            let (mut valid, mut newest) = (0, None);
            let seen = aw!(self.scan(flash, page, (base, 1, v2), &mut win, &mut |f| {
                valid += 1;
                newest = Some(newest.map_or(f.seq, |s: u32| s.max(f.seq)));
                true
            }))?;
            sum.valid = valid;
            sum.newest_seq = newest;
            sum.torn = seen.regions;
            sum.blank = seen.blank;
            Ok(sum)
        })
    }

    fn page_state<F: Flash>(
        &self,
        flash: &mut F,
        page: u32,
    ) -> io!(Result<PageState, JournalError<F::Error>>) {
        body!({ Ok(aw!(self.header(flash, page, None))?.0) })
    }

    /// Classifies page `page`, with the first sequence number its header reads (valid or
    /// not) and whether it says format 2; a valid header of another journal is an error,
    /// but for the journal tagged `stale` ([`PageState::Stale`]).
    fn header<F: Flash>(
        &self,
        flash: &mut F,
        page: u32,
        stale: Option<u32>,
    ) -> io!(Result<Head, JournalError<F::Error>>) {
        body!({
            let base = self.region.start + page * (F::ERASE_SIZE as u32);
            // The four header words, then the CRC word, which starts the header's last unit
            // (right after them on a word flash: one read).
            let mut h = [0u8; HEADER_SIZE];
            let crc_at = header::<F>() - unit::<F>() as u32;
            if crc_at == 16 {
                aw!(flash.read(base, &mut h)).map_err(JournalError::Flash)?;
            } else {
                aw!(flash.read(base, &mut h[..16])).map_err(JournalError::Flash)?;
                aw!(flash.read(base + crc_at, &mut h[16..])).map_err(JournalError::Flash)?;
            }
            let word = |i: usize| u32::from_le_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
            let first_seq = word(12);
            let version = (word(4) & 0xFFFF) as u16;
            let v2 = version == FORMAT_2;
            if h.iter().all(|&b| b == 0xFF) {
                // Past the CRC word on a word flash; on a wider one, the padding too.
                let rest = base + if crc_at == 16 { 20 } else { 16 };
                let state = if aw!(blank(flash, rest, base + F::ERASE_SIZE as u32 - rest))? {
                    PageState::Blank
                } else {
                    PageState::Unformatted
                };
                return Ok((state, first_seq, false));
            }
            // Format 1's header was 16 bytes, its CRC in the fourth word: a page written by it
            // is another journal's, not damage to erase.
            if word(0) == MAGIC && version == 1 && crc32c(&h[..12]) == word(12) {
                return Err(JournalError::Foreign {
                    page,
                    tag: word(8),
                    version,
                });
            }
            if word(0) != MAGIC || crc32c(&h[..16]) != word(16) {
                // A journal written on a flash of another write unit has its CRC word where
                // that unit puts it (at 16 up to 16-byte units, at 32 on 32-byte ones), and
                // another slot size (the same record takes a different slot on each unit):
                // another journal's page, not damage to erase. A page of this journal whose
                // CRC word was damaged says this slot size, so record bytes that happen to
                // match its CRC cannot make it foreign.
                let at = if crc_at == 16 { 32 } else { 16 };
                if word(0) == MAGIC && word(4) >> 16 != self.slot && at + 4 <= F::ERASE_SIZE as u32
                {
                    let mut other = [0u8; 4];
                    aw!(flash.read(base + at, &mut other)).map_err(JournalError::Flash)?;
                    if u32::from_le_bytes(other) == crc32c(&h[..16]) {
                        return Err(JournalError::Foreign {
                            page,
                            tag: word(8),
                            version,
                        });
                    }
                }
                return Ok((PageState::Unformatted, first_seq, v2));
            }
            let slot = word(4) >> 16;
            let ours = version == FORMAT_VERSION || v2;
            if !ours || slot != self.slot || word(8) != self.tag {
                // The journal this one migrates from (its slot size is its own).
                if ours && stale == Some(word(8)) {
                    return Ok((PageState::Stale, first_seq, v2));
                }
                return Err(JournalError::Foreign {
                    page,
                    tag: word(8),
                    version,
                });
            }
            Ok((PageState::Valid, first_seq, v2))
        })
    }

    /// See [`Journal::recent`]: `visit` gets each valid record, its payload bytes and
    /// whether it follows on, newest first. A page's records are found by scanning it from
    /// its start (a format-3 record's length is in its payload, so the one before it is
    /// found from the front); [`BATCH`] at a time, the newest first. A record follows on
    /// from the one visited before it when the sequence numbers between them are exactly
    /// those that record's writer stepped over (torn slots, or runs of bytes holding no
    /// record: its check word counts them, [`AFTER_TORN`]).
    fn walk_back<F: Flash>(
        &self,
        flash: &mut F,
        visit: &mut SlotVisit<'_>,
    ) -> io!(Result<(), JournalError<F::Error>>) {
        body!({
            let Some(newest) = self.newest else {
                return Ok(());
            };
            let mut win = Window::new();
            let (mut page, mut until) = (newest.page, self.newest_off + 1);
            // The number of the record visited last, and the steps over its writer counted.
            let mut vouched = None::<(u32, u32)>;
            for _ in 0..self.region.pages {
                let (state, base, v2) = aw!(self.header(flash, page, None))?;
                if state != PageState::Valid {
                    break;
                }
                loop {
                    let mut batch = [None::<Found>; BATCH];
                    let mut n = 0usize;
                    aw!(self.scan(flash, page, (base, 1, v2), &mut win, &mut |f| {
                        if f.off >= until {
                            return false;
                        }
                        batch[n % BATCH] = Some(*f);
                        n += 1;
                        true
                    }))?;
                    for i in 0..n.min(BATCH) {
                        let Some(f) = batch[(n - 1 - i) % BATCH] else {
                            continue;
                        };
                        let at = (page, f.off);
                        let seqs = (f.seq, 1);
                        let Some((_, _, _, body)) =
                            aw!(self.read_at(flash, at, seqs, (v2, TORN_MAX), &mut win))?
                        else {
                            continue;
                        };
                        let adjacent = vouched.is_none_or(|(seq, torn)| {
                            let gap = seq.wrapping_sub(f.seq).wrapping_sub(1);
                            gap == torn || (torn == TORN_MAX && gap > TORN_MAX)
                        });
                        // The payload and what follows it in the window: postcard reads what
                        // it needs.
                        if !visit(&f, &win.bytes[body..], adjacent) {
                            return Ok(());
                        }
                        vouched = Some((f.seq, f.torn));
                        until = f.off;
                    }
                    if n <= BATCH {
                        break;
                    }
                }
                page = page.checked_sub(1).unwrap_or(self.region.pages - 1);
                until = u32::MAX;
            }
            Ok(())
        })
    }

    /// Visits the valid records of page `page`, in order. `head`: the sequence numbers the
    /// page's first record can carry (one, but where a damaged header leaves it unknown)
    /// and its format. A format-2 page's records are in fixed slots, numbered one a slot.
    /// A format-3 page's follow one another, each numbered one more than the one before;
    /// where the bytes after a record hold none (a write cut short, or records voided or
    /// lost), the next record is the first valid one further on, up to the page's last
    /// byte written, under one of the [`HOLE_MAX`] numbers after the one the bytes would
    /// have started with (its check word says which: it covers its number and where it
    /// was written), and with a mark of one run stepped over or none (a record written
    /// right after records lost since). The run counts as one place in the page.
    fn scan<F: Flash>(
        &self,
        flash: &mut F,
        page: u32,
        head: Head3,
        win: &mut Window,
        visit: &mut FoundVisit<'_>,
    ) -> io!(Result<Scanned, JournalError<F::Error>>) {
        body!({
            let (mut seq, mut count, v2) = head;
            let unit = unit::<F>() as u32;
            let (mut off, mut slot, mut tail) = (0, 0, None);
            let mut seen = Scanned::default();
            loop {
                if v2 {
                    if slot == self.per_page {
                        break;
                    }
                    off = slot * self.slot;
                } else if off + unit > data::<F>() {
                    break;
                }
                let at = (page, off);
                let mut hit = aw!(self.read_at(flash, at, (seq, count), (v2, TORN_MAX), win))?
                    .map(|h| (off, h));
                if hit.is_none() && v2 {
                    let n = self.slot as usize;
                    let from = aw!(self.fetch(flash, win, at, n))?;
                    if win.bytes[from..from + n].iter().all(|&b| b == 0xFF) {
                        seen.blank += 1;
                    } else {
                        seen.regions += 1;
                    }
                } else if hit.is_none() {
                    if tail.is_none() {
                        // Read through the window's bytes, which then hold nothing.
                        (tail, win.len) = (Some(aw!(self.tail(flash, page, &mut win.bytes))?), 0);
                    }
                    let end = tail.unwrap_or(0);
                    if off >= end {
                        break;
                    }
                    (seen.regions, slot) = (seen.regions + 1, slot + 1);
                    let mut at = off + unit;
                    let after = (seq.wrapping_add(1), count - 1 + HOLE_MAX);
                    while at < end && hit.is_none() {
                        hit = aw!(self.read_at(flash, (page, at), after, (false, 1), win))?
                            .map(|h| (at, h));
                        at += unit;
                    }
                    if hit.is_none() {
                        break;
                    }
                }
                if let Some((at, (len, torn, number, _))) = hit {
                    (seq, count) = (number, 1);
                    let f = Found {
                        seq,
                        at: SlotAddr { page, slot },
                        off: at,
                        len,
                        torn,
                    };
                    if !visit(&f) {
                        return Ok(seen);
                    }
                    off = at + len;
                }
                (seq, slot) = (seq.wrapping_add(1), slot + 1);
            }
            if !v2 {
                let mut room = data::<F>() - off.max(tail.unwrap_or(0)).min(data::<F>());
                while room >= self.largest {
                    room -= self.largest;
                    seen.blank += 1;
                }
            }
            Ok(seen)
        })
    }

    /// Reads the record at byte `off` of page `page`'s records (`at`) through the window
    /// `win`; when it is valid as one of the `seqs.1` sequence numbers from `seqs.0` on (the
    /// first that fits), its length, how many torn slots or runs its writer stepped over (as
    /// its check word counts them), that number and where its payload starts in
    /// `win.bytes`. `how`: whether the page is format 2 (a record fills a slot; its check
    /// word covers its number and bytes), and the most steps over its check word may count
    /// (a format-3 record's first byte counts its units before the check unit, and its
    /// check word covers its bytes, its offset and its number: [`record_crc`]).
    fn read_at<F: Flash>(
        &self,
        flash: &mut F,
        at: (u32, u32),
        seqs: (u32, u32),
        how: (bool, u32),
        win: &mut Window,
    ) -> io!(Result<Option<Valid>, JournalError<F::Error>>) {
        body!({
            let ((_, off), (v2, most)) = (at, how);
            let unit = unit::<F>();
            // A record holds at least its check word, and fits the page: a slot, or up to
            // the largest record.
            let n = if v2 { self.slot } else { self.largest };
            let n = (n as usize).min((data::<F>() - off) as usize);
            if n < unit {
                return Ok(None);
            }
            let from = aw!(self.fetch(flash, win, at, n))?;
            let b = &win.bytes[from..from + n];
            // The check word starts the record's last unit: a slot's, or the one after the
            // units its first byte counts.
            let c = if v2 {
                self.slot as usize - unit
            } else {
                b[0] as usize * unit
            };
            if (!v2 && c == 0) || c + unit > n {
                return Ok(None);
            }
            let check = u32::from_le_bytes([b[c], b[c + 1], b[c + 2], b[c + 3]]);
            // A check word that reads erased was never written (`check_word` never is one).
            if check == ERASED_WORD {
                return Ok(None);
            }
            if unit >= 8 && u32::from_le_bytes([b[c + 4], b[c + 5], b[c + 6], b[c + 7]]) != !check {
                return Ok(None);
            }
            // `check_word` in reverse: the stored word is the CRC, or the CRC XOR the mark, with
            // the low bit cleared where that made `0xFFFF_FFFF`.
            let sealed = if check == ERASED_WORD & !1 { !1 } else { !0 };
            let mut valid = None;
            let body = from + usize::from(!v2);
            record_crcs(&b[..c], (!v2).then_some(off), seqs, &mut |seq, crc| {
                let mark = (crc ^ check) & sealed;
                let torn = (mark & TORN_BITS) >> 1;
                if mark == torn_mark(torn) && torn <= most {
                    valid = Some(((c + unit) as u32, torn, seq, body));
                }
                valid.is_some()
            });
            Ok(valid)
        })
    }

    /// Where in `win.bytes` the `n` bytes at byte `off` of page `page`'s records (`at`)
    /// are, read into it first when it does not hold them: a whole window from `off` on,
    /// or, when `off` is before the bytes it holds (a walk back), one that ends with them.
    fn fetch<F: Flash>(
        &self,
        flash: &mut F,
        win: &mut Window,
        at: (u32, u32),
        n: usize,
    ) -> io!(Result<usize, JournalError<F::Error>>) {
        body!({
            let ((page, off), n) = (at, n as u32);
            let held = win.page == page && win.len > 0;
            if !held || off < win.off || off + n > win.off + win.len {
                let len = window::<F>(self.largest);
                let from = if held && off < win.off {
                    (off + n).saturating_sub(len)
                } else {
                    off.min(data::<F>() - len)
                };
                aw!(flash.read(
                    self.address::<F>(page, from),
                    &mut win.bytes[..len as usize]
                ))
                .map_err(JournalError::Flash)?;
                (win.page, win.off, win.len) = (page, from, len);
            }
            Ok((off - win.off) as usize)
        })
    }

    /// The byte offset, in page `page`'s records, just past the last write unit that is
    /// not blank (0 for a page with no record bytes written). Read from the page's end
    /// back, a `chunk` (at most a [`WINDOW`]) at a time.
    fn tail<F: Flash>(
        &self,
        flash: &mut F,
        page: u32,
        chunk: &mut [u8],
    ) -> io!(Result<u32, JournalError<F::Error>>) {
        body!({
            let start = self.address::<F>(page, 0);
            let mut end = data::<F>();
            while end > 0 {
                let n = end.min(chunk.len().min(WINDOW) as u32);
                let from = end - n;
                aw!(flash.read(start + from, &mut chunk[..n as usize]))
                    .map_err(JournalError::Flash)?;
                if let Some(i) = chunk[..n as usize].iter().rposition(|&b| b != 0xFF) {
                    let unit = unit::<F>() as u32;
                    return Ok((from + i as u32 + 1).div_ceil(unit) * unit);
                }
                end = from;
            }
            Ok(0)
        })
    }

    // Out of line on bare metal: it runs once a page, and inlined into each append it
    // cost 564 bytes of Cortex-M0 code in `tools/size` (with `advance`, 628).
    #[cfg_attr(target_os = "none", inline(never))]
    fn enter_page<F: Flash>(
        &mut self,
        flash: &mut F,
        page: u32,
    ) -> io!(Result<(), JournalError<F::Error>>) {
        body!({
            if self.newest.is_some_and(|n| n.page == page) {
                return Err(JournalError::NoSpace);
            }
            let base = self.region.start + page * (F::ERASE_SIZE as u32);
            // Refuse another journal's page; then erase even a page that reads blank: after
            // interrupted erases a page can read all ones without being reliably erased.
            aw!(self.page_state(flash, page))?;
            aw!(flash.erase(base, base + (F::ERASE_SIZE as u32))).map_err(JournalError::Flash)?;
            let mut h = [0u8; HEADER_SIZE];
            h[..4].copy_from_slice(&MAGIC.to_le_bytes());
            h[4..8].copy_from_slice(&(u32::from(FORMAT_VERSION) | (self.slot << 16)).to_le_bytes());
            h[8..12].copy_from_slice(&self.tag.to_le_bytes());
            h[12..16].copy_from_slice(&self.cursor_seq.to_le_bytes());
            let crc = crc32c(&h[..16]);
            h[16..].copy_from_slice(&crc.to_le_bytes());
            if unit::<F>() == 4 {
                aw!(flash.write(base, &h[..16])).map_err(JournalError::Flash)?;
                aw!(flash.write(base + 16, &h[16..])).map_err(JournalError::Flash)?;
            } else {
                // Each part padded with 0xFF to whole units, the CRC word's unit last.
                let mut padded = [0xFFu8; MAX_HEADER];
                let crc_at = header::<F>() as usize - unit::<F>();
                padded[..16].copy_from_slice(&h[..16]);
                padded[crc_at..crc_at + 4].copy_from_slice(&h[16..]);
                aw!(flash.write(base, &padded[..crc_at])).map_err(JournalError::Flash)?;
                aw!(flash.write(
                    base + crc_at as u32,
                    &padded[crc_at..header::<F>() as usize],
                ))
                .map_err(JournalError::Flash)?;
            }
            self.cursor = SlotAddr { page, slot: 0 };
            self.cursor_off = 0;
            self.cursor_v2 = false;
            self.cursor_page_ready = true;
            self.cursor_page_fresh = true;
            Ok(())
        })
    }

    fn address<F: Flash>(&self, page: u32, off: u32) -> u32 {
        self.region.start + page * (F::ERASE_SIZE as u32) + header::<F>() + off
    }
}

/// Programs the record in `buf` at `addr`: the units before `check_at` first, then the
/// check word's unit.
fn program<F: Flash>(
    flash: &mut F,
    addr: u32,
    buf: &[u8],
    check_at: usize,
) -> io!(Result<(), JournalError<F::Error>>) {
    body!({
        // The record's leading write units of all ones are left erased: one
        // programmed would still read erased, so a record cut short just after
        // it would read blank, and the next append would program the unit a
        // second time, which an ECC flash refuses. Once a unit that is not all
        // ones is programmed, the bytes read written. The check word is never
        // all ones, so the record's last unit always is programmed.
        let w = F::WRITE_SIZE;
        let mut from = 0;
        while buf[from..from + w].iter().all(|&b| b == 0xFF) {
            from += w;
        }
        if from < check_at {
            aw!(flash.write(addr + from as u32, &buf[from..check_at]))
                .map_err(JournalError::Flash)?;
        }
        let from = from.max(check_at);
        aw!(flash.write(addr + from as u32, &buf[from..])).map_err(JournalError::Flash)?;
        Ok(())
    })
}

/// Whether the `len` bytes at `addr` all read erased (`0xFF`); read in small chunks.
pub(crate) fn blank<F: Flash>(
    flash: &mut F,
    addr: u32,
    len: u32,
) -> io!(Result<bool, JournalError<F::Error>>) {
    body!({
        let mut chunk = [0u8; 64];
        let mut at = 0;
        while at < len {
            let n = (len - at).min(64) as usize;
            aw!(flash.read(addr + at, &mut chunk[..n])).map_err(JournalError::Flash)?;
            if chunk[..n].iter().any(|&b| b != 0xFF) {
                return Ok(false);
            }
            at += n as u32;
        }
        Ok(true)
    })
}
