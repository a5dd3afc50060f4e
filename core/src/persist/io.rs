// The persistence policies' flash steps, written once and compiled twice (`crate::io`):
// included by `persist::blocking` and `persist::asynch`.

fn open_positions<F: Flash>(
    flash: &mut F,
    layout: &Layout,
) -> io!(Result<(Journal<Position>, Position), JournalError<F::Error>>) {
    body!({
        let (j, p) = aw!(journal_io::open::<Position, F>(
            flash,
            layout.positions,
            positions_tag(layout)
        ))?;
        Ok((
            j,
            p.unwrap_or(Position {
                next: 0,
                sinks: [0; 2],
            }),
        ))
    })
}

fn open_sink<S: Store, R, F: Flash>(
    flash: &mut F,
    layout: &Layout,
    region: Region,
) -> io!(Result<OpenSink<R>, JournalError<F::Error>>)
where
    R: Serialize + serde::de::DeserializeOwned + MaxSize + Default,
{
    body!({
        let (j, record) = aw!(journal_io::open::<R, F>(
            flash,
            region,
            sink_tag::<S>(layout)
        ))?;
        Ok((j, record.unwrap_or_default()))
    })
}

/// Commits `next` after the store journal, recording its newest record beside it.
/// Commits `next`, recording the store journal's newest record beside it.
// Out of line on bare metal: inlined, it was copied into several callers
// (BENCHMARKS.md, "Firmware size").
#[cfg_attr(target_os = "none", inline(never))]
fn commit_position<R: Serialize + serde::de::DeserializeOwned + MaxSize, F: Flash>(
    this: &mut SinkThenPosition<R>,
    flash: &mut F,
    next: Offset,
) -> io!(Result<Phase, JournalError<F::Error>>) {
    body!({
        let sinks = [this.sink.newest_seq().unwrap_or(0), 0];
        aw!(journal_io::append_view(
            &mut this.positions,
            flash,
            &Position { next, sinks }
        ))?;
        this.committed = next;
        Ok(Phase::Committed)
    })
}

/// Appends the state of an [`EachEffect`] store to its journal.
fn append_each<S: Store, F: Flash>(
    sink: &mut Journal<EachRecord<S>>,
    flash: &mut F,
    committed: Offset,
    rejected: S::Rejections,
    state: &S::State,
) -> io!(Result<(), JournalError<F::Error>>) {
    body!({
        // Borrowed, not cloned: a large state (a message-id window) would cost more to
        // copy than to append.
        aw!(journal_io::append_view(
            sink,
            flash,
            &CoveredRef {
                covered: committed,
                rejected,
                state,
            },
        ))
    })
}

impl<S: Store> Policy<S> for EachEffect<S> {
    fn open<F: Flash>(
        flash: &mut F,
        layout: &Layout,
        sink: Region,
    ) -> io!(Result<StoreRecovered<Self, S>, ConsumerError<F::Error, S::Error>>) {
        body!({
            let (sink, record) = aw!(open_sink::<S, EachRecord<S>, F>(flash, layout, sink))?;
            let (positions, position) = aw!(open_positions(flash, layout))?;
            cross_check(0, &sink, record.covered, &position)?;
            let committed = position.next;
            Ok(Recovered {
                durable: Self(SinkThenPosition {
                    sink,
                    positions,
                    committed,
                }),
                state: record.state,
                rejected: record.rejected,
                next: committed,
            })
        })
    }

    fn effect<F: Flash>(
        &mut self,
        flash: &mut F,
        state: &S::State,
        rejected: S::Rejections,
        _: &Event<S::Payload>,
        outcome: Outcome,
    ) -> io!(Result<(), JournalError<F::Error>>) {
        body!({
            if outcome != Outcome::Skipped {
                aw!(append_each::<S, F>(
                    &mut self.0.sink,
                    flash,
                    self.0.committed,
                    rejected,
                    state
                ))?;
            }
            Ok(())
        })
    }

    fn commit<F: Flash>(
        &mut self,
        flash: &mut F,
        _: &mut S::State,
        _: S::Rejections,
        next: Offset,
    ) -> io!(Result<Phase, JournalError<F::Error>>) {
        body!({ aw!(commit_position(&mut self.0, flash, next)) })
    }
}

impl<S: Appendable> Policy<S> for Appended<S> {
    fn open<F: Flash>(
        flash: &mut F,
        layout: &Layout,
        region: Region,
    ) -> io!(Result<StoreRecovered<Self, S>, ConsumerError<F::Error, S::Error>>) {
        body!({
            let (sink, newest) = aw!(journal_io::open::<AppendedRecord<S>, F>(
                flash,
                region,
                sink_tag::<S>(layout)
            ))?;
            let keeps = region.pages.saturating_sub(1) * sink.slots_per_page();
            if keeps < S::MAX_NEEDED {
                return Err(ConsumerError::Region {
                    records: keeps,
                    needed: S::MAX_NEEDED,
                });
            }
            let (positions, position) = aw!(open_positions(flash, layout))?;
            cross_check(
                0,
                &sink,
                newest.as_ref().map_or(0, |r| r.covered),
                &position,
            )?;
            let state = match &newest {
                None => S::State::default(),
                Some(newest) => {
                    let (mut state, needed) = S::start(&newest.state);
                    let mut found = 0;
                    aw!(journal_io::recent(&sink, flash, |_, record, adjacent| {
                        // A record lost from the middle leaves slots between that no newer
                        // record says it stepped over (the journal tells writes cut short apart).
                        if found >= needed || !adjacent {
                            return false;
                        }
                        S::fold_back(&mut state, &record.state);
                        found += 1;
                        true
                    }))?;
                    S::finish(state).ok_or(ConsumerError::Disagree(Disagreement::RecordsLost {
                        needed,
                        found,
                    }))?
                }
            };
            let committed = position.next;
            Ok(Recovered {
                durable: Self(SinkThenPosition {
                    sink,
                    positions,
                    committed,
                }),
                state,
                rejected: newest.map(|r| r.rejected).unwrap_or_default(),
                next: committed,
            })
        })
    }

    fn effect<F: Flash>(
        &mut self,
        flash: &mut F,
        state: &S::State,
        rejected: S::Rejections,
        event: &Event<S::Payload>,
        outcome: Outcome,
    ) -> io!(Result<(), JournalError<F::Error>>) {
        body!({
            if outcome != Outcome::Skipped {
                let seq = self.0.sink.newest_seq().map_or(1, |n| n.wrapping_add(1));
                aw!(journal_io::append_view(
                    &mut self.0.sink,
                    flash,
                    &Covered {
                        covered: self.0.committed,
                        rejected,
                        state: S::delta(state, event, seq),
                    },
                ))?;
            }
            Ok(())
        })
    }

    fn commit<F: Flash>(
        &mut self,
        flash: &mut F,
        _: &mut S::State,
        _: S::Rejections,
        next: Offset,
    ) -> io!(Result<Phase, JournalError<F::Error>>) {
        body!({ aw!(commit_position(&mut self.0, flash, next)) })
    }
}

impl<S: Positioned> Policy<S> for Checkpoint<S> {
    fn open<F: Flash>(
        flash: &mut F,
        layout: &Layout,
        sink: Region,
    ) -> io!(Result<StoreRecovered<Self, S>, ConsumerError<F::Error, S::Error>>) {
        body!({
            let (sink, record) = aw!(open_sink::<S, CheckpointRecord<S>, F>(flash, layout, sink))?;
            let next = S::position(&record.state);
            Ok(Recovered {
                durable: Self { sink },
                state: record.state,
                rejected: record.rejected,
                next,
            })
        })
    }

    fn commit<F: Flash>(
        &mut self,
        flash: &mut F,
        state: &mut S::State,
        rejected: S::Rejections,
        next: Offset,
    ) -> io!(Result<Phase, JournalError<F::Error>>) {
        body!({
            S::set_position(state, next);
            aw!(journal_io::append_view(
                &mut self.sink,
                flash,
                &CountedRef { state, rejected }
            ))?;
            Ok(Phase::Committed)
        })
    }
}

impl<S: TwoPhaseRecord> Policy<S> for TwoPhase<S> {
    fn open<F: Flash>(
        flash: &mut F,
        layout: &Layout,
        sink: Region,
    ) -> io!(Result<StoreRecovered<Self, S>, ConsumerError<F::Error, S::Error>>) {
        body!({
            let (sink, record) = aw!(open_sink::<S, TwoPhaseRecordOf<S>, F>(flash, layout, sink))?;
            let Prepared {
                mut state,
                mut rejected,
                committed_rejected,
            } = record;
            let (positions, decided) = aw!(open_positions(flash, layout))?;
            let decided = decided.next;
            // The decision is written between the prepared and the committed record: it is
            // the store's committed position, or the position a prepared record waits for.
            let store = S::position(&state);
            if decided != store && S::prepared(&state) != Some(decided) {
                return Err(ConsumerError::Disagree(Disagreement::TwoPhase {
                    store,
                    decided,
                }));
            }
            let prepared = S::prepared(&state);
            if let Some(target) = prepared {
                // The position journal holds the decision. The resolution stays in RAM:
                // until the next prepared record supersedes the one in doubt, every recovery
                // reads the same decision and resolves it the same way, so opening an image
                // never writes (a read-only `status` can recover a two-phase store).
                let commit = decided >= target;
                S::resolve(&mut state, commit);
                if !commit {
                    rejected = committed_rejected;
                }
            }
            let next = S::position(&state);
            let resolved = prepared.map(|target| {
                if decided >= target {
                    Resolution::RolledForward { next }
                } else {
                    Resolution::RolledBack { next }
                }
            });
            Ok(Recovered {
                durable: Self {
                    sink,
                    positions,
                    prepared: None,
                    committed_rejected: rejected,
                    resolved,
                },
                state,
                rejected,
                next,
            })
        })
    }

    fn commit<F: Flash>(
        &mut self,
        flash: &mut F,
        state: &mut S::State,
        rejected: S::Rejections,
        next: Offset,
    ) -> io!(Result<Phase, JournalError<F::Error>>) {
        body!({
            if self.prepared != Some(next) {
                let mut record = state.clone();
                S::prepare(&mut record, next);
                aw!(journal_io::append_view(
                    &mut self.sink,
                    flash,
                    &Prepared {
                        state: record.clone(),
                        rejected,
                        committed_rejected: self.committed_rejected,
                    },
                ))?;
                *state = record;
                self.prepared = Some(next);
                return Ok(Phase::Prepared);
            }
            // The decision: once the position is durable, recovery rolls forward.
            aw!(journal_io::append_view(
                &mut self.positions,
                flash,
                &Position {
                    next,
                    sinks: [self.sink.newest_seq().unwrap_or(0), 0],
                },
            ))?;
            S::resolve(state, true);
            self.committed_rejected = rejected;
            aw!(journal_io::append_view(
                &mut self.sink,
                flash,
                &Prepared {
                    state: state.clone(),
                    rejected,
                    committed_rejected: rejected,
                },
            ))?;
            self.prepared = None;
            Ok(Phase::Committed)
        })
    }
}

/// The flash steps of what a consumer drives ([`Sinks`]): every [`Store`] and every
/// [`Pair`] has them.
pub trait Drive: Sinks {
    /// Recovers the sinks and the next offset to read from flash.
    fn open<F: Flash>(
        &self,
        flash: &mut F,
        layout: &Layout,
    ) -> io!(Result<SinksRecovered<Self>, ConsumerError<F::Error, Self::Error>>);

    /// Decides and applies `event` in sink number `sink` (`0..WRITES`), counts it in
    /// `rejected` if it was rejected, and makes it durable as the policy says.
    fn write<F: Flash>(
        &self,
        durable: &mut Self::Durable,
        flash: &mut F,
        state: &mut Self::State,
        rejected: &mut Self::Rejections,
        event: &Event<Self::Payload>,
        sink: usize,
    ) -> io!(Result<Outcome, ConsumerError<F::Error, Self::Error>>);

    /// Commits the position `next` (or takes the next phase towards it).
    fn commit<F: Flash>(
        durable: &mut Self::Durable,
        flash: &mut F,
        state: &mut Self::State,
        rejected: Self::Rejections,
        next: Offset,
    ) -> io!(Result<Phase, JournalError<F::Error>>);
}

impl<S: Store> Drive for S {
    fn open<F: Flash>(
        &self,
        flash: &mut F,
        layout: &Layout,
    ) -> io!(Result<SinksRecovered<Self>, ConsumerError<F::Error, S::Error>>) {
        body!({ aw!(<S::Persist as Policy<S>>::open(flash, layout, layout.sink)) })
    }

    // Inlined on a host; out of line on bare metal, where each copy costs flash
    // (BENCHMARKS.md, "Firmware size").
    #[cfg_attr(not(target_os = "none"), inline)]
    #[cfg_attr(target_os = "none", inline(never))]
    fn write<F: Flash>(
        &self,
        durable: &mut S::Persist,
        flash: &mut F,
        state: &mut S::State,
        rejected: &mut S::Rejections,
        event: &Event<S::Payload>,
        _: usize,
    ) -> io!(Result<Outcome, ConsumerError<F::Error, S::Error>>) {
        body!({
            let outcome = decide(self, state, rejected, event)?;
            aw!(Policy::effect(
                durable, flash, state, *rejected, event, outcome
            ))?;
            Ok(outcome)
        })
    }

    fn commit<F: Flash>(
        durable: &mut S::Persist,
        flash: &mut F,
        state: &mut S::State,
        rejected: S::Rejections,
        next: Offset,
    ) -> io!(Result<Phase, JournalError<F::Error>>) {
        body!({ aw!(Policy::commit(durable, flash, state, rejected, next)) })
    }
}

impl<A, B> Drive for Pair<A, B>
where
    A: Store<Persist = EachEffect<A>, Rejections = ()>,
    B: Store<Persist = EachEffect<B>, Rejections = (), Payload = A::Payload, Error = A::Error>,
{
    fn open<F: Flash>(
        &self,
        flash: &mut F,
        layout: &Layout,
    ) -> io!(Result<SinksRecovered<Self>, ConsumerError<F::Error, A::Error>>) {
        body!({
            let half = layout.sink.pages / 2;
            let a = Region {
                start: layout.sink.start,
                pages: half,
            };
            let b = Region {
                start: layout.sink.start + half * F::ERASE_SIZE as u32,
                pages: layout.sink.pages - half,
            };
            let (first, sa) = aw!(open_sink::<A, EachRecord<A>, F>(flash, layout, a))?;
            let (second, sb) = aw!(open_sink::<B, EachRecord<B>, F>(flash, layout, b))?;
            let (positions, position) = aw!(open_positions(flash, layout))?;
            cross_check(0, &first, sa.covered, &position)?;
            cross_check(1, &second, sb.covered, &position)?;
            let committed = position.next;
            Ok(Recovered {
                durable: PairJournals {
                    first,
                    second,
                    positions,
                    committed,
                },
                state: (sa.state, sb.state),
                rejected: (),
                next: committed,
            })
        })
    }

    fn write<F: Flash>(
        &self,
        durable: &mut Self::Durable,
        flash: &mut F,
        state: &mut Self::State,
        rejected: &mut (),
        event: &Event<A::Payload>,
        sink: usize,
    ) -> io!(Result<Outcome, ConsumerError<F::Error, A::Error>>) {
        body!({
            let (outcome, appended) = match sink {
                0 => {
                    let o = decide(&self.first, &mut state.0, rejected, event)?;
                    let r = if o == Outcome::Applied {
                        Some(aw!(append_each::<A, F>(
                            &mut durable.first,
                            flash,
                            durable.committed,
                            (),
                            &state.0,
                        )))
                    } else {
                        None
                    };
                    (o, r)
                }
                _ => {
                    let o = decide(&self.second, &mut state.1, rejected, event)?;
                    let r = if o == Outcome::Applied {
                        Some(aw!(append_each::<B, F>(
                            &mut durable.second,
                            flash,
                            durable.committed,
                            (),
                            &state.1,
                        )))
                    } else {
                        None
                    };
                    (o, r)
                }
            };
            appended.transpose()?;
            Ok(outcome)
        })
    }

    fn commit<F: Flash>(
        durable: &mut Self::Durable,
        flash: &mut F,
        _: &mut Self::State,
        _: (),
        next: Offset,
    ) -> io!(Result<Phase, JournalError<F::Error>>) {
        body!({
            let sinks = [
                durable.first.newest_seq().unwrap_or(0),
                durable.second.newest_seq().unwrap_or(0),
            ];
            aw!(journal_io::append_view(
                &mut durable.positions,
                flash,
                &Position { next, sinks }
            ))?;
            durable.committed = next;
            Ok(Phase::Committed)
        })
    }
}

/// [`crate::persist::migrate_checkpoint`].
pub(crate) fn migrate_checkpoint<Old, New, F: Flash>(
    flash: &mut F,
    layout: &Layout,
    migrate: impl FnOnce(Old::State) -> New::State,
) -> io!(Result<bool, JournalError<F::Error>>)
where
    Old: Positioned,
    New: Positioned<Rejections = Old::Rejections>,
{
    const { new_tag(Old::TAG, New::TAG) }
    body!({
        aw!(migrate_newest::<Old, New, _, _, F>(
            flash,
            layout,
            |old: CheckpointRecord<Old>| {
                let next = Old::position(&old.state);
                let mut state = migrate(old.state);
                // The position is the store's own: it moves whatever `migrate` did.
                New::set_position(&mut state, next);
                Counted {
                    state,
                    rejected: old.rejected,
                }
            },
        ))
    })
}

/// [`crate::persist::migrate_two_phase`].
pub(crate) fn migrate_two_phase<Old, New, F: Flash>(
    flash: &mut F,
    layout: &Layout,
    migrate: impl FnOnce(Old::State) -> New::State,
) -> io!(Result<bool, JournalError<F::Error>>)
where
    Old: TwoPhaseRecord,
    New: TwoPhaseRecord<Rejections = Old::Rejections>,
{
    const { new_tag(Old::TAG, New::TAG) }
    body!({
        // The decision a prepared record waits for, as recovery reads it.
        let (_, decided) = aw!(open_positions(flash, layout))?;
        aw!(migrate_newest::<Old, New, _, _, F>(
            flash,
            layout,
            |old: TwoPhaseRecordOf<Old>| {
                let (state, rejected) = resolved::<Old>(old, decided.next);
                let next = Old::position(&state);
                let mut state = migrate(state);
                // Committed at the old position, with nothing in doubt.
                New::prepare(&mut state, next);
                New::resolve(&mut state, true);
                Prepared {
                    state,
                    rejected,
                    committed_rejected: rejected,
                }
            },
        ))
    })
}

/// [`crate::persist::migrate_each`].
pub(crate) fn migrate_each<Old, New, F: Flash>(
    flash: &mut F,
    layout: &Layout,
    migrate: impl FnOnce(Old::State) -> New::State,
) -> io!(Result<bool, JournalError<F::Error>>)
where
    Old: Store<Persist = EachEffect<Old>>,
    New: Store<Persist = EachEffect<New>, Rejections = Old::Rejections>,
{
    const { new_tag(Old::TAG, New::TAG) }
    body!({
        aw!(migrate_newest::<Old, New, _, _, F>(
            flash,
            layout,
            each_record::<Old, New>(migrate),
        ))
    })
}

/// Where the store journal of `layout` still holds `Old`'s records, its newest through
/// `migrate` as `New`'s first ([`Journal::open_migrating`]); `Ok(false)` where it holds a
/// third encoding ([`not_ours`]).
fn migrate_newest<Old: Store, New: Store, R, N, F: Flash>(
    flash: &mut F,
    layout: &Layout,
    migrate: impl FnOnce(R) -> N,
) -> io!(Result<bool, JournalError<F::Error>>)
where
    R: Serialize + serde::de::DeserializeOwned + MaxSize,
    N: Serialize + serde::de::DeserializeOwned + MaxSize,
{
    body!({
        let migrated = aw!(journal_io::open_migrating(
            flash,
            layout.sink,
            sink_tag::<New>(layout),
            sink_tag::<Old>(layout),
            migrate
        ));
        not_ours(migrated.map(|(_, _, migrated)| migrated))
    })
}
