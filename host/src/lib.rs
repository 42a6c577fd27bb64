//! hpcgate (in progress).
