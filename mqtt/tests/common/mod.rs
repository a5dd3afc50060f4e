//! What the receiver's and the client's tests share: a store of the test's own (an
//! `i64` sum: the receiver takes any idem-core store).

use core::convert::Infallible;

use idem_core::log::Event;
use idem_core::store::{Outcome, Store};

/// Adds each payload; refuses a negative one.
#[derive(Debug, Clone)]
pub struct Sum;

impl Store for Sum {
    type Payload = i64;
    type State = i64;
    type Error = Infallible;
    type Rejections = ();
    type Persist = idem_core::persist::EachEffect<Self>;
    const TAG: u32 = 0x7E57_0100;
    fn check(&self, _: &i64, e: &Event<i64>) -> Result<Outcome, Infallible> {
        Ok(if e.payload < 0 {
            Outcome::Rejected
        } else {
            Outcome::Applied
        })
    }
    fn apply(&self, total: &mut i64, e: &Event<i64>) {
        *total += e.payload;
    }
}
