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

/// The public doors to the flash steps, written once for both builds: each
/// `pub fn name | name_async` becomes `name`, generic over the blocking `NorFlash` and
/// calling the step of the caller's `blocking` module, and (feature `async`)
/// `name_async`, generic over the async `NorFlash` and awaiting the same step of its
/// `asynch` module. The flash's type parameter is named after `flash`; after `drive`, a
/// type that must have the flash steps of a consumer's sinks (the `Drive` that the
/// caller's `blocking` and `asynch` modules bring in: `persist::blocking::Drive`, and
/// `persist::asynch::Drive`). An async door's doc links to its blocking twin
/// (`in Self` for a method, `in self` for a function), with an optional sentence after
/// its name.
macro_rules! doors {
    (in $scope:ident; $(
        $(#[doc = $doc:literal])*
        pub fn $name:ident | $aname:ident $(($adoc:literal))?
            [$($gen:tt)*] flash $f:ident $(drive $k:ident)?
            ($($args:tt)*) -> $ret:ty
            $(where [$($where:tt)*])?
            => $fun:ident $(::<$($turbo:ty),*>)? ($($arg:expr),*);
    )*) => { $(
        $(#[doc = $doc])*
        pub fn $name<$($gen)*>($($args)*) -> $ret
        where
            $f: embedded_storage::nor_flash::NorFlash,
            $($k: blocking::Drive,)?
            $($($where)*)?
        {
            blocking::$fun $(::<$($turbo),*>)? ($($arg),*)
        }

        #[doc = concat!(
            "[`", stringify!($name), "`](", stringify!($scope), "::", stringify!($name),
            ") on an async flash (feature `async`)."
            $(, " ", $adoc)?
        )]
        #[cfg(feature = "async")]
        pub async fn $aname<$($gen)*>($($args)*) -> $ret
        where
            $f: embedded_storage_async::nor_flash::NorFlash,
            $($k: asynch::Drive,)?
            $($($where)*)?
        {
            asynch::$fun $(::<$($turbo),*>)? ($($arg),*).await
        }
    )* };
    // A `const fn` door: the same expression in both builds, over the flash's constants.
    (const in $scope:ident; $(
        $(#[doc = $doc:literal])*
        pub const fn $name:ident | $aname:ident $(($adoc:literal))?
            [$($gen:tt)*] flash $f:ident ($($args:tt)*) -> $ret:ty => $body:expr;
    )*) => { $(
        $(#[doc = $doc])*
        pub const fn $name<$($gen)*>($($args)*) -> $ret
        where
            $f: embedded_storage::nor_flash::NorFlash,
        {
            $body
        }

        #[doc = concat!(
            "[`", stringify!($name), "`](", stringify!($scope), "::", stringify!($name),
            ") on an async flash (feature `async`)."
            $(, " ", $adoc)?
        )]
        #[cfg(feature = "async")]
        pub const fn $aname<$($gen)*>($($args)*) -> $ret
        where
            $f: embedded_storage_async::nor_flash::NorFlash,
        {
            $body
        }
    )* };
}
pub(crate) use doors;
