// The ledger's flash steps, written once and compiled twice (`crate::io`): included by
// `effects::blocking` and `effects::asynch`.

/// [`crate::effects::Ledger::open`].
pub(super) fn open<F: Flash>(
    flash: &mut F,
    region: Region,
    tag: u32,
) -> io!(Result<Ledger, JournalError<F::Error>>) {
    body!({
        let (journal, done) = aw!(journal_io::open::<Done, F>(flash, region, tag))?;
        Ok(Ledger::of(journal, done))
    })
}

/// [`crate::effects::Ledger::done`].
pub(super) fn done<F: Flash>(
    ledger: &mut Ledger,
    flash: &mut F,
    serial: u32,
) -> io!(Result<(), JournalError<F::Error>>) {
    body!({
        aw!(journal_io::append_view(
            &mut ledger.journal,
            flash,
            &Done { serial }
        ))?;
        ledger.done = serial;
        Ok(())
    })
}
