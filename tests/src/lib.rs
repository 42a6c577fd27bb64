//! Shared test support for hpcgate integration tests.
