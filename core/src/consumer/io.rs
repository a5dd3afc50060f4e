// The consumer's flash steps, written once and compiled twice (`crate::io`): included by
// `consumer::blocking` and `consumer::asynch`. `Consumer`'s methods are the doors to them.

/// [`Consumer::open`].
pub(super) fn open<K: Drive, F: Flash>(
    flash: &mut F,
    layout: Layout,
    sinks: K,
    config: ConsumerConfig,
) -> io!(Result<Consumer<K>, ErrorOf<F, K>>) {
    body!({
        let Recovered {
            durable,
            state,
            rejected,
            next: resume_at,
        } = aw!(Drive::open(&sinks, flash, &layout))?;
        Ok(Consumer {
            sinks,
            state,
            rejected,
            durable,
            cursor: Cursor {
                config,
                next: resume_at,
                resume_at,
                delivered: None,
                written: 0,
                outcome: Outcome::Skipped,
                commit_due: None,
                broken: false,
            },
        })
    })
}

/// [`Consumer::open_or_reset`].
pub(super) fn open_or_reset<K: Drive, F: Flash>(
    flash: &mut F,
    layout: Layout,
    sinks: K,
    config: ConsumerConfig,
) -> io!(Result<(Consumer<K>, Opened), ErrorOf<F, K>>) {
    body!({
        let why = match aw!(open(flash, layout, sinks.clone(), config)) {
            Ok(consumer) => return Ok((consumer, Opened::Recovered)),
            Err(ConsumerError::Journal(JournalError::Foreign { page, tag, version })) => {
                Opened::Reset(Reset::Foreign { page, tag, version })
            }
            Err(ConsumerError::Journal(JournalError::Decode)) => Opened::Reset(Reset::Decode),
            Err(e) => return Err(e),
        };
        for region in [layout.positions, layout.sink] {
            if region.pages > 0 {
                let end = region.start + region.pages * F::ERASE_SIZE as u32;
                aw!(flash.erase(region.start, end))
                    .map_err(|e| ConsumerError::Journal(JournalError::Flash(e)))?;
            }
        }
        Ok((aw!(open(flash, layout, sinks, config))?, why))
    })
}

/// [`Consumer::open_or_start_at`].
pub(super) fn open_or_start_at<K: Drive, F: Flash>(
    flash: &mut F,
    layout: Layout,
    sinks: K,
    config: ConsumerConfig,
    start: Offset,
) -> io!(Result<(Consumer<K>, Opened), ErrorOf<F, K>>)
where
    K::State: Default,
{
    body!({
        let (mut c, opened) = aw!(open_or_reset(flash, layout, sinks, config))?;
        let fresh = c.cursor.resume_at == 0
            && c.state == K::State::default()
            && c.rejected == K::Rejections::default();
        if fresh && start > 0 {
            // One record, or two phases for a two-phase store: a cut between them rolls
            // back to this same fresh store, which starts here again.
            while aw!(<K as Drive>::commit(
                &mut c.durable,
                flash,
                &mut c.state,
                c.rejected,
                start,
            ))
            .inspect_err(|_| c.cursor.broken = true)?
                != Phase::Committed
            {}
            (c.cursor.next, c.cursor.resume_at) = (start, start);
        }
        Ok((c, opened))
    })
}

/// [`Consumer::step`].
pub(super) fn step<K: Drive, F: Flash, L: Log<K::Payload> + ?Sized>(
    consumer: &mut Consumer<K>,
    flash: &mut F,
    log: &L,
) -> io!(Result<Step<K::Payload>, ErrorOf<F, K>>) {
    body!({
        let c = consumer;
        match c.cursor.due(log) {
            Due::Write(event, sink) => {
                let outcome = aw!(Drive::write(
                    &c.sinks,
                    &mut c.durable,
                    flash,
                    &mut c.state,
                    &mut c.rejected,
                    &event,
                    sink,
                ))
                .inspect_err(|e| c.cursor.broken = matches!(e, ConsumerError::Journal(_)))?;
                Ok(c.cursor.written(event, outcome, K::WRITES, known_end(log)))
            }
            Due::Commit(next) => {
                let phase = aw!(<K as Drive>::commit(
                    &mut c.durable,
                    flash,
                    &mut c.state,
                    c.rejected,
                    next,
                ))
                .inspect_err(|_| c.cursor.broken = true)?;
                Ok(c.cursor.committed(next, phase))
            }
            Due::Report(step) => Ok(step),
            Due::Broken => Err(ConsumerError::Reopen),
        }
    })
}

/// [`Consumer::run`].
pub(super) fn run<K: Drive, F: Flash, L: Log<K::Payload> + ?Sized>(
    consumer: &mut Consumer<K>,
    flash: &mut F,
    log: &L,
) -> io!(Result<(), ErrorOf<F, K>>) {
    body!({
        while !matches!(aw!(step(consumer, flash, log))?, Step::Done) {}
        Ok(())
    })
}
