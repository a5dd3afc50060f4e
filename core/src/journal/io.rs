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

/// The slot size and slots per page of a journal of `T` on the flash `F`.
const fn geometry<T: MaxSize, F: Flash>() -> Geometry {
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
        let mut buf = [0u8; 4 + MAX_SLOT_SIZE];
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
        let mut buf = [0u8; 4 + MAX_SLOT_SIZE];
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
        let ring = &mut journal.ring;
        ring.cursor = SlotAddr { page, slot: 0 };
        ring.cursor_page_ready = false;
        ring.cursor_base = old.newest_seq.wrapping_add(1);
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
        let mut buf = [0u8; 4 + MAX_SLOT_SIZE];
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
        aw!(old.walk_back(flash, &mut |_, at, _, _| {
            outside += u32::from(at.page != page);
            outside < n && at.page != page
        }))?;
        if outside < n {
            return Err(JournalError::NoSpace);
        }
        if done == 0 {
            aw!(erase_page(flash, region, page))?;
            let ring = &mut journal.ring;
            ring.cursor = SlotAddr { page, slot: 0 };
            ring.cursor_page_ready = false;
            ring.cursor_base = old.newest_seq.wrapping_add(1);
        }
        // Oldest first: the record `depth` back from the old newest, for each depth.
        for depth in (1..n - done.min(n - 1)).rev() {
            let (mut seen, mut older) = (0, None);
            aw!(old.walk_back(flash, &mut |_, _, body, _| {
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

/// The payload of the record a ring's scan left in `buf`, as a `T`.
fn decode<T: DeserializeOwned + MaxSize, F: Flash>(
    buf: &[u8; 4 + MAX_SLOT_SIZE],
) -> Result<T, JournalError<F::Error>> {
    let payload = &buf[4..4 + slot_size_on::<T>(F::WRITE_SIZE) - unit::<F>()];
    match postcard::take_from_bytes(payload) {
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
        slot_size_on::<T>(F::WRITE_SIZE) <= MAX_SLOT_SIZE,
        "journal record too large for a slot"
    );
    assert!(
        F::ERASE_SIZE.is_multiple_of(write_unit(F::WRITE_SIZE))
            && header_size(F::WRITE_SIZE) + slot_size_on::<T>(F::WRITE_SIZE) <= F::ERASE_SIZE,
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
        // the callgrind profile). The slot size is a constant, so only one branch is
        // compiled.
        let (slot, unit) = (slot_size_on::<T>(F::WRITE_SIZE), unit::<F>());
        if slot <= SMALL_SLOT {
            let mut buf = [0xFFu8; 4 + SMALL_SLOT];
            postcard::to_slice(record, &mut buf[4..4 + slot - unit])
                .map_err(|_| JournalError::Encode)?;
            aw!(journal.ring.append(flash, &mut buf[..4 + slot]))
        } else {
            let mut buf = [0xFFu8; 4 + MAX_SLOT_SIZE];
            postcard::to_slice(record, &mut buf[4..4 + slot - unit])
                .map_err(|_| JournalError::Encode)?;
            aw!(journal.ring.append(flash, &mut buf[..4 + slot]))
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
            &mut |seq, _, body, adjacent| match postcard::from_bytes::<T>(body) {
                Ok(record) => visit(seq, record, adjacent),
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

/// What [`RingIo::walk_back`] calls for each valid record: its sequence number, slot,
/// payload and whether it follows on from the record visited before it; `false` stops.
pub(crate) type SlotVisit<'a> = dyn FnMut(u32, SlotAddr, &[u8], bool) -> bool + 'a;

/// The ring's flash steps.
pub(crate) trait RingIo {
    fn open<F: Flash>(
        flash: &mut F,
        region: Region,
        tag: u32,
        stale: Option<u32>,
        geometry: Geometry,
        buf: &mut SlotBuf,
    ) -> io!(Result<(Ring, bool), JournalError<F::Error>>);
    fn append<F: Flash>(
        &mut self,
        flash: &mut F,
        buf: &mut [u8],
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
    ) -> io!(Result<(PageState, u32), JournalError<F::Error>>);
    fn walk_back<F: Flash>(
        &self,
        flash: &mut F,
        visit: &mut SlotVisit<'_>,
    ) -> io!(Result<(), JournalError<F::Error>>);
    fn read_slot<F: Flash>(
        &self,
        flash: &mut F,
        at: SlotAddr,
        base: u32,
        buf: &mut SlotBuf,
    ) -> io!(Result<Option<u32>, JournalError<F::Error>>);
    fn read_record<F: Flash>(
        &self,
        flash: &mut F,
        at: SlotAddr,
        base: u32,
        buf: &mut SlotBuf,
    ) -> io!(Result<Option<(u32, u32)>, JournalError<F::Error>>);
    fn enter_page<F: Flash>(
        &mut self,
        flash: &mut F,
        page: u32,
    ) -> io!(Result<(), JournalError<F::Error>>);
    fn slot_address<F: Flash>(&self, at: SlotAddr) -> u32;
}

impl RingIo for Ring {
    /// Scans `region` laid out as `geometry`: the ring with its cursor after the newest
    /// valid record, and whether there is one (then `buf` holds its slot).
    fn open<F: Flash>(
        flash: &mut F,
        region: Region,
        tag: u32,
        stale: Option<u32>,
        geometry: Geometry,
        buf: &mut SlotBuf,
    ) -> io!(Result<(Self, bool), JournalError<F::Error>>) {
        body!({
            if !region.fits(F::ERASE_SIZE, flash.capacity()) {
                return Err(JournalError::BadRegion);
            }
            let per_page = geometry.per_page;
            let mut r = Self::new(region, tag, geometry);
            // The newest record: its sequence number, slot and page's first sequence number.
            let mut newest: Option<(u32, SlotAddr, u32)> = None;
            // Valid pages first, then the pages whose header does not read valid. An erase
            // cut short leaves a page unformatted, but only ever one that held older records
            // (the page of the newest record is never erased). A record newer than every
            // readable one in such a page means its header was damaged afterwards:
            // recovering without it would roll the journal back. Without its header a slot's
            // sequence number is unknown, so it is checked against each number it would carry
            // if it were newer: the first sequence number the damaged header still reads, and
            // the one the page has when it comes after the newest record's page in the ring
            // (with no valid page, the one of a first pass around the ring). A slot of random
            // bytes passes one of them with odds of about 2 in 2^32.
            for pass in [PageState::Valid, PageState::Unformatted] {
                for page in 0..region.pages {
                    let (state, read_base) = aw!(r.header(flash, page, stale))?;
                    if state != pass {
                        continue;
                    }
                    let after_newest = r.base_after(newest, page);
                    let mut base = read_base;
                    loop {
                        for slot in 0..per_page {
                            let at = SlotAddr { page, slot };
                            if let Some(seq) = aw!(r.read_slot(flash, at, base, buf))?
                                && newest.is_none_or(|(s, _, _)| seq > s)
                            {
                                if pass != PageState::Valid {
                                    return Err(JournalError::Damaged {
                                        address: region.start + page * F::ERASE_SIZE as u32,
                                    });
                                }
                                newest = Some((seq, at, base));
                            }
                        }
                        if pass == PageState::Valid || base == after_newest {
                            break;
                        }
                        base = after_newest;
                    }
                }
            }
            // No record: the first append erases page 0 and starts there, at the first
            // sequence number (a header without records is worth one erase, not a rule).
            let Some((seq, at, base)) = newest else {
                return Ok((r, false));
            };
            r.settle(seq, at, base);
            aw!(r.read_slot(flash, at, base, buf))?;
            Ok((r, true))
        })
    }

    /// Writes the slot in `buf` (four bytes for the sequence number, then one slot, the
    /// payload in place, padded with `0xFF`) as the new newest record: fills in its
    /// sequence number and check word, then programs the slot at the cursor: the payload's
    /// units first, then the check word's.
    /// Inlined into each typed journal's append, so a host build sees the slot size as a
    /// constant (the firmware, built for size, keeps one copy).
    #[inline]
    fn append<F: Flash>(
        &mut self,
        flash: &mut F,
        buf: &mut [u8],
    ) -> io!(Result<(), JournalError<F::Error>>) {
        body!({
            let slot = buf.len() - 4;
            // Where the check word starts in `buf`: after the sequence number and the
            // payload's units.
            let check_at = buf.len() - unit::<F>();
            let attempts = self.region.pages * self.slots_per_page() + 1;
            // Each pass that does not write steps over one torn slot: the pass number is how
            // many this append has stepped over (the first since a restart, after a write that
            // was cut, counts them all).
            for stepped_over in 0..attempts {
                if !self.cursor_page_ready {
                    aw!(self.enter_page(flash, self.cursor.page))?;
                }
                let addr = self.slot_address::<F>(self.cursor);
                // A page this ring erased holds nothing past the cursor: no need to read the
                // slot back (88 of 674 instructions a commit in the callgrind profile). A page
                // found at recovery may hold a torn write: read it.
                if self.cursor_page_fresh || aw!(blank(flash, addr, slot as u32))? {
                    let seq = self.cursor_base.wrapping_add(self.cursor.slot);
                    buf[..4].copy_from_slice(&seq.to_le_bytes());
                    let check = check_word(crc32c(&buf[..check_at]), stepped_over);
                    buf[check_at..][..4].copy_from_slice(&check.to_le_bytes());
                    if unit::<F>() >= 8 {
                        // A wide unit has room for the complement: 32 more check bits.
                        buf[check_at + 4..check_at + 8].copy_from_slice(&(!check).to_le_bytes());
                    }
                    // A failed write may leave the slot half programmed: until both writes
                    // are done, the page counts as not fresh (slots are read again).
                    let fresh = core::mem::take(&mut self.cursor_page_fresh);
                    // The slot's leading write units of all ones are left erased: one
                    // programmed would still read erased, so a slot cut short just after
                    // it would read blank, and the next append would program the unit a
                    // second time, which an ECC flash refuses. Once a unit that is not all
                    // ones is programmed, the slot reads written. The check word is never
                    // all ones, so the slot's last unit always is programmed.
                    let w = F::WRITE_SIZE;
                    let mut from = 4;
                    while buf[from..from + w].iter().all(|&b| b == 0xFF) {
                        from += w;
                    }
                    if from < check_at {
                        aw!(flash.write(addr + (from - 4) as u32, &buf[from..check_at]))
                            .map_err(JournalError::Flash)?;
                    }
                    let from = from.max(check_at);
                    aw!(flash.write(addr + (from - 4) as u32, &buf[from..]))
                        .map_err(JournalError::Flash)?;
                    self.cursor_page_fresh = fresh;
                    self.newest = Some(self.cursor);
                    self.newest_seq = seq;
                    self.appended += 1;
                    self.advance();
                    return Ok(());
                }
                // Not blank (a torn write from before a crash): skip the slot whole, and say
                // so in the record that follows.
                self.advance();
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
            let (state, base) = aw!(self.header(flash, page, None))?;
            let mut sum = PageSummary {
                state,
                valid: 0,
                torn: 0,
                blank: 0,
                newest_seq: None,
            };
            if state == PageState::Blank {
                return Ok(sum);
            }
            // An unformatted page is counted too, with the first sequence number its header
            // still reads: records in it are damage to show.
            let mut buf = [0u8; 4 + MAX_SLOT_SIZE];
            for slot in 0..self.slots_per_page() {
                match aw!(self.read_slot(flash, SlotAddr { page, slot }, base, &mut buf))? {
                    Some(seq) => {
                        sum.valid += 1;
                        sum.newest_seq = Some(sum.newest_seq.map_or(seq, |s| s.max(seq)));
                    }
                    None if buf[4..4 + self.slot as usize].iter().all(|&b| b == 0xFF) => {
                        sum.blank += 1
                    }
                    None => sum.torn += 1,
                }
            }
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
    /// not); a valid header of another journal is an error, but for the journal tagged
    /// `stale` ([`PageState::Stale`]).
    fn header<F: Flash>(
        &self,
        flash: &mut F,
        page: u32,
        stale: Option<u32>,
    ) -> io!(Result<(PageState, u32), JournalError<F::Error>>) {
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
            if h.iter().all(|&b| b == 0xFF) {
                // Past the CRC word on a word flash; on a wider one, the padding too.
                let rest = base + if crc_at == 16 { 20 } else { 16 };
                let state = if aw!(blank(flash, rest, base + F::ERASE_SIZE as u32 - rest))? {
                    PageState::Blank
                } else {
                    PageState::Unformatted
                };
                return Ok((state, first_seq));
            }
            let version = (word(4) & 0xFFFF) as u16;
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
                return Ok((PageState::Unformatted, first_seq));
            }
            let slot = word(4) >> 16;
            if version != FORMAT_VERSION || slot != self.slot || word(8) != self.tag {
                // The journal this one migrates from (its slot size is its own).
                if version == FORMAT_VERSION && stale == Some(word(8)) {
                    return Ok((PageState::Stale, first_seq));
                }
                return Err(JournalError::Foreign {
                    page,
                    tag: word(8),
                    version,
                });
            }
            Ok((PageState::Valid, first_seq))
        })
    }

    /// See [`Journal::recent`]: `visit` gets each valid record's sequence number, slot and
    /// payload bytes, newest first.
    fn walk_back<F: Flash>(
        &self,
        flash: &mut F,
        visit: &mut SlotVisit<'_>,
    ) -> io!(Result<(), JournalError<F::Error>>) {
        body!({
            let Some(mut at) = self.newest else {
                return Ok(());
            };
            // Whether every slot since the record visited last held a valid record, or that
            // record was written over exactly the torn slots between.
            let slot = (self.slot as usize).clamp(4, MAX_SLOT_SIZE);
            let mut buf = [0u8; 4 + MAX_SLOT_SIZE];
            let mut checked = None;
            let mut base = 0;
            // The torn slots the record visited last was written over, and the slots without a
            // valid record met since.
            let (mut vouched, mut gap) = (0, 0);
            for _ in 0..self.region.pages * self.slots_per_page() {
                if checked != Some(at.page) {
                    let (state, first_seq) = aw!(self.header(flash, at.page, None))?;
                    if state != PageState::Valid {
                        break;
                    }
                    checked = Some(at.page);
                    base = first_seq;
                }
                match aw!(self.read_record(flash, at, base, &mut buf))? {
                    Some((seq, _))
                        if !visit(
                            seq,
                            at,
                            &buf[4..4 + slot - unit::<F>().min(slot)],
                            gap == vouched || (vouched == TORN_MAX && gap > TORN_MAX),
                        ) =>
                    {
                        break;
                    }
                    Some((_, torn)) => (vouched, gap) = (torn, 0),
                    None => gap += 1,
                }
                at = if at.slot > 0 {
                    SlotAddr {
                        page: at.page,
                        slot: at.slot - 1,
                    }
                } else {
                    SlotAddr {
                        page: at.page.checked_sub(1).unwrap_or(self.region.pages - 1),
                        slot: self.slots_per_page() - 1,
                    }
                };
            }
            Ok(())
        })
    }

    /// Reads the slot at `at`, in a page whose first sequence number is `base`, into
    /// `buf`; its sequence number when it holds a valid record.
    fn read_slot<F: Flash>(
        &self,
        flash: &mut F,
        at: SlotAddr,
        base: u32,
        buf: &mut SlotBuf,
    ) -> io!(Result<Option<u32>, JournalError<F::Error>>) {
        body!({ Ok(aw!(self.read_record(flash, at, base, buf))?.map(|(seq, _)| seq)) })
    }

    /// [`Ring::read_slot`], and how many torn slots were stepped over to write the record
    /// (as its check word counts them).
    fn read_record<F: Flash>(
        &self,
        flash: &mut F,
        at: SlotAddr,
        base: u32,
        buf: &mut SlotBuf,
    ) -> io!(Result<Option<(u32, u32)>, JournalError<F::Error>>) {
        body!({
            // A slot holds at least its check word, and fits the buffer.
            let slot = (self.slot as usize).clamp(4, MAX_SLOT_SIZE);
            aw!(flash.read(self.slot_address::<F>(at), &mut buf[4..4 + slot]))
                .map_err(JournalError::Flash)?;
            let seq = base.wrapping_add(at.slot);
            buf[..4].copy_from_slice(&seq.to_le_bytes());
            // The check word starts the slot's last unit (`slot` is at least one unit).
            let c = 4 + slot - unit::<F>().min(slot);
            let check = u32::from_le_bytes([buf[c], buf[c + 1], buf[c + 2], buf[c + 3]]);
            // A check word that reads erased was never written (`check_word` never is one).
            if check == ERASED_WORD {
                return Ok(None);
            }
            if unit::<F>() >= 8
                && u32::from_le_bytes([buf[c + 4], buf[c + 5], buf[c + 6], buf[c + 7]]) != !check
            {
                return Ok(None);
            }
            // `check_word` in reverse: the stored word is the CRC, or the CRC XOR the mark, with
            // the low bit cleared where that made `0xFFFF_FFFF`.
            let sealed = if check == ERASED_WORD & !1 { !1 } else { !0 };
            let mark = (crc32c(&buf[..c]) ^ check) & sealed;
            let torn = (mark & TORN_BITS) >> 1;
            Ok((mark == torn_mark(torn)).then_some((seq, torn)))
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
            h[12..16].copy_from_slice(&self.cursor_base.to_le_bytes());
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
            self.cursor_page_ready = true;
            self.cursor_page_fresh = true;
            Ok(())
        })
    }

    fn slot_address<F: Flash>(&self, at: SlotAddr) -> u32 {
        self.region.start + at.page * (F::ERASE_SIZE as u32) + header::<F>() + at.slot * self.slot
    }
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
