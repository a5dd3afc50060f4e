//! The consumer over the payment stores: the DDIA figures, one region for a state that
//! carries its position, a store of another encoding, a live stream through a bounded
//! window, a journal error, two-phase recovery and at-most-once; each case once over the blocking steps and
//! once over the async ones.

/// The cases on the blocking steps.
mod blocking {
    use embedded_storage::nor_flash::NorFlash as Flash;
    use idem_core::consumer::{Consumer, ErrorOf};
    use idem_core::persist::blocking::Drive;

    fn open<K: Drive, Fl: Flash>(
        flash: &mut Fl,
        layout: Layout,
        sinks: K,
        config: ConsumerConfig,
    ) -> Result<Consumer<K>, ErrorOf<Fl, K>> {
        Consumer::open(flash, layout, sinks, config)
    }

    fn open_or_reset<K: Drive, Fl: Flash>(
        flash: &mut Fl,
        layout: Layout,
        sinks: K,
        config: ConsumerConfig,
    ) -> Result<(Consumer<K>, Opened), ErrorOf<Fl, K>> {
        Consumer::open_or_reset(flash, layout, sinks, config)
    }

    fn step<K: Drive, Fl: Flash, L: Log<K::Payload> + ?Sized>(
        c: &mut Consumer<K>,
        flash: &mut Fl,
        log: &L,
    ) -> Result<Step<K::Payload>, ErrorOf<Fl, K>> {
        c.step(flash, log)
    }

    fn run<K: Drive, Fl: Flash, L: Log<K::Payload> + ?Sized>(
        c: &mut Consumer<K>,
        flash: &mut Fl,
        log: &L,
    ) -> Result<(), ErrorOf<Fl, K>> {
        c.run(flash, log)
    }

    include!("consumer/cases.rs");
}

/// The same cases on the async steps.
mod asynch {
    use embassy_futures::block_on;
    use embedded_storage_async::nor_flash::NorFlash as Flash;
    use idem_core::consumer::{Consumer, ErrorOf};
    use idem_core::persist::asynch::Drive;

    fn open<K: Drive, Fl: Flash>(
        flash: &mut Fl,
        layout: Layout,
        sinks: K,
        config: ConsumerConfig,
    ) -> Result<Consumer<K>, ErrorOf<Fl, K>> {
        block_on(Consumer::open_async(flash, layout, sinks, config))
    }

    fn open_or_reset<K: Drive, Fl: Flash>(
        flash: &mut Fl,
        layout: Layout,
        sinks: K,
        config: ConsumerConfig,
    ) -> Result<(Consumer<K>, Opened), ErrorOf<Fl, K>> {
        block_on(Consumer::open_or_reset_async(flash, layout, sinks, config))
    }

    fn step<K: Drive, Fl: Flash, L: Log<K::Payload> + ?Sized>(
        c: &mut Consumer<K>,
        flash: &mut Fl,
        log: &L,
    ) -> Result<Step<K::Payload>, ErrorOf<Fl, K>> {
        block_on(c.step_async(flash, log))
    }

    fn run<K: Drive, Fl: Flash, L: Log<K::Payload> + ?Sized>(
        c: &mut Consumer<K>,
        flash: &mut Fl,
        log: &L,
    ) -> Result<(), ErrorOf<Fl, K>> {
        block_on(c.run_async(flash, log))
    }

    include!("consumer/cases.rs");
}
