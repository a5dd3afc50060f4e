//! Each flash step is written once and compiled twice: as plain blocking code over
//! `embedded_storage`'s `NorFlash`, and (feature `async`) as futures over
//! `embedded_storage_async`'s. A module's flash steps live in a file of their own
//! (`journal/io.rs`, `persist/io.rs`, `consumer/io.rs`), included into a `blocking` and
//! an `asynch` module that bring one of the two sets of words below into scope:
//!
//! - `Flash`: the flash trait the steps are generic over (both have the same methods and
//!   constants, and share `ErrorType`);
//! - `aw!(call)`: a call to another flash step: the call itself, or the call awaited;
//! - `io!(T)`: what a flash step returns: `T`, or `impl Future<Output = T>`;
//! - `body!({ .. })`: a flash step's body: the block, or `async move` over it.
//!
//! So the blocking build is the code as written, with nothing polled (idem-feed is the
//! same size with and without it: BENCHMARKS.md, "Blocking and async"), and the async
//! build awaits the same lines. No crate was used for it: maybe-async-cfg, the one that
//! generates both from one source, is a procedural macro (syn in every firmware build)
//! last released in 2022, and these are three `macro_rules!` lines a mode.

/// The words of the blocking build.
pub(crate) mod blocking {
    pub(crate) use embedded_storage::nor_flash::NorFlash as Flash;

    macro_rules! aw {
        ($e:expr) => {
            $e
        };
    }
    macro_rules! io {
        ($t:ty) => {
            $t
        };
    }
    macro_rules! body {
        ($b:block) => {
            $b
        };
    }
    pub(crate) use {aw, body, io};
}

/// The words of the async build.
#[cfg(feature = "async")]
pub(crate) mod asynch {
    pub(crate) use embedded_storage_async::nor_flash::NorFlash as Flash;

    macro_rules! aw {
        ($e:expr) => {
            $e.await
        };
    }
    macro_rules! io {
        ($t:ty) => {
            impl core::future::Future<Output = $t>
        };
    }
    macro_rules! body {
        ($b:block) => {
            async move $b
        };
    }
    pub(crate) use {aw, body, io};
}
