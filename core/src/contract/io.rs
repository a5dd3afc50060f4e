// A persistence policy's flash steps, the trait both builds name, written once and
// compiled twice (`crate::io`): included by `contract::blocking` and `contract::asynch`.
// Each policy's steps are in `persist/io.rs`.

/// A persistence policy's flash steps: recovery, the effect and the commit. Every
/// [`Persistence`] has them in both builds.
pub trait Policy<S: Store>: Sized {
    /// Recovers from flash: the policy's RAM, the store's state, the count of rejected
    /// events and the next offset to read. Journals that disagree are refused before
    /// anything is written.
    fn open<F: Flash>(
        flash: &mut F,
        layout: &Layout,
        sink: Region,
    ) -> io!(Result<StoreRecovered<Self, S>, ConsumerError<F::Error, S::Error>>);

    /// Makes the effect of `event` durable, if the policy writes one (`outcome` says
    /// whether the state changed or the event was rejected; `rejected` is the count after
    /// it). By default effects stay in RAM until the commit.
    fn effect<F: Flash>(
        &mut self,
        _flash: &mut F,
        _state: &S::State,
        _rejected: S::Rejections,
        _event: &Event<S::Payload>,
        _outcome: Outcome,
    ) -> io!(Result<(), JournalError<F::Error>>) {
        body!({ Ok(()) })
    }

    /// Makes the position `next` durable, or takes the next phase towards it.
    fn commit<F: Flash>(
        &mut self,
        flash: &mut F,
        state: &mut S::State,
        rejected: S::Rejections,
        next: Offset,
    ) -> io!(Result<Phase, JournalError<F::Error>>);
}
