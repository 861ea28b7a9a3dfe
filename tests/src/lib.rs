//! End-to-end tests live in `tests/tests/*.rs`; they start the real `hostd` and `sovctl`
//! binaries built by Cargo and talk to them over real TLS on loopback.
