//! embassy-net's `TcpSocket` as the session's [`Transport`]: reads wait at most
//! [`QUIET_MS`] (embassy-time's `with_timeout`; a read cancelled there has taken nothing
//! from the socket), writes go through embedded-io-async's `write_all`.

use embassy_net::tcp::{Error, TcpSocket};
use embassy_time::{Duration, Instant, with_timeout};
use embedded_io_async::Write;

use crate::{Got, QUIET_MS, Transport};

/// A connected `TcpSocket`.
pub struct Tcp<'s, 'd> {
    /// The socket, connected.
    pub socket: &'s mut TcpSocket<'d>,
}

impl Transport for Tcp<'_, '_> {
    type Error = Error;

    async fn read(&mut self, buf: &mut [u8]) -> Result<Got, Error> {
        match with_timeout(Duration::from_millis(QUIET_MS), self.socket.read(buf)).await {
            Err(_) => Ok(Got::Quiet),
            Ok(Ok(0)) => Ok(Got::Closed),
            Ok(Ok(n)) => Ok(Got::Bytes(n)),
            Ok(Err(e)) => Err(e),
        }
    }

    async fn write(&mut self, bytes: &[u8]) -> Result<(), Error> {
        self.socket.write_all(bytes).await
    }

    async fn flush(&mut self) -> Result<(), Error> {
        self.socket.flush().await
    }

    fn now_ms(&self) -> u64 {
        Instant::now().as_millis()
    }
}
