//! End-to-end tests of idem live in `tests/tests/`.
