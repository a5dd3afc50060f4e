//! End-to-end tests of idem live in `tests/tests/`; what several of them share lives here.

pub mod mosquitto;
