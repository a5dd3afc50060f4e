// The message-id window's migration, written once and compiled twice (`crate::io`):
// included by `store::blocking` and `store::asynch`. `migrate_window` and
// `migrate_window_async` are the doors to it.

/// A window's record under the store `S` (what [`Appended`] writes for it).
type WindowRecord<S> = Covered<IdApplied<<S as Store>::State>, <S as Store>::Rejections>;

/// [`crate::store::migrate_window`].
pub(crate) fn migrate_window<O, N, const W: usize, const EVICT: bool, F: Flash>(
    flash: &mut F,
    layout: &Layout,
    migrate: impl FnOnce(O::State) -> N::State,
) -> io!(Result<bool, JournalError<F::Error>>)
where
    O: Store,
    N: Store<Rejections = O::Rejections>,
    MessageIdWindow<O, W, EVICT>: Store,
    MessageIdWindow<N, W, EVICT>: Store,
{
    const {
        new_tag(
            <MessageIdWindow<O, W, EVICT> as Store>::TAG,
            <MessageIdWindow<N, W, EVICT> as Store>::TAG,
        );
        room_to_migrate::<WindowRecord<O>, WindowRecord<N>>(W, F::WRITE_SIZE, F::ERASE_SIZE);
    }
    body!({
        let old_tag = sink_tag::<MessageIdWindow<O, W, EVICT>>(layout);
        let new_tag = sink_tag::<MessageIdWindow<N, W, EVICT>>(layout);
        match aw!(journal_io::open::<WindowRecord<O>, F>(flash, layout.sink, old_tag)) {
            Ok((journal, Some(newest))) => aw!(compact::<O, W, F>(journal, flash, newest))?,
            // Blank, or the migration's own pages already there (a boot cut short), or
            // another encoding (a later one in a chain: nothing for this step).
            Ok((_, None)) | Err(JournalError::Foreign { .. }) => {}
            Err(e) => return Err(e),
        }
        let held = |r: &WindowRecord<N>| u32::from(r.state.held).min(W as u32);
        let migrated = |old: WindowRecord<O>| Covered {
            covered: old.covered,
            rejected: old.rejected,
            state: IdApplied {
                id: old.state.id,
                state: migrate(old.state.state),
                evicted: old.state.evicted,
                held: old.state.held,
            },
        };
        let carry = |newest: &WindowRecord<N>, older: WindowRecord<O>| {
            let mut record = newest.clone();
            record.state.id = older.state.id;
            record
        };
        let (journal, _, done, stale) = match aw!(journal_io::open_migrating_many(
            flash,
            layout.sink,
            (new_tag, old_tag),
            held,
            migrated,
            carry
        )) {
            Ok(opened) => opened,
            Err(e) => return not_ours(Err(e)),
        };
        if stale {
            aw!(name_the_migrated(&journal, flash, layout))?;
            aw!(journal_io::erase_stale_pages(&journal, flash, old_tag))?;
        }
        Ok(done)
    })
}

/// Before the old pages go: the position journal names the migrated journal's newest
/// record, which holds the state as of the same position, instead of an old record that
/// is about to be erased (a storage that reorders writes voids the records written after
/// the one it names: `Persistence::void_in_doubt`). Nothing when it names it already.
fn name_the_migrated<R, F: Flash>(
    journal: &Journal<R>,
    flash: &mut F,
    layout: &Layout,
) -> io!(Result<(), JournalError<F::Error>>)
where
    R: serde::Serialize + serde::de::DeserializeOwned + MaxSize,
{
    body!({
        let (mut positions, position) = aw!(journal_io::open::<Position, F>(
            flash,
            layout.positions,
            positions_tag(layout)
        ))?;
        if let (Some(p), Some(newest)) = (position, journal.newest_seq())
            && p.sinks[0] != newest
        {
            let named = Position {
                next: p.next,
                sinks: [newest, 0],
            };
            aw!(journal_io::append_view(&mut positions, flash, &named))?;
        }
        Ok(())
    })
}

/// Brings the window's records into the newest page, in their order, by appending
/// copies of them (each the newest record but for its id), oldest first: afterwards the
/// newest `held` records are the window in order, in one page, and the page after it
/// holds none of them. Every copy keeps the window a window: recovery after a cut among
/// them finds the same ids, turned (the newest copies last). This step finds how many
/// copies it had written, by the run of records equal to the newest but for the id (the
/// window's own records never are: each grew the window or evicted one more; the records
/// a migration wrote are, but nothing older follows them), and turns the ids back before
/// it goes on.
fn compact<S: Store, const W: usize, F: Flash>(
    mut journal: Journal<WindowRecord<S>>,
    flash: &mut F,
    newest: WindowRecord<S>,
) -> io!(Result<(), JournalError<F::Error>>) {
    body!({
        let held = usize::from(newest.state.held).min(W);
        let (Some(last), Some(last_seq)) = (journal.newest(), journal.newest_seq()) else {
            return Ok(());
        };
        // Newest first: the ids of the window's records, and how far the copies run.
        let mut ids = heapless::Vec::<[u8; 8], W>::new();
        let (mut run, mut in_run, mut ended, mut oldest) = (0, true, false, last_seq);
        aw!(journal_io::recent(&journal, flash, |seq, r: WindowRecord<S>, adjacent| {
            if !adjacent {
                return false;
            }
            let same = r.covered == newest.covered
                && r.rejected == newest.rejected
                && r.state.state == newest.state.state
                && (r.state.evicted, r.state.held) == (newest.state.evicted, newest.state.held);
            ended |= in_run && !same;
            in_run &= same;
            run += usize::from(in_run);
            if ids.len() < held {
                // Cannot fail: at most `held` <= W.
                let _ = ids.push(r.state.id);
                oldest = seq;
            }
            in_run || ids.len() < held
        }))?;
        // A run that no record of the window ends is a migration's own records, written
        // in order (a run of copies always ends at the window's record before them).
        let copied = if ended { run - 1 } else { 0 };
        let in_page = last_seq.wrapping_sub(oldest) <= last.slot;
        if ids.len() < held || copied >= held || (copied == 0 && in_page) {
            // Lost records are recovery's to refuse; a finished copy needs nothing more.
            return Ok(());
        }
        ids.reverse();
        let cursor = journal.cursor();
        let room = if cursor.page == last.page {
            journal.room()
        } else {
            0
        };
        if (room as usize) < held - copied {
            return Err(JournalError::NoSpace);
        }
        for i in copied..held {
            let mut copy = newest.clone();
            // The window's id `i`, oldest first: the ids read back are turned by the copies.
            copy.state.id = ids[(i + held - copied) % held];
            aw!(journal_io::append_view(&mut journal, flash, &copy))?;
        }
        Ok(())
    })
}
